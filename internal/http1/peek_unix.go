//go:build unix

package http1

import (
	"net"
	"syscall"
)

// idleOpen reports whether an idle connection is still open and silent: a
// peek that does not wait finds no byte and no end (one system call). A
// connection it cannot peek at counts as open.
func idleOpen(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var perr error
	if err := rc.Read(func(fd uintptr) bool {
		var one [1]byte
		_, _, perr = syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		return false
	}
	return perr == syscall.EAGAIN || perr == syscall.EWOULDBLOCK // not 0 bytes (the end), not a byte
}
