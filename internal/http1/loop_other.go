//go:build !linux

package http1

import (
	"errors"
	"net"
)

// loop is Linux's (loop_linux.go): elsewhere Config.Loops is ignored and
// every connection gets a goroutine of its own.
type loop struct{}

// loopConn is a connection on a loop: none here.
type loopConn struct{}

func (*loop) answerLater(*Later, *Response) {}

var errNoSocket = errors.New("http1: no event loops on this system")

func startLoops(*Server, int) ([]*loop, error) { return nil, nil }

func (*loop) add(net.Conn) error { return errNoSocket }

func (*loop) stop() {}
