package http1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// oneConnListener accepts c once, then waits until closed.
type oneConnListener struct {
	c      net.Conn
	once   sync.Once
	closed chan struct{}
	taken  bool
	mu     sync.Mutex
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.c, nil
	}
	l.mu.Unlock()
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// verdict is what a server made of one request: the status it answered
// (0: none within the bound) and, when a handler ran, its method, path,
// body length, Authorization and Close.
type verdict struct {
	status             int
	handled            bool
	method, path, auth string
	length             int64
	close              bool
}

// netHTTPVerdict serves raw (a request, body included) to a net/http
// server over an in-memory connection and returns its verdict.
func netHTTPVerdict(t testing.TB, raw []byte) verdict {
	t.Helper()
	cc, sc := net.Pipe()
	seen := make(chan verdict, 1)
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		seen <- verdict{handled: true, method: r.Method, path: r.URL.Path + r.URL.RawQuery, auth: r.Header.Get("Authorization"), length: n, close: r.Close}
		w.WriteHeader(http.StatusNoContent)
	})}
	ln := &oneConnListener{c: sc, closed: make(chan struct{})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	wrote := make(chan struct{})
	go func() { defer close(wrote); _, _ = cc.Write(raw) }()
	_ = cc.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound on a broken server, not a speed
	var v verdict
	if resp, err := http.ReadResponse(bufio.NewReader(cc), nil); err == nil {
		v.status = resp.StatusCode
		resp.Body.Close()
	}
	_ = cc.Close()
	_ = srv.Shutdown(context.Background())
	_ = srv.Close()
	<-served
	<-wrote
	select {
	case h := <-seen:
		h.status = v.status
		return h
	default:
	}
	return v
}

// rawExchange sends raw to addr and returns the status of the answer (0
// when the connection ended without one) and its body.
func rawExchange(t *testing.T, addr, raw string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // a bound on a hang, not a speed
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
			return 0, ""
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("%q: no answer within the bound", raw)
		}
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHostAndBareLFAsNetHTTP: a Host value net/http refuses, and requests
// with bare LF line endings, are answered by this server exactly as by
// net/http alone (status and body), not on the fast path and not left
// waiting.
func TestHostAndBareLFAsNetHTTP(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "net/http "+r.Host)
	})
	fast := func(_ context.Context, req *Request, resp *Response) bool {
		resp.Status = 200
		resp.Body = append(resp.Body, "fast path"...)
		return true
	}
	serve := func(s interface{ Serve(net.Listener) error }) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Serve(ln) }()
		t.Cleanup(func() {
			switch s := s.(type) {
			case *Server:
				_ = s.Shutdown(context.Background())
			case *http.Server:
				_ = s.Shutdown(context.Background())
			}
			<-done
		})
		return ln.Addr().String()
	}
	ours := serve(NewServer(Config{Handler: fast, Fallback: &http.Server{Handler: handler}}))
	theirs := serve(&http.Server{Handler: handler})
	for _, c := range []struct{ name, raw string }{
		{"host with a space and a slash", "POST /v1/acquire HTTP/1.1\r\nHost: a b/c\r\nContent-Length: 2\r\n\r\n{}"},
		{"host with a slash", "POST /v1/acquire HTTP/1.1\r\nHost: a/b\r\nContent-Length: 2\r\n\r\n{}"},
		{"host with a quote", "POST /v1/acquire HTTP/1.1\r\nHost: a\"b\r\nContent-Length: 2\r\n\r\n{}"},
		{"host with a brace", "POST /v1/acquire HTTP/1.1\r\nHost: {a}\r\nContent-Length: 2\r\n\r\n{}"},
		{"bare LF everywhere", "POST /v1/acquire HTTP/1.1\nHost: x\nContent-Length: 2\n\n{}"},
		{"bare LF at the end", "POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\n{}"},
		{"bare LF in the middle", "POST /v1/acquire HTTP/1.1\r\nHost: x\nContent-Length: 2\r\n\r\n{}"},
		{"bare LF after the request line", "POST /v1/acquire HTTP/1.1\nHost: x\r\nContent-Length: 2\r\n\r\n{}"},
		{"a plain request (the fast path)", "POST /v1/acquire HTTP/1.1\r\nHost: x:80\r\nContent-Length: 2\r\n\r\n{}"},
	} {
		gs, gb := rawExchange(t, ours, c.raw)
		ws, wb := rawExchange(t, theirs, c.raw)
		if strings.HasPrefix(c.name, "a plain") {
			if gs != 200 || gb != "fast path" {
				t.Errorf("%s: %d %q, want the fast path's answer", c.name, gs, gb)
			}
			continue
		}
		if gs != ws || gb != wb || gs == 0 {
			t.Errorf("%s: %d %q; net/http alone %d %q", c.name, gs, gb, ws, wb)
		}
	}
}
