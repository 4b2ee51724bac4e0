package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxAnswer bounds the bytes read of one answer: a full batch's results.
const maxAnswer = 64 << 20

// op is a call's kind.
type op uint8

const (
	opAcquire op = iota
	opComplete
	opRenew
)

// opNames are the ops' names: their "op" in a batch, and their single
// endpoints' paths under /v1/.
var opNames = [...]string{opAcquire: "acquire", opComplete: "complete", opRenew: "renew"}

// opPaths are the ops' single endpoints.
var opPaths = [...]string{opAcquire: "/v1/acquire", opComplete: "/v1/complete", opRenew: "/v1/renew"}

// result is one call's answer: its HTTP status (or its batch slot's) and
// its body, decoded (decodeErr when it did not decode), or err when there
// is none. retryAfter is the answer's retry-after (retry_after_ms, else the
// Retry-After header); written reports that the request reached the wire
// before err (a call not written may be resent).
type result struct {
	status     int
	answer     answerWire
	decodeErr  error
	retryAfter time.Duration
	err        error
	written    bool
}

// pending is one call, queued or in flight. Pendings are pooled
// (Client.get, Client.put): one that its caller gave up is never reused,
// as a sender may still hold it.
type pending struct {
	op    op
	acq   acquireWire // op acquire
	lease leaseWire   // op complete and renew
	// prompt and promptTokens hold what acq.Prompt or acq.PromptTokens
	// points to, so that they live as long as the pending.
	prompt       string
	promptTokens int64
	done         chan result // capacity 1; empty whenever the pending is not in use
	// state is 0 while the caller waits, then 1 once delivered, or 2 once
	// the caller gave up (abandon); it moves once a use.
	state atomic.Int32
}

// abandon marks p given up by its caller; false if it was delivered first.
func (p *pending) abandon() bool { return p.state.CompareAndSwap(0, 2) }

// appendJSON appends p's body: with "op" as a call of /v1/batch, or
// without as its single endpoint's body.
func (p *pending) appendJSON(dst []byte, batch bool) []byte {
	name := ""
	if batch {
		name = opNames[p.op]
	}
	if p.op == opAcquire {
		w := p.acq
		w.Op = name
		return w.appendJSON(dst)
	}
	w := p.lease
	w.Op = name
	return w.appendJSON(dst)
}

// deliver hands r to p's waiting caller; for an abandoned acquire that was
// admitted, it releases the admission instead (so that its slot is not
// held until the lease's TTL). The sender does not touch p after it.
func (c *Client) deliver(p *pending, r result) {
	if p.state.CompareAndSwap(0, 1) {
		p.done <- r
		return
	}
	if p.op == opAcquire && r.err == nil && r.decodeErr == nil && r.status == http.StatusOK && r.answer.Allowed && r.answer.Lease != "" {
		c.releaseAbandoned(p.acq.Tenant, r.answer.Lease)
	}
}

// queue holds the calls waiting for a sender, and counts the requests in
// flight. kick holds a token whenever a sender may have calls to take:
// push puts one, take puts it back while calls remain, and landed while
// calls wait, so no call waits while a sender could take it.
type queue struct {
	mu      sync.Mutex
	calls   []*pending
	closed  bool
	flights int           // requests in flight
	flying  int           // calls those requests carry
	kick    chan struct{} // capacity 1
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

// take appends to dst up to n waiting calls, oldest first, skipping those
// their callers gave up, and counts them in flight until landed. It takes
// none while requests are in flight and fewer calls wait than those
// requests carry on average: the batching rule. Calls that arrive while
// requests are in flight wait for one to land (or for as many calls as a
// request in flight carries), so that, under concurrency, each request
// carries about the calls of the one before it, not one call and then the
// rest; with nothing in flight, a call goes at once, alone if it is alone.
func (q *queue) take(dst []*pending, n int) []*pending {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flights > 0 && len(q.calls)*q.flights < q.flying {
		return dst
	}
	first := len(dst)
	i := 0
	for ; i < len(q.calls) && len(dst) < n; i++ {
		if q.calls[i].state.Load() == 0 {
			dst = append(dst, q.calls[i])
		}
	}
	rest := copy(q.calls, q.calls[i:])
	clear(q.calls[rest:])
	q.calls = q.calls[:rest]
	if taken := len(dst) - first; taken > 0 {
		q.flights++
		q.flying += taken
	}
	if rest > 0 {
		q.signal()
	}
	return dst
}

// idle reports whether no request is in flight.
func (q *queue) idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flights == 0
}

// landed counts a request of calls calls (taken together) as answered.
func (q *queue) landed(calls int) {
	q.mu.Lock()
	q.flights--
	q.flying -= calls
	waiting := len(q.calls) > 0
	q.mu.Unlock()
	if waiting {
		q.signal()
	}
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

// sender is one of the Client's Config.MaxInFlight senders: a goroutine
// that takes the waiting calls and sends them as one request. Its buffers
// are reused from one request to the next.
type sender struct {
	c      *Client
	ctx    context.Context // the Client's, traced: a written request sets wrote
	wrote  atomic.Bool     // the transport has written the current request (and is done with body)
	calls  []*pending      // the calls of the current request
	body   []byte          // the current request's JSON
	answer []byte          // the current answer's bytes
	slots  []slot          // the current batch answer, decoded
	raw    *rawConn        // the sender's own connection (raw.go); nil: net/http
}

func (c *Client) newSender() *sender {
	s := &sender{c: c}
	if c.rawHost != "" {
		s.raw = newRawConn(c.rawHost, c.rawPath, c.cfg.Token)
	}
	s.ctx = httptrace.WithClientTrace(c.ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { s.wrote.Store(true) },
	})
	return s
}

// run takes whatever calls are waiting (up to MaxBatch) and sends them as
// one request, until Close.
//
// When no request is in flight, it yields the processor once
// (runtime.Gosched) before it takes them: the callers a sender has just
// answered are runnable then, and each is about to queue its next call;
// letting them run first makes one request of their calls instead of one
// request for the first and another for the rest. No timer is involved:
// with nothing else runnable (an idle client), Gosched returns at once and
// the call goes out alone. While a request is in flight it does not yield:
// the batching rule (queue.take) already holds the calls until as many
// wait as that request carries, and a yield there only delays them (with
// 32 callers and 2 requests in flight, yielding always made requests of
// 21 calls instead of 12, and cost a tenth of the decisions a second:
// docs/bench-log.md, "What bounds the batching client: its callers").
func (s *sender) run() {
	for {
		select {
		case <-s.c.closed:
			if s.raw != nil {
				s.raw.close()
			}
			return
		case <-s.c.queue.kick:
		}
		if s.c.queue.idle() {
			runtime.Gosched()
		}
		s.calls = s.c.queue.take(s.calls[:0], s.c.cfg.MaxBatch)
		switch len(s.calls) {
		case 0:
			continue
		case 1:
			s.sendOne(s.calls[0])
		default:
			s.sendBatch(s.calls)
		}
		s.c.queue.landed(len(s.calls))
		clear(s.calls)
	}
}

// reply is what post got: the status and (in s.answer) the body, or err.
type reply struct {
	status     int
	retryAfter time.Duration // the Retry-After header's, in seconds
	err        error
	written    bool // the request reached the wire before err
}

// sendOne sends p to its single endpoint.
func (s *sender) sendOne(p *pending) {
	s.c.count(1)
	s.body = p.appendJSON(s.body[:0], false)
	rep := s.post(opPaths[p.op])
	s.c.deliver(p, s.decoded(rep))
}

// decoded is the result of a single answer in s.answer.
func (s *sender) decoded(rep reply) result {
	if rep.err != nil {
		return result{err: rep.err, written: rep.written}
	}
	res := result{status: rep.status, written: true}
	res.decodeErr = decodeAnswer(s.answer, &res.answer)
	if rep.status != http.StatusOK {
		res.retryAfter = rep.retryAfter
		if ms := res.answer.RetryAfterMS; res.decodeErr == nil && ms > 0 {
			res.retryAfter = time.Duration(ms) * time.Millisecond
		}
	}
	return res
}

// sendBatch sends calls as one POST /v1/batch and delivers each its slot,
// in order; an answer other than 200 is every call's. A batch over the
// node's body cap (413) is sent again as two halves.
func (s *sender) sendBatch(calls []*pending) {
	s.c.count(len(calls))
	s.body = appendBatch(s.body[:0], calls)
	rep := s.post("/v1/batch")
	if rep.err == nil && rep.status == http.StatusRequestEntityTooLarge && len(calls) > 1 {
		s.sendBatch(calls[:len(calls)/2])
		s.sendBatch(calls[len(calls)/2:])
		return
	}
	if rep.err != nil || rep.status != http.StatusOK {
		res := s.decoded(rep)
		for _, p := range calls {
			s.c.deliver(p, res)
		}
		return
	}
	var err error
	if s.slots, err = decodeBatch(s.answer, s.slots[:0]); err != nil || len(s.slots) != len(calls) {
		res := result{err: fmt.Errorf("tokenring batch: %d results for %d calls (%v)", len(s.slots), len(calls), err), written: true}
		for _, p := range calls {
			s.c.deliver(p, res)
		}
		return
	}
	for i, p := range calls {
		sl := &s.slots[i]
		s.c.deliver(p, result{status: sl.status, answer: sl.answer, decodeErr: sl.err,
			retryAfter: time.Duration(sl.retryAfterMS) * time.Millisecond, written: true})
	}
}

// Header values every request shares (never modified by net/http).
var jsonContentType = []string{"application/json"}

// post sends s.body to path, on the Client's context (ended by Close), and
// reads the answer into s.answer.
func (s *sender) post(path string) reply {
	if s.raw != nil {
		var rep reply
		rep, s.answer = s.raw.post(s.c.ctx, path, s.body, s.answer[:0])
		if rep.err != nil && s.c.ctx.Err() != nil {
			rep.err = ErrClosed
		}
		return rep
	}
	s.wrote.Store(false)
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.c.base+path, bytes.NewReader(s.body))
	if err != nil {
		return reply{err: fmt.Errorf("tokenring %s: %w", path, err)}
	}
	req.Header["Content-Type"] = jsonContentType
	if s.c.authorization != nil {
		req.Header["Authorization"] = s.c.authorization
	}
	rep := s.roundTrip(req)
	if !s.wrote.Load() {
		s.body = nil // the transport may hold it still: the next request gets a fresh one
	}
	if rep.err != nil && s.c.ctx.Err() != nil {
		rep.err = ErrClosed
	}
	return rep
}

// roundTrip sends req and reads the answer into s.answer.
func (s *sender) roundTrip(req *http.Request) reply {
	resp, err := s.c.http.Do(req)
	if err != nil {
		return reply{err: fmt.Errorf("tokenring %s %s: %w", req.Method, req.URL.Path, err), written: s.wrote.Load()}
	}
	defer resp.Body.Close()
	s.answer, err = readAnswer(s.answer[:0], resp.Body)
	if err != nil {
		return reply{err: fmt.Errorf("tokenring %s %s: reading the answer: %w", req.Method, req.URL.Path, err), written: true}
	}
	rep := reply{status: resp.StatusCode, written: true}
	if resp.StatusCode != http.StatusOK {
		rep.retryAfter = retryAfterHeader(resp.Header)
	}
	return rep
}

// readAnswer appends to dst what r holds, up to maxAnswer bytes.
func readAnswer(dst []byte, r io.Reader) ([]byte, error) {
	for len(dst) < maxAnswer {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):min(cap(dst), maxAnswer)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// retryAfterHeader is a Retry-After header in seconds; 0 without one.
func retryAfterHeader(h http.Header) time.Duration {
	if s, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}
