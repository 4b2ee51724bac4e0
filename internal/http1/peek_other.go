//go:build !unix

package http1

import "net"

// idleOpen takes an idle connection to be open where it cannot peek.
func idleOpen(net.Conn) bool { return true }
