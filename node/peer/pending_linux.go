package peer

import (
	"net"
	"syscall"
)

// sentBytes reports whether c's peer has sent bytes that wait, unread, in
// its socket (a peek that neither blocks nor consumes them). False for a
// connection that is not a socket.
func sentBytes(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var n int
	var buf [1]byte
	_ = raw.Control(func(fd uintptr) {
		n, _, _ = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	return n > 0
}
