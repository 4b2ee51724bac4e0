package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// upstream is a scripted HTTP/1.1 server: it reads each request with
// net/http's parser, records it, and writes the raw answer its script
// gives for the request's number (0, 1, ... across connections) and its
// connection's (0, 1, ... in the order accepted). An
// answer of "" closes the connection without answering.
type upstream struct {
	t      *testing.T
	ln     net.Listener
	script func(n, conn int) (answer string, closeAfter bool)
	mu     sync.Mutex
	conns  int
	reqs   []recorded
	open   []net.Conn
	wg     sync.WaitGroup
	closed chan int // the number of each request after which the server closed its connection
}

type recorded struct {
	conn int
	req  *http.Request
	body string
}

func startUpstream(t *testing.T, script func(n, conn int) (string, bool)) *upstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{t: t, ln: ln, script: script, closed: make(chan int, 100)}
	u.wg.Add(1)
	go u.accept()
	t.Cleanup(u.close)
	return u
}

func (u *upstream) url() string { return "http://" + u.ln.Addr().String() }

func (u *upstream) accept() {
	defer u.wg.Done()
	for {
		c, err := u.ln.Accept()
		if err != nil {
			return
		}
		u.mu.Lock()
		id := u.conns
		u.conns++
		u.open = append(u.open, c)
		u.mu.Unlock()
		u.wg.Add(1)
		go u.serve(c, id)
	}
}

func (u *upstream) serve(c net.Conn, id int) {
	defer u.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		u.mu.Lock()
		n := len(u.reqs)
		u.reqs = append(u.reqs, recorded{id, req, string(body)})
		u.mu.Unlock()
		answer, closeAfter := u.script(n, id)
		if answer != "" {
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
		if answer == "" || closeAfter {
			_ = c.Close()
			u.closed <- n
			return
		}
	}
}

func (u *upstream) close() {
	_ = u.ln.Close()
	u.mu.Lock()
	for _, c := range u.open {
		_ = c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// counts returns the connections accepted and the requests read so far.
func (u *upstream) counts() (conns, reqs int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns, len(u.reqs)
}

func newClient(t *testing.T) *Client {
	c := &Client{}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// clientPost sends body to u's path through c and reads the whole answer.
func clientPost(ctx context.Context, c *Client, url, body string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	resp, err := c.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestClientReadsEachBodyShapeOnOneConnection: Content-Length, chunked
// (with a trailer), no body (204), an informational answer before the
// final one: all read whole, one after the other on one connection; a
// body that ends with the connection is read to the close, and the next
// request gets a new connection.
func TestClientReadsEachBodyShapeOnOneConnection(t *testing.T) {
	answers := []struct{ raw, body string }{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello"},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"7\r\ndata: 1\r\n9\r\n\n\ndata: 2\r\n0\r\nX-Trailer: t\r\n\r\n", "data: 1\n\ndata: 2"},
		{"HTTP/1.1 204 No Content\r\n\r\n", ""},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", "{}"},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: to the end\n\n", "data: to the end\n\n"},
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nnew", "new"},
	}
	u := startUpstream(t, func(n, _ int) (string, bool) { return answers[n].raw, n == 4 })
	c := newClient(t)
	for i, a := range answers {
		if i == 5 {
			<-u.closed // the close-delimited answer's connection is gone
			if n := len(c.idle[u.ln.Addr().String()]); n != 0 {
				t.Fatalf("%d idle connections after a close-delimited answer, want 0", n)
			}
		}
		_, body, err := clientPost(context.Background(), c, u.url()+"/v1/x", `{"n":1}`)
		if err != nil || body != a.body {
			t.Fatalf("answer %d: body %q, %v; want %q", i, body, err, a.body)
		}
	}
	if conns, reqs := u.counts(); conns != 2 || reqs != 6 {
		t.Fatalf("%d connections for %d requests, want 2 for 6", conns, reqs)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for i, r := range u.reqs {
		if want := min(i/5, 1); r.conn != want {
			t.Errorf("request %d on connection %d, want %d", i, r.conn, want)
		}
	}
}

// TestClientWritesTheRequest: what net/http's server reads of a request
// the Client wrote: method, target with query, Host, User-Agent, the
// headers, Content-Length and the body; a header value with a line break
// is refused before any connection.
func TestClientWritesTheRequest(t *testing.T) {
	u := startUpstream(t, func(int, int) (string, bool) { return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false })
	c := newClient(t)
	req, err := http.NewRequest(http.MethodPost, u.url()+"/v1/chat/completions?a=b%20c", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Add("X-Two", "1")
	req.Header.Add("X-Two", "2")
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Body != http.NoBody || resp.StatusCode != 200 {
		t.Fatalf("status %d body %T", resp.StatusCode, resp.Body)
	}
	u.mu.Lock()
	got := u.reqs[0]
	u.mu.Unlock()
	r := got.req
	if r.Method != "POST" || r.RequestURI != "/v1/chat/completions?a=b%20c" || r.Host != u.ln.Addr().String() ||
		r.UserAgent() != "Go-http-client/1.1" || r.Header.Get("Authorization") != "Bearer k" ||
		strings.Join(r.Header.Values("X-Two"), ",") != "1,2" || r.ContentLength != 13 || got.body != `{"model":"m"}` {
		t.Fatalf("server read %s %s host %q ua %q auth %q two %q length %d body %q", r.Method, r.RequestURI, r.Host,
			r.UserAgent(), r.Header.Get("Authorization"), r.Header.Values("X-Two"), r.ContentLength, got.body)
	}
	bad, _ := http.NewRequest(http.MethodPost, u.url()+"/v1/x", strings.NewReader("{}"))
	bad.Header.Set("X-Bad", "a\r\nX-Injected: 1")
	if _, err := c.RoundTrip(bad); err == nil {
		t.Fatal("a header value with CRLF was sent")
	}
	if conns, reqs := u.counts(); conns != 1 || reqs != 1 {
		t.Fatalf("%d connections, %d requests after the refused one; want 1, 1", conns, reqs)
	}
}

// TestClientSendsAgainOnlyWhatWasNotWritten: a pooled connection the
// server closed is not used (the request goes, once, on a new one); a
// request written on a connection the server then closes without an
// answer fails and is not sent again.
func TestClientSendsAgainOnlyWhatWasNotWritten(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	u := startUpstream(t, func(n, _ int) (string, bool) {
		switch n {
		case 0:
			return ok, true // answers, then closes the idle connection
		case 2:
			return "", true // reads the request, closes without an answer
		}
		return ok, false
	})
	c := newClient(t)
	if _, _, err := clientPost(context.Background(), c, u.url(), "a"); err != nil {
		t.Fatal(err)
	}
	<-u.closed
	if _, body, err := clientPost(context.Background(), c, u.url(), "b"); err != nil || body != "ok" {
		t.Fatalf("after the server closed the idle connection: %q, %v", body, err)
	}
	if _, _, err := clientPost(context.Background(), c, u.url(), "c"); err == nil {
		t.Fatal("a request the server dropped unanswered succeeded")
	}
	if _, _, err := clientPost(context.Background(), c, u.url(), "d"); err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	var bodies []string
	for _, r := range u.reqs {
		bodies = append(bodies, r.body)
	}
	if got := strings.Join(bodies, ""); got != "abcd" || u.conns != 3 {
		t.Fatalf("server read %q over %d connections, want abcd over 3", got, u.conns)
	}
}

// TestClientCancelCutsTheWaitAndTheBody: the context's end cuts the wait
// for a head (the error carries its cause, the connection is closed) and a
// body's read.
func TestClientCancelCutsTheWaitAndTheBody(t *testing.T) {
	release := make(chan struct{})
	// By connection, not by request: the head stage's request may reach the
	// server after the body stage's (their connections are served
	// concurrently, and the head stage gives up as soon as it has written).
	u := startUpstream(t, func(_, conn int) (string, bool) {
		if conn == 0 { // the head stage's: no answer until the test ends
			<-release
			return "", true
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart", false
	})
	defer close(release)
	c := newClient(t)
	cause := errors.New("the test's cause")
	for _, stage := range []string{"head", "body"} {
		ctx, cancel := context.WithCancelCause(context.Background())
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
			if stage == "head" && i.Err == nil {
				cancel(cause)
			}
		}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u.url(), strings.NewReader("x"))
		resp, err := c.RoundTrip(req)
		if stage == "body" {
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != "part" {
				t.Fatalf("%q, %v", b, err)
			}
			cancel(cause)
			_, err = resp.Body.Read(b)
			resp.Body.Close()
		}
		if !errors.Is(err, cause) {
			t.Fatalf("%s: %v, want the context's cause", stage, err)
		}
	}
	if n := len(c.idle); n != 0 {
		t.Fatalf("%d hosts with idle connections after cut ones, want 0", n)
	}
}

// TestClientClosedBodyDropsTheConnection: a body closed before its end
// closes its connection (the rest is never read as the next answer). The
// server sends the first answer's rest only with the next answer on its
// connection, so a connection kept would read it as the next head.
func TestClientClosedBodyDropsTheConnection(t *testing.T) {
	const whole = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabcdef"
	u := startUpstream(t, func(n, conn int) (string, bool) {
		switch {
		case n == 0:
			return whole[:len(whole)-4], false
		case conn == 0:
			return "cdef" + whole, false
		}
		return whole, false
	})
	c := newClient(t)
	req, _ := http.NewRequest(http.MethodPost, u.url(), strings.NewReader("x"))
	resp, err := c.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := resp.Body.Read(b); !errors.Is(err, errBodyClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if _, body, err := clientPost(context.Background(), c, u.url(), "y"); err != nil || body != "abcdef" {
		t.Fatalf("%q, %v", body, err)
	}
	if conns, _ := u.counts(); conns != 2 {
		t.Fatalf("%d connections, want 2", conns)
	}
}

// TestClientRefusesAHeadItDoesNotRead: an answer outside
// ParseResponseHead's subset fails the request and closes the connection.
func TestClientRefusesAHeadItDoesNotRead(t *testing.T) {
	u := startUpstream(t, func(int, int) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", false
	})
	c := newClient(t)
	if _, _, err := clientPost(context.Background(), c, u.url(), "x"); !errors.Is(err, ErrResponseHead) {
		t.Fatalf("%v, want ErrResponseHead", err)
	}
	if n := len(c.idle); n != 0 {
		t.Fatalf("%d hosts with idle connections, want 0", n)
	}
}

type countingTransport struct{ n int }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n++
	return &http.Response{StatusCode: 299, Body: http.NoBody, Request: req}, nil
}

// TestClientLeavesTheRestToFallback: https, a body of unknown length, an
// Expect, a HEAD and a request Proxy sends through a proxy go to
// Fallback; without one they fail.
func TestClientLeavesTheRestToFallback(t *testing.T) {
	fb := &countingTransport{}
	c := &Client{Fallback: fb, Proxy: func(req *http.Request) (*url.URL, error) {
		if req.URL.Host == "proxied:80" {
			return url.Parse("http://proxy:3128")
		}
		return nil, nil
	}}
	unknown, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/x", io.NopCloser(bytes.NewReader([]byte("x"))))
	expect, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/x", strings.NewReader("x"))
	expect.Header.Set("Expect", "100-continue")
	tls, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:1/x", strings.NewReader("x"))
	head, _ := http.NewRequest(http.MethodHead, "http://127.0.0.1:1/x", nil)
	proxied, _ := http.NewRequest(http.MethodPost, "http://proxied:80/x", strings.NewReader("x"))
	for _, req := range []*http.Request{unknown, expect, tls, head, proxied} {
		if resp, err := c.RoundTrip(req); err != nil || resp.StatusCode != 299 {
			t.Fatalf("%v: %v", req.URL, err)
		}
	}
	if fb.n != 5 {
		t.Fatalf("fallback sent %d, want 5", fb.n)
	}
	if _, err := (&Client{}).RoundTrip(tls); err == nil {
		t.Fatal("https without a fallback succeeded")
	}
}
