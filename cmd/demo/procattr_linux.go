package main

import (
	"errors"
	"syscall"
)

// sysProcAttr puts a child in a process group of its own, so that a Ctrl-C
// on the terminal reaches only the demo (which then stops its children in
// order), and has the kernel SIGKILL it if the demo dies first, so that
// nothing it started outlives it. (Pdeathsig fires when the thread that
// started the child ends; the Go runtime ends a thread only under a
// goroutine that exits locked to it, which the demo never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// gone reports whether no process has the id pid (the demo's children are
// reaped by Wait before it asks).
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
