package http1

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Response is a Handler's answer. The Server writes its status line, the
// Date, Content-Length and (when the connection closes after it)
// Connection: close headers itself.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header holds the other header lines, each "Name: value\r\n".
	Header []byte
	// Body is the whole body.
	Body []byte
	// Abort, when set, sends nothing: the Server closes the connection
	// instead, so that the client sees the answer fail (as net/http does
	// for a handler that panics with http.ErrAbortHandler).
	Abort bool
}

// AddHeader appends the header line "name: value".
func (r *Response) AddHeader(name, value string) {
	r.Header = append(append(append(append(r.Header, name...), ": "...), value...), "\r\n"...)
}

// reset empties r, keeping its buffers.
func (r *Response) reset() {
	*r = Response{Header: r.Header[:0], Body: r.Body[:0]}
}

// appendTo appends the whole answer to dst: what net/http writes for a
// handler that set the same headers and wrote the same body in one go.
func (r *Response) appendTo(dst []byte, date []byte, close bool) []byte {
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(append(dst, ' '), http.StatusText(r.Status)...)
	dst = append(dst, "\r\n"...)
	dst = append(dst, r.Header...)
	if close {
		dst = append(dst, "Connection: close\r\n"...)
	}
	dst = append(append(append(dst, "Date: "...), date...), "\r\n"...)
	dst = strconv.AppendInt(append(dst, "Content-Length: "...), int64(len(r.Body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, r.Body...)
}

// dateCache is the Date header's value, formatted once a second.
type dateCache struct {
	last atomic.Pointer[datedValue]
}

type datedValue struct {
	unix  int64
	value []byte
}

// get returns the HTTP date of now, reusing the last one within a second.
func (d *dateCache) get(now time.Time) []byte {
	if v := d.last.Load(); v != nil && v.unix == now.Unix() {
		return v.value
	}
	v := &datedValue{unix: now.Unix(), value: now.UTC().AppendFormat(nil, http.TimeFormat)}
	d.last.Store(v)
	return v.value
}
