// Package loopback finds free ports on 127.0.0.1 for the processes the
// tests, the demo and the benchmarks start.
package loopback

import (
	"errors"
	"net"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr returns a loopback address whose port is free for both TCP and
// UDP (memberlist gossips on both).
func FreeAddr() (string, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr, nil
		}
	}
	return "", errors.New("no free loopback port for TCP and UDP")
}
