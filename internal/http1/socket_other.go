//go:build !linux

package http1

import (
	"io"
	"net"
)

// readWriter is c itself: raw sockets are Linux's (socket_linux.go).
func readWriter(c net.Conn) io.ReadWriter { return c }
