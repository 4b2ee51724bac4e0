package http1

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestSocketReadsAndWritesAsTheConnection: a socket writes all of a
// write larger than the socket's buffers (waiting for room, as the peer
// reads slowly), reads what the peer sends as it comes, and reports the
// peer's close as io.EOF, a read deadline as os.ErrDeadlineExceeded, and
// a Close while it waits as an error.
func TestSocketReadsAndWritesAsTheConnection(t *testing.T) {
	a, b := tcpPair(t)
	s := socketOf(a)
	if s == nil {
		t.Fatal("no socket under a TCP connection")
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan []byte, 1)
	go func() {
		var buf bytes.Buffer
		chunk := make([]byte, 64<<10)
		for buf.Len() < len(big) {
			time.Sleep(time.Millisecond) // slower than the writer: its socket fills
			n, err := b.Read(chunk)
			buf.Write(chunk[:n])
			if err != nil {
				break
			}
		}
		got <- buf.Bytes()
	}()
	if n, err := s.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write: %d of %d bytes, %v", n, len(big), err)
	}
	if r := <-got; !bytes.Equal(r, big) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(r), len(big))
	}

	for _, msg := range []string{"first", "second"} {
		if _, err := b.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 64)
		if n, err := s.Read(p); string(p[:n]) != msg || err != nil {
			t.Fatalf("Read: %q, %v; want %q", p[:n], err, msg)
		}
	}
	_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := s.Read(make([]byte, 8)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %d, %v; want os.ErrDeadlineExceeded", n, err)
	}
	_ = a.SetReadDeadline(time.Time{})
	b.Close()
	if n, err := s.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the peer closed: %d, %v; want io.EOF", n, err)
	}

	c, _ := tcpPair(t)
	cs := socketOf(c)
	done := make(chan error, 1)
	go func() { _, err := cs.Read(make([]byte, 8)); done <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read while the connection closed: %v; want net.ErrClosed", err)
	}
}

// TestSocketOfFindsTheSocketUnderWrappers: through a loop's hand-over and
// a Wrapper to the TCP socket; a connection without one (net.Pipe) is
// read and written as itself.
func TestSocketOfFindsTheSocketUnderWrappers(t *testing.T) {
	a, b := tcpPair(t)
	w := &wrapped{inner: a, writes: new(atomic.Int64), closes: new(atomic.Int64)}
	s := socketOf(&prefixConn{Conn: w})
	if s == nil {
		t.Fatal("no socket under a prefixConn of a Wrapper of a TCP connection")
	}
	if _, err := s.Write([]byte("through")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 16)
	if n, err := b.Read(p); string(p[:n]) != "through" || err != nil {
		t.Fatalf("the peer read %q, %v", p[:n], err)
	}
	if n := w.writes.Load(); n != 0 {
		t.Fatalf("%d writes through the Wrapper, want none: its socket's", n)
	}
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	if socketOf(x) != nil {
		t.Fatal("a socket under net.Pipe")
	}
	if rw := readWriter(x); rw != io.ReadWriter(x) {
		t.Fatalf("readWriter of a net.Pipe: %T, want the connection itself", rw)
	}
}
