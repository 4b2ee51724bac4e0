package client

// A sender's own HTTP/1.1 connection to a node on plain http: one request
// at a time (a sender has at most one in flight), written in one write and
// read straight from the socket by the sender, without net/http's
// goroutine hand-offs and allocations per request (the most costly part of
// a batch on the client's side after the calls themselves). Used when
// Config.HTTPClient is nil and the base URL is http://; an https node, or
// a Client given its own HTTPClient, goes through net/http.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"time"

	"github.com/tokenring/tokenring/internal/idleconn"
)

// rawIdleCheck is how long a connection may sit idle before a request
// first checks that the node has not closed it (its idle timeout): a
// request written on a closed connection is lost, and a POST written is
// not sent again. The check costs a system call.
const rawIdleCheck = 50 * time.Millisecond

// rawConn is one sender's connection; only its sender uses it.
type rawConn struct {
	addr     string // host:port to dial
	basePath string // the base URL's path, before each request's
	hostLine string // "Host: ...\r\n"
	auth     string // "Authorization: ...\r\n", or empty
	dialer   net.Dialer
	conn     net.Conn // nil: not connected
	br       *bufio.Reader
	idle     time.Time // when the last answer was read
	buf      []byte    // the request's head and body
	stop     func() bool
}

func newRawConn(host, basePath, token string) *rawConn {
	r := &rawConn{addr: host, basePath: basePath, hostLine: "Host: " + host + "\r\n",
		dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
	if _, _, err := net.SplitHostPort(host); err != nil {
		r.addr = net.JoinHostPort(host, "80")
	}
	if token != "" {
		r.auth = "Authorization: Bearer " + token + "\r\n"
	}
	return r
}

// close drops the connection.
func (r *rawConn) close() {
	if r.conn != nil {
		r.stop()
		_ = r.conn.Close()
		r.conn = nil
	}
}

// ready returns a connection that the node has not closed, dialling one if
// need be; ctx is the Client's (its end closes the connection).
func (r *rawConn) ready(ctx context.Context) error {
	if r.conn != nil && time.Since(r.idle) > rawIdleCheck && !r.alive() {
		r.close()
	}
	if r.conn != nil {
		return nil
	}
	conn, err := r.dialer.DialContext(ctx, "tcp", r.addr)
	if err != nil {
		return err
	}
	r.conn = conn
	r.stop = context.AfterFunc(ctx, func() { _ = conn.Close() })
	if r.br == nil {
		r.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		r.br.Reset(conn)
	}
	return nil
}

// alive reports whether an idle connection is still open, with nothing to
// read (an answer with no request is as bad as a close).
func (r *rawConn) alive() bool {
	open, known := idleconn.Open(r.conn)
	return r.br.Buffered() == 0 && open && known // where it cannot tell, the connection is dropped
}

// post sends body to path and reads the answer into answer. written
// reports that the request was written (whole or in part) before err.
func (r *rawConn) post(ctx context.Context, path string, body []byte, answer []byte) (rep reply, out []byte) {
	if err := r.ready(ctx); err != nil {
		return reply{err: fmt.Errorf("tokenring POST %s: %w", path, err)}, answer
	}
	r.buf = append(r.buf[:0], "POST "...)
	r.buf = append(append(append(r.buf, r.basePath...), path...), " HTTP/1.1\r\n"...)
	r.buf = append(append(r.buf, r.hostLine...), r.auth...)
	r.buf = append(r.buf, "Content-Type: application/json\r\nContent-Length: "...)
	r.buf = strconv.AppendInt(r.buf, int64(len(body)), 10)
	r.buf = append(append(r.buf, "\r\n\r\n"...), body...)
	if n, err := r.conn.Write(r.buf); err != nil {
		r.close()
		return reply{err: fmt.Errorf("tokenring POST %s: %w", path, err), written: n > 0}, answer
	}
	rep, out, keep := r.read(answer)
	if rep.err != nil {
		rep.err = fmt.Errorf("tokenring POST %s: %w", path, rep.err)
	}
	if !keep {
		r.close()
	}
	r.idle = time.Now()
	return rep, out
}

// read reads one answer: its status, its Retry-After, its body (appended
// to answer). keep is false when the connection is not to be used again.
func (r *rawConn) read(answer []byte) (rep reply, out []byte, keep bool) {
	rep.written = true
	tp := textproto.NewReader(r.br)
	line, err := tp.ReadLine()
	if err != nil {
		rep.err = fmt.Errorf("reading the answer: %w", err)
		return rep, answer, false
	}
	proto, status, ok := bytes.Cut([]byte(line), []byte(" "))
	if code, _, _ := bytes.Cut(status, []byte(" ")); ok && string(proto) == "HTTP/1.1" && len(code) == 3 {
		rep.status, err = strconv.Atoi(string(code))
	}
	if rep.status < 200 || err != nil {
		rep.err = fmt.Errorf("reading the answer: status line %q", line)
		return rep, answer, false
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		rep.err = fmt.Errorf("reading the answer's head: %w", err)
		return rep, answer, false
	}
	rep.retryAfter = retryAfterHeader(http.Header(h))
	keep = h.Get("Connection") != "close"
	var body io.Reader
	te, cl := h.Get("Transfer-Encoding"), h.Get("Content-Length")
	switch {
	case te == "chunked":
		body = httputil.NewChunkedReader(r.br)
	case te == "" && cl != "":
		n, err := strconv.ParseInt(cl, 10, 64)
		if err != nil || n < 0 || n > maxAnswer {
			rep.err = fmt.Errorf("reading the answer: Content-Length %q", cl)
			return rep, answer, false
		}
		body = io.LimitReader(r.br, n)
	default:
		rep.err = fmt.Errorf("reading the answer: no length (Transfer-Encoding %q)", te)
		return rep, answer, false
	}
	if out, err = readAnswer(answer, body); err != nil {
		rep.err = fmt.Errorf("reading the answer: %w", err)
		return rep, out, false
	}
	if len(out) >= maxAnswer {
		keep = false // the rest was not read
	} else if te == "chunked" {
		_, err := tp.ReadMIMEHeader() // the trailer, and the blank line that ends it
		keep = keep && err == nil
	}
	return rep, out, keep
}
