package http1

// The client side's response head: parsed without allocating, in the
// subset of HTTP/1.x that a plain upstream answers in, and turned into the
// net/http shape (an http.Header) with three allocations.

import (
	"bytes"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
)

// ErrResponseHead is ParseResponseHead's answer to a head outside the
// subset it reads (see ParseResponseHead). A Client fails the request with
// it.
var ErrResponseHead = errors.New("http1: response head not read by this client")

// ResponseHead is one response head parsed by ParseResponseHead. Its byte
// slices point into the buffer it was parsed from.
type ResponseHead struct {
	// Minor is the protocol's minor version: 1 for HTTP/1.1, 0 for
	// HTTP/1.0.
	Minor int
	// StatusCode is the three-digit status, 100 to 599.
	StatusCode int
	// Status is the status line after the protocol: "200 OK".
	Status []byte
	// ContentLength is the body's length in bytes: from Content-Length,
	// 0 for a status without a body (1xx, 204, 304), -1 when the body is
	// chunked or ends when the connection closes.
	ContentLength int64
	// Chunked is true for Transfer-Encoding: chunked.
	Chunked bool
	// Close is true when the connection is not to be used again: the
	// server said so (Connection: close, or HTTP/1.0 without keep-alive)
	// or the body ends with the connection.
	Close bool
	// Lines are the header lines, each ending with CRLF, without the
	// status line and the blank line.
	Lines []byte
	// dropConnection: net/http removes the Connection header of an
	// HTTP/1.1 response that closes (ToHeader does the same).
	dropConnection bool
}

// ParseResponseHead parses the response head at the start of b, which
// must hold the whole head (up to and with its blank line), and returns its
// length. It takes a status line "HTTP/1.1 <3 digits> <reason>" (or
// HTTP/1.0), header lines of token names and values without control bytes
// other than tab, each ended by CRLF (no folding), at most one
// Content-Length of decimal digits, and a Transfer-Encoding that is only
// "chunked", on an HTTP/1.1 answer with a body and no Content-Length.
// Anything else (including a head net/http would take, such as a repeated
// Content-Length) is ErrResponseHead, and ErrIncomplete when b holds no
// blank line. A head it takes, net/http's http.ReadResponse reads the same
// way (FuzzParseResponseHead). It allocates nothing.
func ParseResponseHead(b []byte, h *ResponseHead) (n int, err error) {
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if end < 0 {
		if bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n")) {
			return 0, ErrResponseHead // a head ended by bare LFs: not ours
		}
		return 0, ErrIncomplete
	}
	line, rest, _ := bytes.Cut(b[:end+2], []byte("\r\n"))
	*h = ResponseHead{ContentLength: -1, Lines: rest}
	if !statusLine(line, h) {
		return 0, ErrResponseHead
	}
	var length, te, keepAlive bool
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := headerLine(line)
		if !ok {
			return 0, ErrResponseHead
		}
		switch {
		case equalFold(name, "content-length"):
			if length {
				return 0, ErrResponseHead
			}
			length = true
			if h.ContentLength = decimal(value, 1<<62); h.ContentLength < 0 {
				return 0, ErrResponseHead
			}
		case equalFold(name, "transfer-encoding"):
			if te || !equalFold(value, "chunked") {
				return 0, ErrResponseHead
			}
			te = true
		case equalFold(name, "connection"):
			h.Close = h.Close || hasToken(value, "close")
			keepAlive = keepAlive || hasToken(value, "keep-alive")
		}
	}
	h.dropConnection = h.Minor == 1 && h.Close
	if h.Minor == 0 && !keepAlive {
		h.Close = true
	}
	bodyless := h.StatusCode < 200 || h.StatusCode == 204 || h.StatusCode == 304
	switch {
	case te && (length || bodyless || h.Minor == 0):
		return 0, ErrResponseHead
	case bodyless:
		h.ContentLength = 0
	case te:
		h.Chunked = true
	case !length:
		h.Close = true // the body ends when the connection does
	}
	return end + 4, nil
}

// statusLine takes "HTTP/1.x NNN reason" with a status of 100 to 599.
func statusLine(line []byte, h *ResponseHead) bool {
	rest, ok := bytes.CutPrefix(line, []byte("HTTP/1."))
	if !ok || len(rest) < 5 || (rest[0] != '0' && rest[0] != '1') || rest[1] != ' ' {
		return false
	}
	h.Minor = int(rest[0] - '0')
	h.Status = bytes.TrimLeft(rest[2:], " ")
	code := h.Status
	if len(code) > 3 {
		if code[3] != ' ' {
			return false
		}
		code = code[:3]
	}
	if len(code) != 3 || code[0] < '1' || code[0] > '5' {
		return false
	}
	h.StatusCode = int(decimal(code, 999))
	for _, c := range h.Status {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return h.StatusCode >= 100
}

// hasToken reports whether the comma-separated list v holds token (ASCII
// case ignored), as net/http reads a Connection header.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte(","))
		if equalFold(bytes.Trim(t, " \t"), token) {
			return true
		}
	}
	return false
}

// ToHeader returns h's header lines as net/http's http.ReadResponse gives
// them: canonical names, values trimmed, without Transfer-Encoding (it is
// in Chunked) and, on an HTTP/1.1 answer that closes, without Connection.
// It allocates the map, one string for all the text and one slice for all
// the values.
func (h *ResponseHead) ToHeader() http.Header {
	text := string(h.Lines)
	n := bytes.Count(h.Lines, []byte("\r\n"))
	hdr := make(http.Header, n)
	values := make([]string, 0, n)
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\r\n")
		text = rest
		colon := strings.IndexByte(line, ':')
		name := textproto.CanonicalMIMEHeaderKey(line[:colon])
		if name == "Transfer-Encoding" || (name == "Connection" && h.dropConnection) {
			continue
		}
		values = append(values, textproto.TrimString(line[colon+1:]))
		if vv := hdr[name]; vv != nil {
			hdr[name] = append(vv, values[len(values)-1])
			continue
		}
		hdr[name] = values[len(values)-1 : len(values) : len(values)]
	}
	return hdr
}
