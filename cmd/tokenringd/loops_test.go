package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/http1"
)

// TestEventLoopsKeepTheConnectionContract: on tokenringd's server with an
// event loop, a connection the loop serves still holds its max_conns slot
// until it closes, and one the loop hands over (a request its quick
// handler declines, then one net/http refuses by itself) gets net/http's
// canned error as JSON, through the counted connection the loop put its
// socket back in.
func TestEventLoopsKeepTheConnectionContract(t *testing.T) {
	hc := testHTTP()
	hc.EventLoops = 1
	hc.ReadHeaderTimeout, hc.IdleTimeout = 10*time.Second, 10*time.Second
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newCappedListener(raw, hc.MaxConns, slog.New(slog.DiscardHandler))
	answer := func(by string) http1.Handler {
		return func(_ context.Context, req *http1.Request, resp *http1.Response) bool {
			if string(req.Path) != "/v1/acquire" || string(req.Body) == "slow" && by == "loop" {
				return false
			}
			resp.Status = http.StatusOK
			resp.AddHeader("X-Served", by)
			return true
		}
	}
	srv := newServer(http.NotFoundHandler(), decisions{plain: answer("goroutine"), quick: answer("loop")}, hc, func() bool { return false }, slog.New(slog.DiscardHandler))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		<-served
	})
	acquire := func(body string) string {
		return fmt.Sprintf("POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	exchange := func(c net.Conn, br *bufio.Reader, req string) *http.Response {
		t.Helper()
		go func() { _, _ = io.WriteString(c, req) }() // the node may answer before reading it all
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var conns []net.Conn
	var readers []*bufio.Reader
	for range 3 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		conns, readers = append(conns, c), append(readers, bufio.NewReader(c))
	}
	for i, c := range conns {
		if resp := exchange(c, readers[i], acquire("fast")); resp.Header.Get("X-Served") != "loop" {
			t.Fatalf("conn %d: served by %q, want the loop", i, resp.Header.Get("X-Served"))
		}
	}
	if got := ln.open.Load(); got != 3 {
		t.Fatalf("%d connections counted open, want the 3 on the loop", got)
	}
	if resp := exchange(conns[0], readers[0], acquire("slow")); resp.Header.Get("X-Served") != "goroutine" {
		t.Fatalf("declined by the loop: served by %q", resp.Header.Get("X-Served"))
	}
	resp := exchange(conns[0], readers[0], "GET /v1/tenants/"+strings.Repeat("a", 1<<20)+" HTTP/1.1\r\nHost: x\r\n\r\n")
	var body struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || resp.Header.Get("Content-Type") != "application/json" || err != nil || body.Error == "" {
		t.Fatalf("a 1 MB URL after the hand-over: %d %q %+v %v, want 431 with a JSON error", resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for ln.open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := ln.open.Load(); got != 0 {
		t.Fatalf("%d connections counted open after all closed", got)
	}
}

func TestEventLoops(t *testing.T) {
	for _, c := range []struct{ in, want int }{{-1, 0}, {3, 3}} {
		if got := eventLoops(c.in); got != c.want {
			t.Errorf("eventLoops(%d) = %d, want %d", c.in, got, c.want)
		}
	}
	if got := eventLoops(0); got < 1 {
		t.Errorf("eventLoops(0) = %d, want at least 1", got)
	}
}
