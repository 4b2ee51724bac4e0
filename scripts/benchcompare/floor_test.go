package main

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Each floor answers every whole request with floorAnswer, requests sent
// together (pipelined, or split anywhere) included, on every connection;
// stop closes it, with nothing left running.
func TestFloors(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, f := range []struct {
		name  string
		serve func() (string, func(), error)
	}{{"goroutine a connection", serveFloor}, {"event loop", serveFloorLoop}} {
		t.Run(f.name, func(t *testing.T) {
			addr, stop, err := f.serve()
			if err != nil {
				t.Fatal(err)
			}
			body := `{"tenant":"t","prompt_tokens":100,"max_tokens":100}`
			req := "POST /v1/acquire HTTP/1.1\r\nHost: x\r\ncontent-length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			a, b := dial(t, addr), dial(t, addr)
			// Two requests in one write, then two more in pieces cut inside a
			// head and inside bodies; one on the other connection.
			send(t, a, req+req)
			expect(t, a, 2)
			two := req + req
			for _, piece := range []string{two[:10], two[10 : len(req)-5], two[len(req)-5 : 2*len(req)-3], two[2*len(req)-3:]} {
				send(t, a, piece)
				time.Sleep(5 * time.Millisecond) // each piece read on its own
			}
			expect(t, a, 2)
			send(t, b, req)
			expect(t, b, 1)
			// A request not yet whole gets no answer.
			send(t, b, req[:len(req)-1])
			_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, _ := b.Read(make([]byte, 1)); n != 0 {
				t.Fatal("an answer to a request not yet whole")
			}
			stop()
			_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := a.Read(make([]byte, 1)); n != 0 || err == nil {
				t.Fatalf("a connection still open after stop: %d %v", n, err)
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Fatal("still listening after stop")
			}
		})
	}
}

func TestAnswered(t *testing.T) {
	req := "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
	for _, c := range []struct {
		in      string
		answers int
		rest    string
	}{
		{"", 0, ""},
		{req, 1, ""},
		{req + req + "POST", 2, "POST"},
		{req[:len(req)-1], 0, req[:len(req)-1]},
		{"GET / HTTP/1.1\r\n\r\n" + req, 2, ""}, // no length: no body
		{"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\nPOST", 1, "POST"}, // not a length: none
	} {
		rest, out := answered([]byte(c.in), nil)
		if string(rest) != c.rest || !bytes.Equal(out, bytes.Repeat(floorAnswer, c.answers)) {
			t.Errorf("answered(%q) = %d bytes, rest %q; want %d answers, rest %q", c.in, len(out), rest, c.answers, c.rest)
		}
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// expect reads exactly n answers from c.
func expect(t *testing.T, c net.Conn, n int) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, n*len(floorAnswer))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading %d answers: %v", n, err)
	}
	if !bytes.Equal(got, bytes.Repeat(floorAnswer, n)) {
		t.Fatalf("got %q", got)
	}
}
