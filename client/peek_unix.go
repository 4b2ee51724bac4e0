//go:build unix

package client

import (
	"errors"
	"net"
	"syscall"
)

// peekOpen reports whether conn is open with nothing to read, by a peek
// that does not wait (one system call).
func peekOpen(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(err, syscall.EAGAIN) // not closed (EOF), no data, no error
		return true                           // never wait
	})
	return err == nil && open
}
