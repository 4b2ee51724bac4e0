//go:build !unix

package client

import "net"

// peekOpen cannot tell without a peek: an idle connection is dropped.
func peekOpen(net.Conn) bool { return false }
