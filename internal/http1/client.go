package http1

// The client side: an http.RoundTripper for plain http:// servers that
// keeps a pool of HTTP/1.1 connections per host and does each request's
// work on the calling goroutine. net/http's Transport hands every request
// to a writing goroutine and every answer from a reading goroutine (one
// pair per connection), which costs a sequential call two goroutine
// wake-ups and most of a proxy's added latency; here the caller writes the
// request in one write and reads the answer's head itself, and the body is
// read from the socket by whoever reads it.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tokenring/tokenring/internal/idleconn"
)

// DefaultMaxIdlePerHost is a Client's bound on idle connections per host
// when MaxIdlePerHost is 0.
const DefaultMaxIdlePerHost = 256

// clientReadBuffer is the bytes of a connection's read buffer, and the
// longest response head the client reads.
const clientReadBuffer = 32 << 10

// maxInformational is how many 1xx answers a request may get before its
// final one.
const maxInformational = 5

// maxPooledBuffer is the largest request buffer kept for the next request.
const maxPooledBuffer = 64 << 10

// Client is an http.RoundTripper that sends a request of known length to an
// http:// URL over a kept-alive HTTP/1.1 connection of its own pool. Other
// requests (https, HEAD and CONNECT, a body of unknown length, Expect,
// Upgrade, a Connection or Transfer-Encoding header, Close, URL
// credentials, trailers, those Proxy sends through a proxy) go to
// Fallback.
//
// How it differs from net/http's Transport, apart from its goroutines: it
// does not ask for gzip (no Accept-Encoding is added, so answers come as
// the server stores them, and nothing is decompressed); an answer's
// trailers are read and dropped; a response head must be in the subset
// ParseResponseHead reads (else the request fails with ErrResponseHead);
// a 101 answer is an error; and the body must not be closed while another
// goroutine reads it (cancel the request's context to cut a read short).
//
// Retries: a request is sent again, once, on a new connection only when
// its write on a pooled connection failed before a byte of it left (the
// server had closed the connection). A request written in whole or in part
// is never sent twice: the server may have acted on it. A pooled connection
// is checked, before its use, to be open and silent (one system call).
//
// Cancelling a request's context cuts its dial, its write, the wait for
// its head and the reading of its body; the connection is then closed.
// The httptrace hook WroteRequest is called once the request is written
// (with the write's error when it failed).
//
// The zero Client is usable: no dial bound but the context, the default
// idle bound, no Fallback. Its methods are safe for concurrent use; the
// configuration fields must not change once it is in use.
type Client struct {
	// DialTimeout bounds a TCP connect. 0: only the context bounds it.
	DialTimeout time.Duration
	// KeepAlive is the TCP keep-alive period of the connections (see
	// net.Dialer.KeepAlive): 0 takes net's default, negative turns it off.
	KeepAlive time.Duration
	// MaxIdlePerHost bounds the idle connections kept per host:port; a
	// connection freed beyond it is closed. 0: DefaultMaxIdlePerHost.
	MaxIdlePerHost int
	// Fallback sends the requests the Client does not take. Nil: they
	// fail.
	Fallback http.RoundTripper
	// Proxy, when not nil, names the HTTP proxy of a request (as
	// http.Transport.Proxy does, e.g. http.ProxyFromEnvironment); a
	// request it names one for goes to Fallback.
	Proxy func(*http.Request) (*url.URL, error)

	mu   sync.Mutex
	idle map[string][]*clientConn // by host:port, the most recently freed last
	bufs sync.Pool                // *[]byte: request buffers
}

// clientConn is one connection, used by one request at a time.
type clientConn struct {
	addr string // the host:port dialled, its pool's key
	conn net.Conn
	rw   io.ReadWriter // conn's bytes (readWriter)
	br   *bufio.Reader // reads rw
}

// RoundTrip implements http.RoundTripper.
func (c *Client) RoundTrip(req *http.Request) (*http.Response, error) {
	if !takes(req) || c.proxied(req) {
		if c.Fallback == nil {
			closeBody(req)
			return nil, fmt.Errorf("http1: %s %s: not a request this client sends, and no fallback", req.Method, req.URL.Redacted())
		}
		return c.Fallback.RoundTrip(req)
	}
	bp := c.buffer()
	defer c.freeBuffer(bp)
	msg, err := appendRequest((*bp)[:0], req)
	closeBody(req)
	if err != nil {
		return nil, fmt.Errorf("http1: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	*bp = msg
	resp, err := c.send(req, msg)
	if err != nil {
		return nil, fmt.Errorf("http1: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	return resp, nil
}

// send writes msg, the whole request, on a connection to req's host and
// reads the answer's head.
func (c *Client) send(req *http.Request, msg []byte) (*http.Response, error) {
	ctx := req.Context()
	addr := hostPort(req)
	trace := httptrace.ContextClientTrace(ctx)
	for retried := false; ; retried = true {
		cc, reused, err := c.get(ctx, addr)
		if err != nil {
			return nil, err
		}
		stop := context.AfterFunc(ctx, cc.abort)
		n, err := cc.rw.Write(msg)
		if err != nil {
			stop()
			_ = cc.conn.Close()
			if n == 0 && reused && !retried && ctx.Err() == nil {
				continue // nothing left: the server had closed it
			}
			if trace != nil && trace.WroteRequest != nil {
				trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
			}
			return nil, ctxError(ctx, fmt.Errorf("writing the request: %w", err))
		}
		if trace != nil && trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{})
		}
		resp, err := c.readResponse(req, cc, stop)
		if err != nil {
			stop()
			_ = cc.conn.Close()
			return nil, ctxError(ctx, err)
		}
		return resp, nil
	}
}

// readResponse reads the final answer's head on cc and returns the answer
// with its body to read; stop ends the context's hold on cc.
func (c *Client) readResponse(req *http.Request, cc *clientConn, stop func() bool) (*http.Response, error) {
	var h ResponseHead
	for i := 0; ; i++ {
		n, err := readHead(cc.br, &h)
		if err != nil {
			return nil, err
		}
		if h.StatusCode >= 200 {
			resp := h.response(req)
			body := &clientBody{c: c, cc: cc, ctx: req.Context(), stop: stop, close: h.Close, remaining: h.ContentLength}
			_, _ = cc.br.Discard(n)
			switch {
			case h.Chunked:
				body.chunks = newChunks(cc.br)
			case h.ContentLength == 0:
				body.finish(true)
				resp.Body = http.NoBody
				return resp, nil
			}
			resp.Body = body
			return resp, nil
		}
		_, _ = cc.br.Discard(n)
		if h.StatusCode == http.StatusSwitchingProtocols || i == maxInformational {
			return nil, fmt.Errorf("reading the answer: %d after %d informational answers: %w", h.StatusCode, i, ErrResponseHead)
		}
	}
}

// readHead waits for a whole response head in br and parses it into h; n is
// its length (still buffered).
func readHead(br *bufio.Reader, h *ResponseHead) (n int, err error) {
	for {
		b, _ := br.Peek(br.Buffered())
		n, err := ParseResponseHead(b, h)
		switch {
		case err == nil:
			return n, nil
		case !errors.Is(err, ErrIncomplete):
			return 0, fmt.Errorf("reading the answer: %w", err)
		case len(b) == br.Size():
			return 0, fmt.Errorf("reading the answer: a head over %d bytes: %w", br.Size(), ErrResponseHead)
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			if len(b) == 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("reading the answer: %w", err)
		}
	}
}

// response is h as an http.Response to req (without its body).
func (h *ResponseHead) response(req *http.Request) *http.Response {
	resp := &http.Response{
		Status:        string(h.Status),
		StatusCode:    h.StatusCode,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    h.Minor,
		Header:        h.ToHeader(),
		ContentLength: h.ContentLength,
		Close:         h.Close,
		Request:       req,
	}
	if h.Minor == 0 {
		resp.Proto = "HTTP/1.0"
	}
	if h.Chunked {
		resp.TransferEncoding = []string{"chunked"}
	}
	return resp
}

// get returns an open idle connection to addr, or a new one; reused tells
// which.
func (c *Client) get(ctx context.Context, addr string) (cc *clientConn, reused bool, err error) {
	for {
		c.mu.Lock()
		list := c.idle[addr]
		if len(list) == 0 {
			c.mu.Unlock()
			break
		}
		cc = list[len(list)-1]
		list[len(list)-1] = nil
		c.idle[addr] = list[:len(list)-1]
		c.mu.Unlock()
		if cc.br.Buffered() == 0 && idleOpenOrUnknown(cc.conn) {
			return cc, true, nil
		}
		_ = cc.conn.Close()
	}
	d := net.Dialer{Timeout: c.DialTimeout, KeepAlive: c.KeepAlive}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	rw := readWriter(conn)
	return &clientConn{addr: addr, conn: conn, rw: rw, br: bufio.NewReaderSize(rw, clientReadBuffer)}, false, nil
}

// put keeps cc for the next request to its host, or closes it when its
// host has enough idle connections.
func (c *Client) put(cc *clientConn) {
	addr := cc.addr
	max := c.MaxIdlePerHost
	if max <= 0 {
		max = DefaultMaxIdlePerHost
	}
	c.mu.Lock()
	if c.idle == nil {
		c.idle = map[string][]*clientConn{}
	}
	if list := c.idle[addr]; len(list) < max {
		c.idle[addr] = append(list, cc)
		cc = nil
	}
	c.mu.Unlock()
	if cc != nil {
		_ = cc.conn.Close()
	}
}

// CloseIdleConnections closes the idle connections, and the Fallback's.
func (c *Client) CloseIdleConnections() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, list := range idle {
		for _, cc := range list {
			_ = cc.conn.Close()
		}
	}
	if f, ok := c.Fallback.(interface{ CloseIdleConnections() }); ok {
		f.CloseIdleConnections()
	}
}

// abort cuts the connection's pending and future reads and writes (the
// request's context ended).
func (cc *clientConn) abort() { _ = cc.conn.SetDeadline(time.Unix(1, 0)) }

func (c *Client) buffer() *[]byte {
	if bp, ok := c.bufs.Get().(*[]byte); ok {
		return bp
	}
	b := make([]byte, 0, 4<<10)
	return &b
}

func (c *Client) freeBuffer(bp *[]byte) {
	if cap(*bp) <= maxPooledBuffer {
		c.bufs.Put(bp)
	}
}

// ctxError is err, or the context's cause when the context ended (its end
// cut the connection).
func ctxError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return err
}

// takes reports whether the Client sends req itself.
func takes(req *http.Request) bool {
	known := req.ContentLength > 0 || (req.ContentLength == 0 && (req.Body == nil || req.Body == http.NoBody))
	if req.URL == nil || req.URL.Scheme != "http" || req.Method == http.MethodHead || req.Method == http.MethodConnect || req.URL.User != nil || !known || req.Close ||
		len(req.TransferEncoding) > 0 || req.Trailer != nil {
		return false
	}
	for _, k := range []string{"Expect", "Upgrade", "Connection", "Transfer-Encoding", "Te", "Trailer"} {
		if _, ok := req.Header[k]; ok {
			return false
		}
	}
	return true
}

// proxied reports whether Proxy names a proxy for req (or fails, which
// Fallback then reports).
func (c *Client) proxied(req *http.Request) bool {
	if c.Proxy == nil {
		return false
	}
	u, err := c.Proxy(req)
	return u != nil || err != nil
}

// hostPort is the address to dial for req: its URL's host, port 80 when
// it names none.
func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// appendRequest appends req's head and body to b: the request line, Host,
// a User-Agent when req has none (as net/http adds), req's headers and the
// Content-Length. A header name or value net/http would refuse is an
// error.
func appendRequest(b []byte, req *http.Request) ([]byte, error) {
	method, host := req.Method, req.Host
	if method == "" {
		method = http.MethodGet
	}
	if host == "" {
		host = req.URL.Host
	}
	if !validName(method) || !validValue(host) {
		return b, fmt.Errorf("invalid method %q or host %q", method, host)
	}
	b = append(append(append(b, method...), ' '), req.URL.RequestURI()...)
	b = append(append(append(b, " HTTP/1.1\r\nHost: "...), host...), "\r\n"...)
	if _, ok := req.Header["User-Agent"]; !ok {
		b = append(b, "User-Agent: Go-http-client/1.1\r\n"...)
	}
	for k, vv := range req.Header {
		if k == "Host" || k == "Content-Length" {
			continue
		}
		if !validName(k) {
			return b, fmt.Errorf("invalid header name %q", k)
		}
		for _, v := range vv {
			if !validValue(v) {
				return b, fmt.Errorf("invalid value of header %q", k)
			}
			b = append(append(append(append(b, k...), ": "...), v...), "\r\n"...)
		}
	}
	n := req.ContentLength
	if n > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		b = append(strconv.AppendInt(append(b, "Content-Length: "...), n, 10), "\r\n"...)
	}
	b = append(b, "\r\n"...)
	if n <= 0 {
		return b, nil
	}
	start := len(b)
	b = slices.Grow(b, int(n))[:start+int(n)]
	if _, err := io.ReadFull(req.Body, b[start:]); err != nil {
		return b, fmt.Errorf("reading the request body of %d bytes: %w", n, err)
	}
	return b, nil
}

// validName reports whether s is a token (a header name, a method).
func validName(s string) bool {
	for i := range len(s) {
		if !tokenByte(s[i]) {
			return false
		}
	}
	return s != ""
}

// validValue reports whether s holds no control byte but tab.
func validValue(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// idleOpenOrUnknown takes an idle connection to be open where it cannot
// peek (idleconn.Open).
func idleOpenOrUnknown(conn net.Conn) bool {
	open, known := idleconn.Open(conn)
	return open || !known
}
