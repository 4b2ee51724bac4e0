//go:build !unix

package idleconn

import "net"

// Open cannot tell without a peek: known is false.
func Open(net.Conn) (open, known bool) { return false, false }
