//go:build unix

package idleconn

import (
	"net"
	"syscall"
)

// Open reports whether conn, an idle connection, is still open and silent:
// a peek that does not wait finds no byte and no end (one system call).
// known is false where it cannot tell (conn has no file descriptor); the
// caller chooses what that means.
func Open(conn net.Conn) (open, known bool) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, true // closed
	}
	var perr error
	if err := rc.Read(func(fd uintptr) bool {
		perr = peek(fd)
		return true // never wait
	}); err != nil {
		return false, true
	}
	return perr == syscall.EAGAIN || perr == syscall.EWOULDBLOCK, true // not 0 bytes (the end), not a byte
}
