package proxy

// Forwarding an admitted request to its upstream, and relaying a whole
// (non-streaming) answer back; streams are relayed by relayStream (sse.go).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// maxAnswer is the bytes of a non-streaming answer parsed for its usage;
// larger ones pass through and release.
const maxAnswer = 32 << 20

// hopHeaders are connection-level headers a proxy does not forward.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyHeader copies src's end-to-end headers into dst, except those skip
// names (canonical names).
func copyHeader(dst, src http.Header, skip func(string) bool) {
	var conn map[string]bool // nil: no Connection header (the usual case)
	for _, v := range src.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if conn == nil {
				conn = map[string]bool{}
			}
			conn[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	n := 0
	for _, vv := range src {
		n += len(vv)
	}
	values := make([]string, 0, n) // one backing array for every value copied
	for k, vv := range src {
		if hopHeaders[k] || conn[k] || skip(k) {
			continue
		}
		values = append(values, vv...)
		dst[k] = values[len(values)-len(vv) : len(values) : len(values)]
	}
}

// forward sends the request to the upstream at path (with its key, see
// Upstream.APIKey) and relays the answer, within the upstream's timeouts.
func (x *exchange) forward(w http.ResponseWriter, req *http.Request, u Upstream, path string) {
	c := x.c
	if req.Context().Err() != nil { // gone while queued or admitted: nothing was sent
		x.finish(node.OpCancel, limiter.Usage{})
		return
	}
	// The query string is not forwarded: neither provider's endpoint
	// takes one.
	url, key, limits := u.BaseURL+path, u.APIKey, u.Timeouts.withDefaults()
	ctx, stop := context.WithCancelCause(req.Context())
	defer stop(nil)
	var sent atomic.Bool // the whole request was written: the upstream may act on it
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		sent.Store(i.Err == nil)
	}})
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(c.body))
	if err != nil {
		x.finish(node.OpCancel, limiter.Usage{})
		c.p.fail(w, apiError{http.StatusBadGateway, errServer, "bad upstream URL: " + err.Error()})
		return
	}
	up.Header = upstreamHeader(req, c, key) // an allow-list: upheaders.go
	headers := x.s.alarms.After(limits.ResponseHeader, func() { stop(&upstreamTimeout{"sent no response headers", limits.ResponseHeader}) })
	began := time.Now()
	resp, err := x.s.upstreamClient(u).Do(up)
	headers.Stop()
	x.s.upstream.observe(ctx, req.Context(), time.Since(began), resp, err)
	if err != nil {
		var op *net.OpError
		unsent := !sent.Load() || (errors.As(err, &op) && op.Op == "dial")
		switch {
		case unsent:
			x.finish(node.OpCancel, limiter.Usage{}) // it never reached the upstream
		default:
			x.finish(node.OpRelease, limiter.Usage{}) // the upstream may have started
		}
		if req.Context().Err() != nil {
			return
		}
		var late *upstreamTimeout
		if errors.As(context.Cause(ctx), &late) {
			c.p.fail(w, apiError{http.StatusGatewayTimeout, errServer, late.Error()})
			return
		}
		c.p.fail(w, apiError{http.StatusBadGateway, errServer, "upstream unreachable: " + err.Error()})
		return
	}
	resp.Body = newIdleBody(resp.Body, x.s.alarms, limits.StreamIdle, stop)
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header, func(k string) bool { return k == "Content-Length" || isRateLimitHeader(k) })
	if resp.StatusCode/100 == 2 && strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream") {
		x.relayStream(w, req, resp)
		return
	}
	x.relayBody(w, req, resp)
}

// relayBody relays a non-streaming answer: read it whole, settle, write it.
func (x *exchange) relayBody(w http.ResponseWriter, req *http.Request, resp *http.Response) {
	raw, err := readAnswer(resp)
	if err != nil {
		x.finish(node.OpRelease, limiter.Usage{})
		if req.Context().Err() == nil {
			w.Header().Del("Content-Type")
			x.c.p.fail(w, apiError{http.StatusBadGateway, errServer, "upstream answer cut: " + err.Error()})
		}
		return
	}
	switch {
	case len(raw) > maxAnswer:
		x.finish(node.OpRelease, limiter.Usage{})
	case resp.StatusCode/100 != 2:
		x.finish(node.OpSettle, limiter.Usage{PromptTokens: x.c.promptTokens})
	default:
		if x.c.p.readAnswer(&x.seen, raw) {
			x.settleSeen()
		} else {
			x.finish(node.OpRelease, limiter.Usage{})
		}
	}
	if len(raw) <= maxAnswer {
		w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := w.Write(raw); err != nil || len(raw) <= maxAnswer {
		return
	}
	_, _ = io.Copy(w, resp.Body)
}

// readAnswer reads resp's body whole, up to maxAnswer+1 bytes, into a
// buffer of its Content-Length when it has one.
func readAnswer(resp *http.Response) ([]byte, error) {
	body := io.LimitReader(resp.Body, maxAnswer+1)
	n := resp.ContentLength
	if n < 0 || n > maxAnswer {
		return io.ReadAll(body)
	}
	b := make([]byte, 0, n+1) // +1: room for the read that finds EOF
	for {
		m, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		case len(b) == cap(b): // longer than announced: the rest as it comes
			rest, err := io.ReadAll(body)
			return append(b, rest...), err
		}
	}
}
