package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// acquireWire is the JSON of an acquire: the body of /v1/acquire, or with
// Op a call of /v1/batch.
type acquireWire struct {
	Op           string  `json:"op,omitempty"`
	Tenant       string  `json:"tenant"`
	Model        string  `json:"model,omitempty"`
	PromptTokens *int64  `json:"prompt_tokens,omitempty"`
	Prompt       *string `json:"prompt,omitempty"`
	MaxTokens    int64   `json:"max_tokens,omitempty"`
	Priority     string  `json:"priority,omitempty"`
	WaitMS       int64   `json:"wait_ms,omitempty"`
}

// leaseWire is the JSON of a complete or a renew.
type leaseWire struct {
	Op     string `json:"op,omitempty"`
	Tenant string `json:"tenant"`
	Lease  string `json:"lease"`
	Usage  *Usage `json:"usage,omitempty"`
}

type dimWire struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	ResetMS   int64 `json:"reset_ms"`
	Overdraft int64 `json:"overdraft"`
}

type limitsWire struct {
	Requests    dimWire `json:"requests"`
	Tokens      dimWire `json:"tokens"`
	Concurrency dimWire `json:"concurrency"`
}

func (d dimWire) dim() Dim {
	return Dim{Limit: d.Limit, Remaining: d.Remaining, Overdraft: d.Overdraft, Reset: time.Duration(d.ResetMS) * time.Millisecond}
}

func (l limitsWire) limits() Limits {
	return Limits{Requests: l.Requests.dim(), Tokens: l.Tokens.dim(), Concurrency: l.Concurrency.dim()}
}

// answerWire is every field the decision API's answers carry.
type answerWire struct {
	Allowed        bool       `json:"allowed"`
	Lease          string     `json:"lease"`
	ReservedTokens int64      `json:"reserved_tokens"`
	Reason         string     `json:"reason"`
	RetryAfterMS   int64      `json:"retry_after_ms"`
	Limits         limitsWire `json:"limits"`
	Pool           *struct {
		Name string `json:"name"`
	} `json:"pool"`
	Fallback bool   `json:"fallback"`
	Owner    string `json:"owner"`
	Settled  bool   `json:"settled"`
	Renewed  bool   `json:"renewed"`
	Error    string `json:"error"`
}

// Acquire asks for an admission. A refusal is a Decision with Allowed false
// and a nil error (unless Config.RetryRefused, when Acquire asks again after
// each refusal's RetryAfter until admitted or ctx ends, and then returns the
// last refusal with ctx's error). The error is an *APIError for an answer
// that is not a decision.
func (c *Client) Acquire(ctx context.Context, req AcquireRequest) (Decision, error) {
	p := c.get()
	defer func() { c.put(p) }()
	p.op = opAcquire
	p.acq = acquireWire{Tenant: req.Tenant, Model: req.Model, MaxTokens: req.MaxTokens, WaitMS: req.Wait.Milliseconds()}
	if req.Prompt != "" {
		p.prompt = req.Prompt
		p.acq.Prompt = &p.prompt
	} else {
		p.promptTokens = req.PromptTokens
		p.acq.PromptTokens = &p.promptTokens
	}
	if req.Batch {
		p.acq.Priority = "batch"
	}
	for {
		res, done := c.call(ctx, p)
		if !done {
			p = nil // abandoned: a sender may hold it still
		}
		a := &res.answer
		switch {
		case res.err != nil:
			return Decision{}, res.err
		case res.decodeErr != nil:
			return Decision{}, fmt.Errorf("tokenring acquire: decoding a %d answer: %w", res.status, res.decodeErr)
		case res.status != http.StatusOK && res.status != http.StatusTooManyRequests:
			return Decision{}, &APIError{Status: res.status, Message: a.Error, RetryAfter: res.retryAfter}
		}
		d := Decision{Allowed: a.Allowed, Lease: a.Lease, ReservedTokens: a.ReservedTokens, Reason: a.Reason,
			RetryAfter: time.Duration(a.RetryAfterMS) * time.Millisecond, Limits: a.Limits.limits(), Fallback: a.Fallback, Owner: a.Owner}
		if a.Pool != nil {
			d.Pool = a.Pool.Name
		}
		if d.Allowed || !c.cfg.RetryRefused {
			return d, nil
		}
		if err := c.sleep(ctx, d.RetryAfter); err != nil {
			return d, err
		}
	}
}

// Complete reports that an admitted request ended: with usage, the node
// settles the reservation against what was used (crediting back what was
// not); with nil usage it releases it. ErrLeaseNotFound: the node no longer
// held the lease.
func (c *Client) Complete(ctx context.Context, tenant, lease string, usage *Usage) error {
	return c.leaseOp(ctx, opComplete, leaseWire{Tenant: tenant, Lease: lease, Usage: usage})
}

// Renew extends a lease's life while its request runs (a lease not renewed
// expires after its TTL). ErrLeaseNotFound: the node no longer holds it.
func (c *Client) Renew(ctx context.Context, tenant, lease string) error {
	return c.leaseOp(ctx, opRenew, leaseWire{Tenant: tenant, Lease: lease})
}

func (c *Client) leaseOp(ctx context.Context, op op, w leaseWire) error {
	p := c.get()
	p.op, p.lease = op, w
	res, done := c.call(ctx, p)
	if done {
		c.put(p)
	}
	name := opNames[op]
	switch {
	case res.err != nil:
		return res.err
	case res.decodeErr != nil:
		return fmt.Errorf("tokenring %s: decoding a %d answer: %w", name, res.status, res.decodeErr)
	case res.status == http.StatusNotFound, res.status == http.StatusOK && op == opComplete && !res.answer.Settled:
		return ErrLeaseNotFound
	case res.status != http.StatusOK:
		return &APIError{Status: res.status, Message: res.answer.Error, RetryAfter: res.retryAfter}
	}
	return nil
}

// get returns a pending from the pool, zero but for its done channel.
func (c *Client) get() *pending { return c.pendings.Get().(*pending) }

// put returns p to the pool once its caller has its answer (nil: p was
// abandoned, and is not reused).
func (c *Client) put(p *pending) {
	if p == nil {
		return
	}
	done := p.done
	*p = pending{done: done} // the state too: a fresh use starts at 0
	c.pendings.Put(p)
}

// call sends p (batched with others, perhaps) and waits for its answer,
// sending it again after a 503 with a retry-after or a transport error
// before the request was written, up to Config.Retries times. done is
// false when p was abandoned (ctx ended first): a sender may still hold
// it, so it must not be reused.
func (c *Client) call(ctx context.Context, p *pending) (res result, done bool) {
	backoff := c.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		if res, done = c.once(ctx, p); !done {
			return res, false
		}
		var wait time.Duration
		switch {
		case res.err != nil && !res.written && !errors.Is(res.err, ErrClosed) && ctx.Err() == nil:
			wait, backoff = backoff, min(2*backoff, 5*time.Second)
		case res.err == nil && res.status == http.StatusServiceUnavailable && res.retryAfter > 0:
			wait = res.retryAfter
		default:
			return res, true
		}
		if attempt >= c.cfg.Retries {
			return res, true
		}
		if err := c.sleep(ctx, wait); err != nil {
			return result{err: err}, true
		}
	}
}

// once queues p and waits for its answer or ctx's end. done is false when
// p was abandoned: the call may still run, and an admission it wins is
// then released (Client.deliver).
func (c *Client) once(ctx context.Context, p *pending) (res result, done bool) {
	if err := ctx.Err(); err != nil {
		return result{err: err}, true
	}
	p.state.Store(0)
	if !c.queue.push(p) {
		return result{err: ErrClosed}, true
	}
	ctxDone := ctx.Done()
	if ctxDone == nil {
		return <-p.done, true
	}
	select {
	case res := <-p.done:
		return res, true
	case <-ctxDone:
		if p.abandon() {
			return result{err: ctx.Err()}, false
		}
		return <-p.done, true // delivered meanwhile
	}
}

// releaseAbandoned releases the lease of an admission whose caller had
// gone, so that its slot is not held until the lease's TTL. Nobody waits
// for its answer (its done channel has room for it).
func (c *Client) releaseAbandoned(tenant, lease string) {
	c.queue.push(&pending{op: opComplete, lease: leaseWire{Tenant: tenant, Lease: lease}, done: make(chan result, 1)})
}

// sleep waits d, or until ctx ends or the Client closes.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return ErrClosed
	}
}

// Status returns a tenant's limits and what is left of them (GET
// /v1/tenants/{tenant}); it is not batched.
func (c *Client) Status(ctx context.Context, tenant string) (Limits, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/tenants/"+url.PathEscape(tenant), nil)
	if err != nil {
		return Limits{}, fmt.Errorf("tokenring status %s: %w", tenant, err)
	}
	if c.authorization != nil {
		req.Header["Authorization"] = c.authorization
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Limits{}, fmt.Errorf("tokenring status %s: %w", tenant, err)
	}
	defer resp.Body.Close()
	body, err := readAnswer(nil, resp.Body)
	if err != nil {
		return Limits{}, fmt.Errorf("tokenring status %s: reading the answer: %w", tenant, err)
	}
	var a answerWire
	if err := decodeAnswer(body, &a); err != nil {
		return Limits{}, fmt.Errorf("tokenring status %s: decoding a %d answer: %w", tenant, resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		retry := retryAfterHeader(resp.Header)
		if a.RetryAfterMS > 0 {
			retry = time.Duration(a.RetryAfterMS) * time.Millisecond
		}
		return Limits{}, &APIError{Status: resp.StatusCode, Message: a.Error, RetryAfter: retry}
	}
	return a.Limits.limits(), nil
}
