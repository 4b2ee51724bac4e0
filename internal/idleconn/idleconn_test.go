//go:build unix

package idleconn

import (
	"net"
	"testing"
	"time"
)

// TestOpen: a silent connection is open; one with an unread byte, or whose
// peer closed it, is not.
func TestOpen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if open, known := Open(client); !open || !known {
		t.Fatalf("silent connection: open %v known %v, want open", open, known)
	}
	if _, err := server.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { open, _ := Open(client); return !open })
	var b [1]byte
	if _, err := client.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	if open, _ := Open(client); !open {
		t.Fatal("silent again after the byte was read: not open")
	}
	server.Close()
	waitFor(t, func() bool { open, _ := Open(client); return !open })
	if _, known := Open(fakeConn{}); known {
		t.Fatal("a connection without a descriptor: known")
	}
}

// waitFor polls cond until it holds, for at most 5 s (loopback delivers
// in microseconds; the bound only stops a broken test).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
	}
}

type fakeConn struct{ net.Conn }
