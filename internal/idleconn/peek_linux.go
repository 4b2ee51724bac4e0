package idleconn

import (
	"syscall"
	"unsafe"
)

// peek looks for one byte on fd without taking it and without waiting:
// nil when there is one or the end, EAGAIN when there is nothing yet. A
// raw system call: it never blocks, and a call that tells the runtime it
// might (entersyscall) wakes the runtime's monitor thread when the process
// was idle, a futex call on a proxied request's path.
func peek(fd uintptr) error {
	var one [1]byte
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&one[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
