package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxAnswer bounds the bytes read of one answer: a full batch's results.
const maxAnswer = 64 << 20

// result is one call's answer: its HTTP status (or batch slot's) and JSON
// body, or err when there is none. retryAfter is the answer's retry-after
// (retry_after_ms, else the Retry-After header); written reports that the
// request reached the wire before err (a call not written may be resent).
type result struct {
	status     int
	body       json.RawMessage
	retryAfter time.Duration
	err        error
	written    bool
}

// pending is one queued call.
type pending struct {
	op   string       // acquire, complete or renew: the single endpoint's name
	body bodyAppender // acquireWire or leaseWire, with Op set
	done chan result
	// state is 0 while the caller waits, then 1 once delivered, or 2 once
	// the caller gave up (abandon); it moves once.
	state atomic.Int32
	// release, if set, is called with the lease of an admission won by a
	// call whose caller had given up.
	release func(tenant, lease string)
}

// deliver hands r to the waiting caller; for an abandoned acquire that was
// admitted, it releases the admission instead.
func (p *pending) deliver(r result) {
	if p.state.CompareAndSwap(0, 1) {
		p.done <- r
		return
	}
	if p.release == nil || p.op != "acquire" || r.err != nil || r.status != http.StatusOK {
		return
	}
	var a answerWire
	if decodeAnswer(r.body, &a) == nil && a.Allowed && a.Lease != "" {
		p.release(p.body.(acquireWire).Tenant, a.Lease)
	}
}

// abandon marks p given up by its caller; false if it was delivered first.
func (p *pending) abandon() bool { return p.state.CompareAndSwap(0, 2) }

// single is p's body for its single endpoint: without "op".
func (p *pending) single() bodyAppender {
	switch b := p.body.(type) {
	case acquireWire:
		b.Op = ""
		return b
	case leaseWire:
		b.Op = ""
		return b
	}
	return p.body
}

// queue holds the calls waiting for a sender. kick holds a token whenever
// calls may be waiting: push puts one, and take puts it back while calls
// remain, so no call waits while a sender is idle.
type queue struct {
	mu     sync.Mutex
	calls  []*pending
	closed bool
	kick   chan struct{} // capacity 1
}

func newQueue() *queue { return &queue{kick: make(chan struct{}, 1)} }

// push queues p; false once the queue is closed.
func (q *queue) push(p *pending) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.calls = append(q.calls, p)
	q.mu.Unlock()
	q.signal()
	return true
}

func (q *queue) signal() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// take removes up to n waiting calls, oldest first, skipping those their
// callers gave up.
func (q *queue) take(n int) []*pending {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*pending
	i := 0
	for ; i < len(q.calls) && len(out) < n; i++ {
		if q.calls[i].state.Load() == 0 {
			out = append(out, q.calls[i])
		}
	}
	rest := copy(q.calls, q.calls[i:])
	clear(q.calls[rest:])
	q.calls = q.calls[:rest]
	if rest > 0 {
		q.signal()
	}
	return out
}

// close refuses further pushes and returns the calls still waiting.
func (q *queue) close() []*pending {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	out := q.calls
	q.calls = nil
	return out
}

// send is one sender: it takes whatever calls are waiting (up to MaxBatch)
// and sends them as one request, until Close.
func (c *Client) send() {
	for {
		select {
		case <-c.closed:
			return
		case <-c.queue.kick:
		}
		calls := c.queue.take(c.cfg.MaxBatch)
		switch len(calls) {
		case 0:
		case 1:
			calls[0].deliver(c.post("/v1/"+calls[0].op, calls[0].single()))
		default:
			c.sendBatch(calls)
		}
	}
}

// batchWire is the body of POST /v1/batch.
type batchWire struct {
	Calls []bodyAppender `json:"calls"`
}

// slotWire is one result of /v1/batch.
type slotWire struct {
	Status       int             `json:"status"`
	Body         json.RawMessage `json:"body"`
	RetryAfterMS int64           `json:"retry_after_ms"`
}

// sendBatch sends calls as one POST /v1/batch and delivers each its slot;
// an answer other than 200 is every call's. A batch over the node's body
// cap (413) is sent again as two halves.
func (c *Client) sendBatch(calls []*pending) {
	bodies := make([]bodyAppender, len(calls))
	for i, p := range calls {
		bodies[i] = p.body
	}
	res := c.post("/v1/batch", batchWire{Calls: bodies})
	if res.err == nil && res.status == http.StatusRequestEntityTooLarge && len(calls) > 1 {
		c.sendBatch(calls[:len(calls)/2])
		c.sendBatch(calls[len(calls)/2:])
		return
	}
	var out batchAnswer
	if res.err == nil && res.status == http.StatusOK {
		if err := decodeBatch(res.body, &out); err != nil || len(out.Results) != len(calls) {
			res = result{err: fmt.Errorf("tokenring batch: %d results for %d calls (%v)", len(out.Results), len(calls), err), written: true}
		}
	}
	if res.err != nil || res.status != http.StatusOK {
		for _, p := range calls {
			p.deliver(res)
		}
		return
	}
	for i, p := range calls {
		s := out.Results[i]
		p.deliver(result{status: s.Status, body: s.Body, retryAfter: time.Duration(s.RetryAfterMS) * time.Millisecond})
	}
}

// post sends v as JSON to path on the Client's own context (ended by Close).
func (c *Client) post(path string, v bodyAppender) result {
	body := v.appendJSON(make([]byte, 0, 256))
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return result{err: fmt.Errorf("tokenring %s: %w", path, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	res := c.roundTrip(req)
	if res.err != nil && c.ctx.Err() != nil {
		res.err = ErrClosed
	}
	return res
}

// roundTrip sends req with the token and reads the answer.
func (c *Client) roundTrip(req *http.Request) result {
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	}
	var written atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { written.Store(true) },
	}))
	resp, err := c.http.Do(req)
	if err != nil {
		return result{err: fmt.Errorf("tokenring %s %s: %w", req.Method, req.URL.Path, err), written: written.Load()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return result{err: fmt.Errorf("tokenring %s %s: reading the answer: %w", req.Method, req.URL.Path, err), written: true}
	}
	res := result{status: resp.StatusCode, body: body, written: true}
	if resp.StatusCode != http.StatusOK {
		res.retryAfter = retryAfter(resp.Header, body)
	}
	return res
}

// retryAfter is an answer's retry_after_ms, else its Retry-After header in
// seconds; 0 when neither is given.
func retryAfter(h http.Header, body []byte) time.Duration {
	var a struct {
		RetryAfterMS int64 `json:"retry_after_ms"`
	}
	if json.Unmarshal(body, &a) == nil && a.RetryAfterMS > 0 {
		return time.Duration(a.RetryAfterMS) * time.Millisecond
	}
	if s, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}
