//go:build !linux

package http1

import (
	"errors"
	"net"
)

// loop is Linux's (loop_linux.go): elsewhere Config.Loops is ignored and
// every connection gets a goroutine of its own.
type loop struct{}

var errNoSocket = errors.New("http1: no event loops on this system")

func startLoops(*Server, int) ([]*loop, error) { return nil, nil }

func (*loop) add(net.Conn) error { return errNoSocket }

func (*loop) stop() {}
