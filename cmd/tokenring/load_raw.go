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
	host string // host:port
	c    net.Conn
	br   *bufio.Reader
	out  []byte // the request being written
	body []byte // the last answer's body
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
		rc.c, rc.br = c, bufio.NewReaderSize(c, 8<<10)
	}
	_ = rc.c.SetDeadline(time.Now().Add(rawTimeout))
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
// (the decision API's answers) without reflection, else encoding/json.
func decodeDecision(b []byte, d *decision) {
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
			d.Lease, ok = s.String()
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
// bounds a request.
const rawTimeout = 10 * time.Second

// acquireRaw is acquire over the worker's own connections cs.
func (s *tokenringSystem) acquireRaw(ctx context.Context, cs rawConns, base, tenant string) outcome {
	c := s.c
	body := fmt.Appendf(nil, `{"tenant":%q,"model":%q,"prompt_tokens":%d,"max_tokens":%d}`, tenant, c.model, c.promptTokens, c.maxTokens)
	code, raw, err := cs.post(ctx, base, "/v1/acquire", body)
	if err != nil {
		return outcome{err: err}
	}
	var out decision
	decodeDecision(raw, &out)
	return outcome{code: code, allowed: out.Allowed, fallback: out.Fallback, complete: func(ctx context.Context) bool {
		body := fmt.Appendf(nil, `{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, tenant, out.Lease, c.promptTokens, c.maxTokens/2)
		code, raw, err := cs.post(ctx, base, "/v1/complete", body)
		var done decision
		if err == nil {
			decodeDecision(raw, &done)
		}
		return err == nil && code == 200 && done.Settled
	}}
}
