package http1

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoopAnswersUntilQuickDeclines: a loop answers the requests Quick
// takes; at the first it declines, the connection goes to a goroutine,
// whose Handler answers that request and the next, and net/http the one
// after, all in order. A request over the loop's buffer, and one that is
// not a plain POST, send their connections to goroutines too. LoopStats
// counts each.
func TestLoopAnswersUntilQuickDeclines(t *testing.T) {
	ts := startServer(t, Config{Loops: 1})
	c := ts.dial(t)
	c.send(t, post("/a", "one"), post("/a", "two"), post("/slow", "three"), post("/a", "four"), "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	want := []struct{ body, served string }{
		{"fast /a one", "loop"}, {"fast /a two", "loop"}, {"fast /slow three", ""}, {"fast /a four", ""}, {"fallback GET /b ", ""},
	}
	for i, w := range want {
		resp, body := c.read(t)
		if body != w.body || resp.Header.Get("X-Served") != w.served {
			t.Fatalf("answer %d: %q served by %q, want %q by %q", i, body, resp.Header.Get("X-Served"), w.body, w.served)
		}
	}
	large := ts.dial(t)
	nines := strings.Repeat("9", readBufferSize+1)
	large.send(t, post("/a", "small"), post("/a", nines))
	for i, want := range []struct{ body, served string }{{"fast /a small", "loop"}, {"fast /a " + nines, ""}} {
		if resp, body := large.read(t); body != want.body || resp.Header.Get("X-Served") != want.served {
			t.Fatalf("large, answer %d: %d bytes served by %q, want %d by %q", i, len(body), resp.Header.Get("X-Served"), len(want.body), want.served)
		}
	}
	get := ts.dial(t)
	get.send(t, post("/a", "before"), "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	for i, want := range []struct{ body, served string }{{"fast /a before", "loop"}, {"fallback GET /b ", ""}} {
		if resp, body := get.read(t); body != want.body || resp.Header.Get("X-Served") != want.served {
			t.Fatalf("get, answer %d: %q served by %q, want %q by %q", i, body, resp.Header.Get("X-Served"), want.body, want.served)
		}
	}
	wantStats(t, ts.Server, LoopStats{Answered: 4, Declined: 1, NotPlain: 1, Large: 1})
}

// wantStats waits, at most 5 s, for s's LoopStats to be want (a loop
// counts a batch's answers once it has handed its connection over), and
// fails if they are not.
func wantStats(t *testing.T, s *Server, want LoopStats) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.LoopStats() != want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := s.LoopStats(); got != want {
		t.Fatalf("LoopStats %+v, want %+v", got, want)
	}
}

// TestLoopReadsARequestInPieces: a request that arrives in pieces is
// answered by the loop once whole, and the connection stays on it.
func TestLoopReadsARequestInPieces(t *testing.T) {
	ts := startServer(t, Config{Loops: 1})
	c := ts.dial(t)
	req := post("/a", "pieces")
	for _, piece := range []string{req[:7], req[7:30], req[30 : len(req)-2], req[len(req)-2:]} {
		c.send(t, piece)
		time.Sleep(5 * time.Millisecond)
	}
	c.send(t, post("/a", "whole"))
	for i, want := range []string{"fast /a pieces", "fast /a whole"} {
		if resp, body := c.read(t); body != want || resp.Header.Get("X-Served") != "loop" {
			t.Fatalf("answer %d: %q served by %q", i, body, resp.Header.Get("X-Served"))
		}
	}
}

// TestLoopHandsOverAnswersWithoutRoom: a client that sends many requests
// with large answers and reads none until it has sent them all fills its
// socket; the answers the loop could not write go, with the requests
// after them, to a goroutine, and the client reads every answer, whole
// and in order.
func TestLoopHandsOverAnswersWithoutRoom(t *testing.T) {
	ts := startServer(t, Config{Loops: 1})
	c := ts.dial(t)
	const n = 200 // 200 answers of 64 KiB: more than loopback's socket buffers hold
	var reqs []string
	for i := range n {
		reqs = append(reqs, post("/big", fmt.Sprint(i)))
	}
	sent := make(chan error, 1)
	go func() { _, err := c.Write([]byte(strings.Join(reqs, ""))); sent <- err }()
	time.Sleep(50 * time.Millisecond) // the server writes until the socket is full
	bees := strings.Repeat("b", 64<<10)
	byLoop := 0
	for i := range n {
		resp, body := c.read(t)
		if body != fmt.Sprintf("%s %d", bees, i) {
			t.Fatalf("answer %d: %d bytes ending %q", i, len(body), body[max(0, len(body)-8):])
		}
		if resp.Header.Get("X-Served") == "loop" {
			byLoop++
		}
	}
	if byLoop == 0 || byLoop == n {
		t.Fatalf("%d of %d answers by the loop: the socket never filled, or never handed over", byLoop, n)
	}
	wantStats(t, ts.Server, LoopStats{Answered: uint64(byLoop), Full: 1})
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// wrapped is a Wrapper that counts its closes and its writes.
type wrapped struct {
	mu     sync.Mutex
	inner  net.Conn
	rebind int
	writes *atomic.Int64
	closes *atomic.Int64
}

func (w *wrapped) NetConn() net.Conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inner
}

func (w *wrapped) SetNetConn(c net.Conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inner, w.rebind = c, w.rebind+1
}

func (w *wrapped) Read(p []byte) (int, error) { return w.NetConn().Read(p) }
func (w *wrapped) Write(p []byte) (int, error) {
	w.writes.Add(1)
	return w.NetConn().Write(p)
}

func (w *wrapped) Close() error {
	w.closes.Add(1)
	return w.NetConn().Close()
}
func (w *wrapped) LocalAddr() net.Addr                { return w.NetConn().LocalAddr() }
func (w *wrapped) RemoteAddr() net.Addr               { return w.NetConn().RemoteAddr() }
func (w *wrapped) SetDeadline(t time.Time) error      { return w.NetConn().SetDeadline(t) }
func (w *wrapped) SetReadDeadline(t time.Time) error  { return w.NetConn().SetReadDeadline(t) }
func (w *wrapped) SetWriteDeadline(t time.Time) error { return w.NetConn().SetWriteDeadline(t) }

// wrapping wraps each connection it accepts.
type wrapping struct {
	net.Listener
	mu    sync.Mutex
	conns []*wrapped
	counts
}

type counts struct{ writes, closes atomic.Int64 }

func (l *wrapping) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	w := &wrapped{inner: c, writes: &l.writes, closes: &l.closes}
	l.mu.Lock()
	l.conns = append(l.conns, w)
	l.mu.Unlock()
	return w, nil
}

// TestLoopServesAWrappersSocket: a loop serves the socket inside a
// Wrapper and closes the Wrapper when the connection ends; a connection
// it hands to a goroutine gets its socket back in the Wrapper. The
// goroutine, like the loop, writes its answers to the socket; the
// fallback (net/http), handed the connection, writes through the
// Wrapper.
func TestLoopServesAWrappersSocket(t *testing.T) {
	var ln *wrapping
	ts := startServerOn(t, Config{Loops: 1}, func(l net.Listener) net.Listener { ln = &wrapping{Listener: l}; return ln })
	c := ts.dial(t)
	c.send(t, post("/a", "one"))
	if resp, _ := c.read(t); resp.Header.Get("X-Served") != "loop" {
		t.Fatal("not served by the loop")
	}
	if w := ln.writes.Load(); w != 0 {
		t.Fatalf("the loop wrote %d times through the Wrapper, want 0: it writes to the socket", w)
	}
	c.send(t, post("/slow", "two"))
	if _, body := c.read(t); body != "fast /slow two" {
		t.Fatalf("handed over: %q", body)
	}
	if w := ln.writes.Load(); w != 0 {
		t.Fatalf("the goroutine wrote %d times through the Wrapper, want 0: it writes to the socket", w)
	}
	c.send(t, "GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := c.read(t); body != "fallback GET /b " {
		t.Fatalf("handed to the fallback: %q", body)
	}
	if w := ln.writes.Load(); w == 0 {
		t.Fatal("the fallback (net/http) wrote nothing through the Wrapper: it writes through the connection it was given")
	}
	c.Close()
	c2 := ts.dial(t)
	c2.send(t, post("/a", "three", "Connection: close\r\n"))
	if resp, _ := c2.read(t); !resp.Close || !c2.closed() {
		t.Fatal("Connection: close on the loop did not close")
	}
	deadline := time.Now().Add(5 * time.Second)
	for ln.closes.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if got := ln.closes.Load(); got != 2 || len(ln.conns) != 2 || ln.conns[0].rebind != 1 || ln.conns[1].rebind != 0 {
		t.Fatalf("closes %d of 2 wrappers; sockets put back %d and %d times, want 1 and 0", got, ln.conns[0].rebind, ln.conns[1].rebind)
	}
}

// TestLoopLeavesNoDescriptors: a server with loops, having served
// connections on them, handed one to a goroutine and cut one idle, holds
// no descriptor once shut down.
func TestLoopLeavesNoDescriptors(t *testing.T) {
	open := func() int {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip(err)
		}
		return len(fds)
	}
	before := open()
	t.Run("served", func(t *testing.T) {
		ts := startServer(t, Config{Loops: 2, IdleTimeout: 50 * time.Millisecond})
		var conns []*client
		for range 4 {
			c := ts.dial(t)
			c.send(t, post("/a", "x"))
			c.read(t)
			conns = append(conns, c)
		}
		conns[0].send(t, post("/slow", "handed over"))
		conns[0].read(t)
		conns[1].Close()
		if !conns[2].closed() { // cut by IdleTimeout
			t.Fatal("idle connection not closed")
		}
	}) // its cleanups: the clients closed, Shutdown
	deadline := time.Now().Add(5 * time.Second)
	for open() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if after := open(); after != before {
		t.Fatalf("%d descriptors open before, %d after", before, after)
	}
}
