// Package http1 serves the plainest HTTP/1.1 requests straight from a
// connection's bytes, and hands every other request, with its connection,
// to a net/http server; and its Client sends requests to plain http://
// upstreams the same way (client.go).
//
// A decision-API call is a small POST with a Content-Length body on a
// keep-alive connection. net/http spends most of a decision's CPU time on
// what such a call does not use (a header map, a goroutine per body read,
// a response writer with chunking). Server reads those calls itself and
// lets a Handler answer them; the first request it does not take (another
// method or path, a chunked body, an Expect, a malformed head, one the
// Handler declines) goes, with the bytes already read, to net/http, which
// serves that connection from then on. So net/http keeps every rule it
// enforces (limits, errors, upgrades), and the fast path only has to be
// right about the requests it takes.
package http1

import (
	"bytes"
	"errors"
	"net"
)

// Request is one request head parsed by ParseHead, and its body. Its byte
// slices point into the buffer it was parsed from.
type Request struct {
	// Path is the request target: an origin-form path, no query.
	Path []byte
	// Authorization is the Authorization header's value, nil without one.
	Authorization []byte
	// ContentLength is the body's length in bytes (the header is
	// required).
	ContentLength int64
	// Close is true when the client asked for Connection: close.
	Close bool
	// Head is the header lines, each ending in CRLF, without the request
	// line and the blank line; every line is well formed (ParseHead
	// checked it). EachHeader walks them.
	Head []byte
	// Body is the whole body (filled by the Server, not by ParseHead).
	Body []byte

	// watch is how WatchClient reaches the connection (set by the
	// Server; nil after ParseHead alone).
	watch *watchable
}

// EachHeader calls fn with each header line's name and value (trimmed), in
// order.
func (r *Request) EachHeader(fn func(name, value []byte)) {
	for rest := r.Head; len(rest) > 0; {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if name, value, ok := headerLine(line); ok {
			fn(name, value)
		}
	}
}

// RemoteAddr is the address of the client that sent the request: the
// connection's peer. Nil on a request the Server did not read (ParseHead
// alone).
func (r *Request) RemoteAddr() net.Addr {
	if r.watch == nil || r.watch.c == nil {
		return nil
	}
	return r.watch.c.RemoteAddr()
}

// ErrIncomplete is ParseHead's answer to a buffer that does not yet hold a
// whole head (no blank line).
var ErrIncomplete = errors.New("http1: incomplete request head")

// ErrNotPlain is ParseHead's answer to a head the fast path does not take:
// net/http serves it.
var ErrNotPlain = errors.New("http1: not a plain request")

// ParseHead parses the request head at the start of b: a request line
// "POST <path> HTTP/1.1" and header lines up to a blank line. It returns
// the head's length in bytes. A head it takes has one valid Host header, exactly
// one Content-Length of at most maxBody, no Transfer-Encoding, Expect or
// Upgrade, only well-formed header names and values, and a path without a
// query, and CRLF line endings; anything else is ErrNotPlain (and
// net/http's to answer), a head not yet ended ErrIncomplete (a bare LF in
// what is there already is ErrNotPlain). ParseHead allocates nothing.
func ParseHead(b []byte, maxBody int64, req *Request) (n int, err error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	seen := b // what is read of the head so far
	if end >= 0 {
		seen = b[:end+4]
	}
	// net/http also ends lines with a bare LF: such a head may be whole
	// without a CRLF CRLF, and waiting for one would leave the client
	// unanswered. net/http reads it.
	if bareLF(seen) {
		return 0, ErrNotPlain
	}
	if end < 0 {
		if !plainSoFar(b) { // net/http answers a bad line without waiting for the rest
			return 0, ErrNotPlain
		}
		return 0, ErrIncomplete
	}
	head := b[:end+2] // every line ends with CRLF
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	*req = Request{ContentLength: -1, Head: rest}
	if !requestLine(line, req) {
		return 0, ErrNotPlain
	}
	var host, length bool
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := headerLine(line)
		if !ok {
			return 0, ErrNotPlain
		}
		switch {
		case equalFold(name, "host"):
			if host || !validHost(value) { // net/http answers 400 malformed Host header
				return 0, ErrNotPlain
			}
			host = true
		case equalFold(name, "content-length"):
			if length {
				return 0, ErrNotPlain
			}
			length = true
			if req.ContentLength = decimal(value, maxBody); req.ContentLength < 0 {
				return 0, ErrNotPlain
			}
		case equalFold(name, "authorization"):
			if req.Authorization != nil {
				return 0, ErrNotPlain
			}
			req.Authorization = value
		case equalFold(name, "connection"):
			if !connection(value, req) {
				return 0, ErrNotPlain
			}
		case equalFold(name, "transfer-encoding"), equalFold(name, "expect"), equalFold(name, "upgrade"):
			return 0, ErrNotPlain
		}
	}
	if !host || !length {
		return 0, ErrNotPlain
	}
	return end + 4, nil
}

// plainSoFar reports whether the lines b has ended (with CRLF) are a
// plain request line and well-formed header lines: the start of a head
// ParseHead may take once it is whole.
func plainSoFar(b []byte) bool {
	var req Request
	for first := true; ; first = false {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		switch {
		case !ok:
			return true
		case first && !requestLine(line, &req):
			return false
		case !first:
			if _, _, ok := headerLine(line); !ok {
				return false
			}
		}
		b = rest
	}
}

// bareLF reports whether b holds a LF not preceded by a CR.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// validHost reports whether a Host header's value is one net/http takes
// (httpguts.ValidHostHeader): every byte a letter, a digit or one of
// "!$%&'()*+,-.:;=[]_~".
func validHost(v []byte) bool {
	for _, c := range v {
		if !hostBytes[c] {
			return false
		}
	}
	return true
}

// hostBytes marks the bytes validHost allows.
var hostBytes = func() (t [256]bool) {
	for _, c := range []byte("!$%&'()*+,-.:;=[]_~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		t[c] = true
	}
	return t
}()

// requestLine takes "POST <path> HTTP/1.1" with an origin-form path of
// token-safe bytes and no query or fragment.
func requestLine(line []byte, req *Request) bool {
	rest, ok := bytes.CutPrefix(line, []byte("POST /"))
	if !ok {
		return false
	}
	path, ok := bytes.CutSuffix(rest, []byte(" HTTP/1.1"))
	if !ok {
		return false
	}
	for _, c := range path {
		if !pathByte(c) {
			return false
		}
	}
	req.Path = line[len("POST ") : len("POST /")+len(path)]
	return true
}

// pathByte is a byte a plain path may hold: letters, digits and "-._~/".
// Anything else (a query, percent-escapes, a dot-segment's neighbours are
// fine but "%" is not) is left to net/http's rules.
func pathByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '/'
}

// headerLine splits "Name: value" into a token name and a value with its
// surrounding blanks trimmed; ok is false for a malformed line (net/http
// answers those), a folded continuation included.
func headerLine(line []byte) (name, value []byte, ok bool) {
	name, value, ok = bytes.Cut(line, []byte(":"))
	if !ok || len(name) == 0 {
		return nil, nil, false
	}
	for _, c := range name {
		if !tokenByte(c) {
			return nil, nil, false
		}
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, false
		}
	}
	return name, bytes.Trim(value, " \t"), true
}

// tokenByte is a byte of an RFC 9110 token (a header name).
func tokenByte(c byte) bool { return tokenBytes[c] }

// tokenBytes marks the bytes of an RFC 9110 token.
var tokenBytes = func() (t [256]bool) {
	for _, c := range []byte("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
		t[c] = true
	}
	return t
}()

// equalFold reports whether the ASCII name equals lower, ignoring case.
func equalFold(name []byte, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i := range len(name) {
		if name[i]|0x20 != lower[i] {
			return false
		}
	}
	return true
}

// decimal parses 1 to 19 ASCII digits as a value of at most max, or -1.
func decimal(b []byte, max int64) int64 {
	if len(b) == 0 || len(b) > 19 {
		return -1
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int64(c-'0')
		if v > max {
			return -1
		}
	}
	return v
}

// connection takes a Connection header of "keep-alive" or "close"; any
// other value (an upgrade, a list) is ErrNotPlain's.
func connection(value []byte, req *Request) bool {
	switch {
	case equalFold(value, "close"):
		req.Close = true
	case equalFold(value, "keep-alive"):
	default:
		return false
	}
	return true
}
