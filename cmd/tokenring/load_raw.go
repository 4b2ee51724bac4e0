package main

// -client raw: each worker speaks HTTP/1.1 itself over one kept-alive
// connection per target, as wrk does and as go-redis does for Redis (a
// pooled connection, one command per round trip), so that the load
// generator's own cost does not hide the server's.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tokenring/tokenring/internal/jsonwire"
)

// rawConns are one worker's connections, by target base URL.
type rawConns map[string]*rawConn

// rawConn is one kept-alive HTTP/1.1 connection; nil c: not connected.
type rawConn struct {
	host  string // host:port
	c     net.Conn
	br    *bufio.Reader
	out   []byte    // the request being written
	body  []byte    // the last answer's body
	rearm time.Time // when the connection's deadline is next pushed back
}

// maxRawAnswer bounds an answer's body.
const maxRawAnswer = 1 << 20

// post sends body to path of base and returns the answer's status and
// body (valid until the next post). A failed exchange closes the
// connection; the next post dials again.
func (cs rawConns) post(ctx context.Context, base, path string, body []byte) (int, []byte, error) {
	rc := cs[base]
	if rc == nil {
		rc = &rawConn{host: strings.TrimPrefix(base, "http://")}
		cs[base] = rc
	}
	code, err := rc.exchange(ctx, path, body)
	if err != nil {
		rc.close()
		return 0, nil, fmt.Errorf("POST %s%s: %w", base, path, err)
	}
	return code, rc.body, nil
}

func (cs rawConns) close() {
	for _, rc := range cs {
		rc.close()
	}
}

func (rc *rawConn) close() {
	if rc.c != nil {
		_ = rc.c.Close()
		rc.c = nil
	}
}

// exchange writes one request and reads its answer.
func (rc *rawConn) exchange(ctx context.Context, path string, body []byte) (int, error) {
	if rc.c == nil {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", rc.host)
		if err != nil {
			return 0, err
		}
		rc.c, rc.br, rc.rearm = c, bufio.NewReaderSize(c, 8<<10), time.Time{}
	}
	// The deadline is pushed back at most once a rawRearm (each push is a
	// timer update in the runtime), so that an exchange always has at
	// least rawTimeout - rawRearm.
	if now := time.Now(); !now.Before(rc.rearm) {
		_ = rc.c.SetDeadline(now.Add(rawTimeout))
		rc.rearm = now.Add(rawRearm)
	}
	rc.out = append(rc.out[:0], "POST "...)
	rc.out = append(append(append(rc.out, path...), " HTTP/1.1\r\nHost: "...), rc.host...)
	rc.out = append(rc.out, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	rc.out = strconv.AppendInt(rc.out, int64(len(body)), 10)
	rc.out = append(append(rc.out, "\r\n\r\n"...), body...)
	if _, err := rc.c.Write(rc.out); err != nil {
		return 0, err
	}
	return rc.readAnswer()
}

// readAnswer reads a status line, headers and a Content-Length body;
// Connection: close closes the connection after it.
func (rc *rawConn) readAnswer() (int, error) {
	line, err := rc.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	rest, ok := bytes.CutPrefix(line, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length, closing := -1, false
	for {
		line, err := rc.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 || length > maxRawAnswer {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	if length < 0 {
		return 0, errors.New("an answer without Content-Length")
	}
	if cap(rc.body) < length {
		rc.body = make([]byte, length)
	}
	rc.body = rc.body[:length]
	if _, err := io.ReadFull(rc.br, rc.body); err != nil {
		return 0, err
	}
	if closing {
		rc.close()
	}
	return code, nil
}

// decodeDecision reads an answer's body into d: on the scanner's subset
// (the decision API's answers) without reflection, else encoding/json. The
// lease is read only with lease set (a string made per call otherwise).
func decodeDecision(b []byte, d *decision, lease bool) {
	s := jsonwire.New(b)
	ok := s.Object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "allowed":
			d.Allowed, ok = s.Bool()
		case "fallback":
			d.Fallback, ok = s.Bool()
		case "settled":
			d.Settled, ok = s.Bool()
		case "lease":
			if lease {
				d.Lease, ok = s.String()
				break
			}
			_, ok = s.Skip(3)
		default:
			_, ok = s.Skip(3)
		}
		return ok
	}) && s.End()
	if !ok {
		*d = decision{}
		_ = json.Unmarshal(b, d)
	}
}

// rawTimeout bounds one exchange of -client raw, as httpClient's Timeout
// bounds a request; less rawRearm (see exchange).
const (
	rawTimeout = 10 * time.Second
	rawRearm   = time.Second
)

// acquireRaw is acquire over the worker's own connections cs, its body
// written into the worker's buf (no formatting or allocation per call).
func (s *tokenringSystem) acquireRaw(ctx context.Context, cs rawConns, buf *[]byte, base, tenant string) outcome {
	c := &s.c
	b := strconv.AppendQuote(append((*buf)[:0], `{"tenant":`...), tenant)
	b = strconv.AppendQuote(append(b, `,"model":`...), c.model)
	b = strconv.AppendInt(append(b, `,"prompt_tokens":`...), int64(c.promptTokens), 10)
	b = strconv.AppendInt(append(b, `,"max_tokens":`...), int64(c.maxTokens), 10)
	*buf = append(b, '}')
	code, raw, err := cs.post(ctx, base, "/v1/acquire", *buf)
	if err != nil {
		return outcome{err: err}
	}
	var out decision
	decodeDecision(raw, &out, c.complete)
	o := outcome{code: code, allowed: out.Allowed, fallback: out.Fallback}
	if !c.complete {
		return o
	}
	o.complete = func(ctx context.Context) bool {
		body := fmt.Appendf(nil, `{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, tenant, out.Lease, c.promptTokens, c.maxTokens/2)
		code, raw, err := cs.post(ctx, base, "/v1/complete", body)
		var done decision
		if err == nil {
			decodeDecision(raw, &done, false)
		}
		return err == nil && code == 200 && done.Settled
	}
	return o
}
