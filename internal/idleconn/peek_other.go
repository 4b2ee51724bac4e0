//go:build unix && !linux

package idleconn

import "syscall"

// peek looks for one byte on fd without taking it and without waiting:
// nil when there is one or the end, EAGAIN when there is nothing yet.
func peek(fd uintptr) error {
	var one [1]byte
	_, _, err := syscall.Recvfrom(int(fd), one[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err
}
