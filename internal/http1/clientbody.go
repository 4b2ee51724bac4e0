package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httputil"
)

// errBodyClosed is what a body's reads return after its Close.
var errBodyClosed = errors.New("http1: read on a closed response body")

// clientBody is an answer's body, read from its connection by the body's
// reader. At its end the connection goes back to its Client's pool, unless
// the answer or the context closed it; a body closed before its end closes
// the connection (the rest of the answer is not read).
type clientBody struct {
	c         *Client
	cc        *clientConn // nil once the body ended or was closed
	ctx       context.Context
	stop      func() bool // ends the context's hold on cc; false: the context ended first
	close     bool        // the connection closes after this answer
	remaining int64       // bytes left of a Content-Length body; -1: chunked or up to the close
	chunks    io.Reader   // the chunked body's decoder; nil: not chunked
	err       error       // what reads return once cc is nil
}

// newChunks decodes a chunked body from br.
func newChunks(br *bufio.Reader) io.Reader { return httputil.NewChunkedReader(br) }

func (b *clientBody) Read(p []byte) (int, error) {
	if b.cc == nil {
		return 0, b.err
	}
	var n int
	var err error
	switch {
	case b.chunks != nil:
		n, err = b.chunks.Read(p)
		if err == io.EOF {
			if err = skipTrailer(b.cc.br); err == nil {
				err = io.EOF
			}
		}
	case b.remaining >= 0:
		if int64(len(p)) > b.remaining {
			p = p[:b.remaining]
		}
		n, err = b.cc.br.Read(p)
		b.remaining -= int64(n)
		switch {
		case b.remaining == 0:
			err = nil // the end: below
		case err == io.EOF:
			err = io.ErrUnexpectedEOF
		}
	default:
		n, err = b.cc.br.Read(p)
	}
	switch {
	case err == nil && b.remaining != 0:
		return n, nil
	case err == nil || err == io.EOF:
		b.err = io.EOF
		b.finish(true)
	default:
		b.err = ctxError(b.ctx, fmt.Errorf("http1: reading the body: %w", err))
		b.finish(false)
	}
	return n, b.err
}

// Close ends the body; the connection is closed unless the body was read
// to its end.
func (b *clientBody) Close() error {
	if b.cc != nil {
		b.finish(false)
	}
	b.err = errBodyClosed
	return nil
}

// finish hands the connection back to the pool when keep allows it, the
// connection stays open after this answer and the context did not cut it;
// else it closes the connection.
func (b *clientBody) finish(keep bool) {
	cc := b.cc
	b.cc = nil
	if b.stop() && keep && !b.close && cc.br.Buffered() == 0 {
		b.c.put(cc)
		return
	}
	_ = cc.conn.Close()
}

// skipTrailer reads a chunked body's trailer, up to and with the blank
// line that ends it, and drops it; nil means the body ended cleanly.
func skipTrailer(br *bufio.Reader) error {
	for size := 0; ; {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("the trailer: %w", err)
		}
		if size += len(line); size > clientReadBuffer {
			return fmt.Errorf("a trailer over %d bytes", clientReadBuffer)
		}
		if bytes.Equal(line, []byte("\r\n")) || bytes.Equal(line, []byte("\n")) {
			return nil
		}
	}
}
