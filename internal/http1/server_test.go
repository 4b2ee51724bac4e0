package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testServer serves cfg on a loopback port: the fast Handler answers
// "fast <path> <body>" but declines /decline (and blocks on /block until
// release is closed; /big: 64 KiB of "b", a space and the body); the fallback answers "fallback <method> <path>
// <body>".
type testServer struct {
	*Server
	addr    string
	release chan struct{}
	blocked chan struct{}
	gone    chan struct{} // a /watch request's client hung up
	wrap    func(net.Listener) net.Listener
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startServerOn(t, cfg, nil)
}

// startServerOn is startServer on a listener wrapped by wrap (when not
// nil).
func startServerOn(t *testing.T, cfg Config, wrap func(net.Listener) net.Listener) *testServer {
	t.Helper()
	ts := &testServer{release: make(chan struct{}), blocked: make(chan struct{}, 1), gone: make(chan struct{}, 1), wrap: wrap}
	cfg.Handler = func(_ context.Context, req *Request, resp *Response) bool {
		switch string(req.Path) {
		case "/decline":
			return false
		case "/block":
			ts.blocked <- struct{}{}
			<-ts.release
		case "/big":
			resp.Status = http.StatusOK
			resp.Body = fmt.Appendf(resp.Body, "%s %s", bytes.Repeat([]byte("b"), 64<<10), req.Body)
			return true
		case "/abort":
			resp.Body = append(resp.Body, "never sent"...)
			resp.Abort = true
			return true
		case "/watch": // takes 50 ms ("long": until its client hangs up, at most 5 s), watched from 1 ms on
			hold := 50 * time.Millisecond
			if string(req.Body) == "long" {
				hold = 5 * time.Second
			}
			path, body := string(req.Path), string(req.Body) // the watch may move req's bytes
			gone := make(chan struct{})
			stop := req.WatchClient(time.Millisecond, func() { close(gone) })
			select {
			case <-gone:
				ts.gone <- struct{}{}
			case <-time.After(hold):
			}
			stop()
			resp.Status = http.StatusOK
			resp.Body = fmt.Appendf(resp.Body, "fast %s %s", path, body)
			return true
		}
		resp.Status = http.StatusOK
		resp.AddHeader("Content-Type", "text/plain")
		resp.Body = fmt.Appendf(resp.Body, "fast %s %s", req.Path, req.Body)
		return true
	}
	if cfg.Loops > 0 {
		cfg.Quick = quick(cfg.Handler)
	}
	if cfg.Fallback == nil {
		cfg.Fallback = &http.Server{}
	}
	cfg.Fallback.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "fallback %s %s %s", r.Method, r.URL.Path, body)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if ts.wrap != nil {
		ln = ts.wrap(ln)
	}
	ts.Server, ts.addr = NewServer(cfg), ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- ts.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ts.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return ts
}

// quick is the test servers' Quick: handler's answer, marked X-Served:
// loop, for every path but those that wait (/block, /watch) and /slow,
// which it declines (and handler answers as any other).
func quick(handler Handler) Handler {
	return func(ctx context.Context, req *Request, resp *Response) bool {
		switch string(req.Path) {
		case "/block", "/watch", "/slow":
			return false
		}
		if !handler(ctx, req, resp) {
			return false
		}
		resp.AddHeader("X-Served", "loop")
		return true
	}
}

// eachMode runs test with a goroutine a connection and with two event
// loops (cfg.Loops, which makes startServer set a Quick).
func eachMode(t *testing.T, test func(t *testing.T, loops int)) {
	for _, loops := range []int{0, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) { test(t, loops) })
	}
}

// client is one raw connection to the server.
type client struct {
	net.Conn
	br *bufio.Reader
}

func (ts *testServer) dial(t *testing.T) *client {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, br: bufio.NewReader(c)}
}

func post(path, body string, headers ...string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", path, strings.Join(headers, ""), len(body), body)
}

func (c *client) send(t *testing.T, reqs ...string) {
	t.Helper()
	if _, err := io.WriteString(c, strings.Join(reqs, "")); err != nil {
		t.Fatal(err)
	}
}

// read reads one answer: its response and body.
func (c *client) read(t *testing.T) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// closed reports whether the server closed c (a read ends without data).
func (c *client) closed() bool {
	n, err := c.br.Read(make([]byte, 1))
	return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestFastAnswersThenNetHTTPServesTheConnection(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops})
		c := ts.dial(t)
		c.send(t, post("/a", "one"), post("/a", "two"), "GET /b HTTP/1.1\r\nHost: x\r\n\r\n", post("/c", "three"))
		want := []string{"fast /a one", "fast /a two", "fallback GET /b ", "fallback POST /c three"}
		for i, w := range want {
			resp, body := c.read(t)
			if body != w || resp.StatusCode != http.StatusOK {
				t.Fatalf("answer %d: %d %q, want %q", i, resp.StatusCode, body, w)
			}
			if i < 2 && (resp.Header.Get("Date") == "" || resp.ContentLength != int64(len(w)) || resp.Header.Get("Content-Type") != "text/plain" || resp.Close) {
				t.Fatalf("fast answer %d headers: %v", i, resp.Header)
			}
		}
	})
}

// TestDeclinedRequestReachesNetHTTPWhole: a request the Handler declines
// reaches net/http byte for byte, small or over the read buffer, and so
// does the request after it.
func TestDeclinedRequestReachesNetHTTPWhole(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops})
		for _, size := range []int{5, 3 * readBufferSize} {
			big := strings.Repeat("x", size)
			c := ts.dial(t)
			c.send(t, post("/decline", big), post("/a", "after"))
			if _, body := c.read(t); body != "fallback POST /decline "+big {
				t.Fatalf("size %d: declined request answered %.60q", size, body)
			}
			if _, body := c.read(t); body != "fallback POST /a after" {
				t.Fatalf("size %d: next request answered %q", size, body)
			}
		}
	})
}

func TestOversizeHeadIsNetHTTPs(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops, Fallback: &http.Server{MaxHeaderBytes: readBufferSize}})
		c := ts.dial(t)
		c.send(t, post("/a", "x", "X-Big: "+strings.Repeat("y", 2*readBufferSize)+"\r\n"))
		if resp, _ := c.read(t); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a head over the buffer: %d, want net/http's 431", resp.StatusCode)
		}
	})
}

func TestConnectionCloseEndsTheConnection(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		var closing atomic.Bool
		ts := startServer(t, Config{Loops: loops, Closing: closing.Load})
		c := ts.dial(t)
		c.send(t, post("/a", "1", "Connection: close\r\n"))
		if resp, _ := c.read(t); !resp.Close || !c.closed() {
			t.Fatalf("Connection: close asked: answer close %v, connection not closed", resp.Close)
		}
		closing.Store(true) // a draining node
		c = ts.dial(t)
		c.send(t, post("/a", "1"))
		if resp, _ := c.read(t); !resp.Close || !c.closed() {
			t.Fatalf("draining: answer close %v, connection not closed", resp.Close)
		}
	})
}

// TestSlowClientsAreCut: a head that never ends is cut at
// ReadHeaderTimeout, a body that never comes at ReadTimeout, an idle
// connection at IdleTimeout.
func TestSlowClientsAreCut(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops, ReadHeaderTimeout: 50 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, IdleTimeout: time.Minute})
		head := ts.dial(t)
		head.send(t, "POST /a HTTP/1.1\r\nHo")
		body := ts.dial(t)
		body.send(t, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
		idle := startServer(t, Config{Loops: loops, IdleTimeout: 100 * time.Millisecond}).dial(t)
		idle.send(t, post("/a", "1"))
		idle.read(t)
		for name, c := range map[string]*client{"unfinished head": head, "unfinished body": body, "idle": idle} {
			if !c.closed() {
				t.Errorf("%s: connection not closed", name)
			}
		}
	})
}

// TestShutdownFinishesAnswersInProgress: Shutdown closes idle connections
// at once and waits for an answer being made, which closes its connection.
func TestShutdownFinishesAnswersInProgress(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops})
		idle := ts.dial(t)
		idle.send(t, post("/a", "1"))
		idle.read(t)
		busy := ts.dial(t)
		busy.send(t, post("/block", "2"))
		<-ts.blocked
		done := make(chan error, 1)
		go func() { done <- ts.Shutdown(context.Background()) }()
		if !idle.closed() {
			t.Fatal("idle connection not closed by Shutdown")
		}
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned (%v) before the answer in progress was written", err)
		case <-time.After(20 * time.Millisecond):
		}
		close(ts.release)
		if resp, body := busy.read(t); body != "fast /block 2" || !resp.Close {
			t.Fatalf("answer in progress: %q close %v", body, resp.Close)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestWatchClientSeesAHangUp: a Handler watching its client learns that it
// hung up while the answer was being made.
func TestWatchClientSeesAHangUp(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops})
		c := ts.dial(t)
		c.send(t, post("/watch", "long"))
		time.Sleep(10 * time.Millisecond) // the watch has started
		c.Close()
		select {
		case <-ts.gone:
		case <-time.After(10 * time.Second):
			t.Fatal("the Handler never learnt that its client hung up")
		}
	})
}

// TestWatchClientLeavesTheConnectionAsItWas: a watch that ends without a
// hang-up changes nothing a client sees: the answer comes (written after
// a wait longer than WriteTimeout, which counts from the answer being
// ready), a request sent during the watch is answered next, one sent
// after a pause and one sent with it too; and the idle timeout, not a
// deadline the watch left behind, closes the connection afterwards.
func TestWatchClientLeavesTheConnectionAsItWas(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops, WriteTimeout: 20 * time.Millisecond, IdleTimeout: 2 * time.Second})
		c := ts.dial(t)
		c.send(t, post("/watch", "short"))
		time.Sleep(10 * time.Millisecond) // the watch has started: the next request arrives during it
		c.send(t, post("/a", "two"))
		for i, want := range []string{"fast /watch short", "fast /a two"} {
			if _, body := c.read(t); body != want {
				t.Fatalf("answer %d: %q, want %q", i, body, want)
			}
		}
		time.Sleep(30 * time.Millisecond) // idle, well within IdleTimeout: the connection still serves
		c.send(t, post("/a", "after a pause"))
		if _, body := c.read(t); body != "fast /a after a pause" {
			t.Fatalf("answer after a pause: %q", body)
		}
		c.send(t, post("/watch", "short"), post("/a", "three"))
		for i, want := range []string{"fast /watch short", "fast /a three"} {
			if _, body := c.read(t); body != want {
				t.Fatalf("pipelined answer %d: %q, want %q", i, body, want)
			}
		}
		select {
		case <-ts.gone:
			t.Fatal("gone called for a client that stayed")
		default:
		}
		if !c.closed() {
			t.Fatal("the idle connection was not closed by IdleTimeout after a watched request")
		}
	})
}

// TestAbortClosesWithoutAnAnswer: an answer the Handler aborts is not sent;
// the connection closes, so the client sees the request fail.
func TestAbortClosesWithoutAnAnswer(t *testing.T) {
	eachMode(t, func(t *testing.T, loops int) {
		ts := startServer(t, Config{Loops: loops})
		c := ts.dial(t)
		c.send(t, post("/a", "one"), post("/abort", "two"), post("/a", "three"))
		if _, body := c.read(t); body != "fast /a one" {
			t.Fatalf("first answer %q", body)
		}
		if !c.closed() {
			t.Fatal("an aborted answer left its connection open (or was sent)")
		}
	})
}

// TestBusyCountsConnectionsAnswering: busy, which decides whether a
// connection yields before it reads (next), counts the connections between
// a request's first byte and its answer written: both of two blocked
// handlers, and none once their answers are out or while they wait for a
// request.
func TestBusyCountsConnectionsAnswering(t *testing.T) {
	ts := startServer(t, Config{})
	busy := func() int32 { return ts.busy.Load() }
	settled := func(want int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); busy() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("busy %d, want %d", busy(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	a, b := ts.dial(t), ts.dial(t)
	a.send(t, post("/a", "1"))
	a.read(t)
	settled(0) // a waits for its next request: not counted
	a.send(t, post("/block", "a"))
	<-ts.blocked
	b.send(t, post("/block", "b"))
	<-ts.blocked
	if got := busy(); got != 2 {
		t.Fatalf("busy %d with two handlers blocked, want 2", got)
	}
	close(ts.release)
	a.read(t)
	b.read(t)
	settled(0)
}
