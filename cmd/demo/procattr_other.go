//go:build !linux

package main

import "syscall"

// sysProcAttr: outside Linux there is no Pdeathsig; the demo stops its
// children itself, on success, on failure and on Ctrl-C.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// gone: without a portable way to ask, a child that Wait returned for is
// gone.
func gone(int) bool { return true }
