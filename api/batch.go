package api

// POST /v1/batch: many decision-API calls in one HTTP request. Each call is
// answered exactly as its single endpoint would answer it, in its own slot.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// Batch bounds.
const (
	// maxBatchCalls is the most calls one /v1/batch may carry; more is a
	// 400 for the whole batch.
	maxBatchCalls = 1000
	// batchParallel is how many calls of one batch run at the same time.
	batchParallel = 32
)

// batchRequest is the body of POST /v1/batch. Each call is a JSON object
// with "op" ("acquire", "complete" or "renew") and the fields of that op's
// single-endpoint body.
type batchRequest struct {
	Calls []json.RawMessage `json:"calls"`
}

// batchResult is one slot of the answer: the status and body the single
// endpoint would have answered, and its retry-after (a 429's or a 503's).
type batchResult struct {
	Status       int   `json:"status"`
	Body         any   `json:"body"`
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// batchResponse is the 200 answer of POST /v1/batch: one result per call,
// in the calls' order.
type batchResponse struct {
	Results []batchResult `json:"results"`
}

// batchAcquire and batchLease are a call's body: the op beside its single
// endpoint's fields, decoded as strictly as the single endpoint decodes.
type batchAcquire struct {
	Op string `json:"op"`
	acquireRequest
}

type batchLease struct {
	Op string `json:"op"`
	completeRequest
}

// batch answers POST /v1/batch: 400 for a body that is not a batch or
// carries over maxBatchCalls calls, 413 over router.MaxBody, 401 (before the body
// is read) without a known client token; else 200 with every call's answer
// in its slot. Up to batchParallel calls run at once; the answer waits for
// the last (a call's wait_ms included).
func (s *Server) batch(w http.ResponseWriter, req *http.Request) {
	var in batchRequest
	if !decodeBody(w, req, &in) {
		return
	}
	set, deny := s.callerTenants(req)
	if deny != nil && len(in.Calls) <= maxBatchCalls { // an oversized batch is batchAnswer's 400 first
		deny.write(w)
		return
	}
	s.batchAnswer(req.Context(), set, &in, nil).write(w)
}

// batchAnswer runs a decoded batch for a caller allowed set: 400 over
// maxBatchCalls calls, else 200 with every call's answer in its slot. pre,
// if not nil, holds the calls the decoder already read as acquires, one per
// call (decodeBatchFast).
func (s *Server) batchAnswer(ctx context.Context, set tenantSet, in *batchRequest, pre []decodedCall) apiAnswer {
	if len(in.Calls) > maxBatchCalls {
		return errorAnswer(http.StatusBadRequest, fmt.Sprintf("a batch carries at most %d calls, got %d", maxBatchCalls, len(in.Calls)))
	}
	out := batchResponse{Results: make([]batchResult, len(in.Calls))}
	// The answers of the acquires decided here, one slot a call: one
	// allocation a batch rather than one a call.
	answers := make([]acquireResponse, len(in.Calls))
	sem := make(chan struct{}, batchParallel)
	var wg sync.WaitGroup
	for i, raw := range in.Calls {
		var c *batchAcquire
		if pre != nil && pre[i].ok {
			c = &pre[i].acquire
		}
		if a, ok := s.acquireHere(ctx, set, raw, c, &answers[i]); ok {
			out.Results[i] = batchResult{Status: a.status, Body: a.body, RetryAfterMS: a.retryAfterMS}
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a := s.batchCall(ctx, set, raw)
			out.Results[i] = batchResult{Status: a.status, Body: a.body, RetryAfterMS: a.retryAfterMS}
		})
	}
	wg.Wait()
	return apiAnswer{status: http.StatusOK, body: &out}
}

// acquireHere runs raw on the batch's own goroutine if it is an acquire
// decided here without waiting: no wait_ms, every key of its chain (its
// tenant's, its groups', its pool's...) owned by this node. Any other
// call runs on a goroutine of its own, so that a call forwarded to its
// owner, or waiting, holds up no other. (A goroutine per call grows a fresh stack per call: the most
// costly part of a batch of local decisions.) c, if not nil, is raw
// already decoded. A decision's body is res, which a then points at. ok is
// false when raw was not run.
func (s *Server) acquireHere(ctx context.Context, set tenantSet, raw []byte, c *batchAcquire, res *acquireResponse) (a apiAnswer, ok bool) {
	if c == nil {
		c = new(batchAcquire)
		if !decodeFast(raw, c) {
			return apiAnswer{}, false
		}
	}
	if c.Op != "acquire" || c.WaitMS != 0 || !s.r.OwnedAcquire(c.Tenant, c.Model) {
		return apiAnswer{}, false
	}
	var decided bool
	a, *res, decided = s.acquireDecision(ctx, set, &c.acquireRequest)
	if decided {
		a.body = res
	}
	return a, true
}

// batchCall decodes and runs one call of a batch.
func (s *Server) batchCall(ctx context.Context, set tenantSet, raw json.RawMessage) apiAnswer {
	if a, ok := s.batchCallFast(ctx, set, raw); ok {
		return a
	}
	var head struct {
		Op string `json:"op"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return errorAnswer(http.StatusBadRequest, "invalid call: "+err.Error())
	}
	switch head.Op {
	case "acquire":
		var c batchAcquire
		if err := decodeStrict(raw, &c); err != nil {
			return errorAnswer(http.StatusBadRequest, "invalid JSON body: "+err.Error())
		}
		return s.acquireCall(ctx, set, &c.acquireRequest)
	case "complete", "renew":
		var c batchLease
		if err := decodeStrict(raw, &c); err != nil {
			return errorAnswer(http.StatusBadRequest, "invalid JSON body: "+err.Error())
		}
		if head.Op == "complete" {
			return s.completeCall(ctx, set, &c.completeRequest)
		}
		return s.renewCall(ctx, set, &c.completeRequest)
	case "":
		return errorAnswer(http.StatusBadRequest, `op is required: acquire, complete or renew`)
	default:
		return errorAnswer(http.StatusBadRequest, fmt.Sprintf("unknown op %q: want acquire, complete or renew", head.Op))
	}
}

// decodeStrict decodes one JSON value into v, refusing unknown fields.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return decodeOne(dec, v)
}

// batchCallFast runs a call that decodes on the fast path (decodeFast) as
// an acquire, complete or renew; ok is false for any other, which batchCall
// decodes with encoding/json (and answers its errors).
func (s *Server) batchCallFast(ctx context.Context, set tenantSet, raw []byte) (a apiAnswer, ok bool) {
	var acq batchAcquire
	if decodeFast(raw, &acq) && acq.Op == "acquire" {
		return s.acquireCall(ctx, set, &acq.acquireRequest), true
	}
	var l batchLease
	if !decodeFast(raw, &l) {
		return apiAnswer{}, false
	}
	switch l.Op {
	case "complete":
		return s.completeCall(ctx, set, &l.completeRequest), true
	case "renew":
		return s.renewCall(ctx, set, &l.completeRequest), true
	}
	return apiAnswer{}, false
}
