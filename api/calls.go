package api

// The decision API's three calls (acquire, complete, renew) as functions of
// a decoded request: the single endpoints (POST /v1/acquire, /v1/complete,
// /v1/renew) and POST /v1/batch answer through the same code.

import (
	"context"
	"errors"
	"net/http"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// apiAnswer is one decision-API answer before it is written: the HTTP
// status, the JSON body, and the retry-after in milliseconds (0: none) that
// the single endpoints send as a Retry-After header (whole seconds, rounded
// up) and /v1/batch as the slot's "retry_after_ms". wwwAuth marks a 401,
// which carries a WWW-Authenticate header.
type apiAnswer struct {
	status       int
	body         any
	retryAfterMS int64
	wwwAuth      bool
}

// write writes a to w as the single endpoints do.
func (a apiAnswer) write(w http.ResponseWriter) {
	if a.retryAfterMS > 0 {
		setRetryAfter(w, a.retryAfterMS)
	}
	if a.wwwAuth {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tokenring"`)
	}
	writeJSON(w, a.status, a.body)
}

// errorAnswer is the {"error": msg} answer with status code.
func errorAnswer(code int, msg string) apiAnswer {
	return apiAnswer{status: code, body: &errorBody{Error: msg}}
}

// ownerTimeoutAnswer is the decision API's 503 for err if it is an owner
// timeout (*router.OwnerTimeoutError) or a full table (*router.TableFullError),
// its 400 for an unpriced model under a budget (*router.UnpricedError); ok
// is false for any other error.
func ownerTimeoutAnswer(err error) (a apiAnswer, ok bool) {
	var full *router.TableFullError
	if errors.As(err, &full) {
		ms := full.RetryMS()
		return apiAnswer{status: http.StatusServiceUnavailable, body: map[string]any{"error": full.Error(), "retry_after_ms": ms}, retryAfterMS: ms}, true
	}
	var unpriced *router.UnpricedError
	if errors.As(err, &unpriced) {
		return errorAnswer(http.StatusBadRequest, unpriced.Error()), true
	}
	var ot *router.OwnerTimeoutError
	if errors.As(err, &ot) {
		ms := router.OwnerTimeoutRetry.Milliseconds()
		return apiAnswer{status: http.StatusServiceUnavailable, body: map[string]any{"error": ot.Error(), "retry_after_ms": ms}, retryAfterMS: ms}, true
	}
	return apiAnswer{}, false
}

// decideErrorAnswer answers an error of decide: a 503 for an owner timeout
// or a full table, else 499 (the client went away).
func decideErrorAnswer(err error) apiAnswer {
	if a, ok := ownerTimeoutAnswer(err); ok {
		return a
	}
	return errorAnswer(499, "request cancelled: "+err.Error())
}

// forbidden returns the 403 for a tenant outside set, or ok false when set
// allows tenant.
func forbidden(set tenantSet, tenant string) (a apiAnswer, refused bool) {
	if set.allows(tenant) {
		return apiAnswer{}, false
	}
	return errorAnswer(http.StatusForbidden, "this client may not act for tenant "+quote(tenant)), true
}

// leaseErrorAnswer answers a lease that parseLeaseRequest refused: 403 for
// one whose signature does not verify, 400 for any other problem.
func leaseErrorAnswer(err error) apiAnswer {
	code := http.StatusBadRequest
	if errors.Is(err, errLeaseSignature) {
		code = http.StatusForbidden
	}
	return errorAnswer(code, err.Error())
}

// acquireCall runs one decoded acquire for a caller allowed set: 400 for a
// bad request, 403 for a tenant outside set, 413 for a prompt over
// Config.MaxPromptBytes, 200 admitted, 429 refused (with its retry-after),
// 503 or 499 when no decision was made. A prompt or messages are counted
// only once the caller may act for the tenant, the prompt is within the
// cap and the tenant is not known to be out of requests (RefuseExhausted).
func (s *Server) acquireCall(ctx context.Context, set tenantSet, in *acquireRequest) apiAnswer {
	a, res, decided := s.acquireDecision(ctx, set, in)
	if decided {
		a.body = &res
	}
	return a
}

// acquireDecision is acquireCall with a decision's body (a 200 or a 429,
// decided true) returned apart, by value: ServePlain writes it from its
// own stack, with no answer on the heap. Undecided, a is the whole answer.
func (s *Server) acquireDecision(ctx context.Context, set tenantSet, in *acquireRequest) (a apiAnswer, res acquireResponse, decided bool) {
	adm, err := s.parseAcquire(in)
	if err != nil {
		return errorAnswer(http.StatusBadRequest, err.Error()), res, false
	}
	if a, refused := forbidden(set, adm.Tenant); refused {
		return a, res, false // before the prompt is counted: nothing computed for a caller not allowed
	}
	if (adm.Limits != nil || len(adm.Parents) > 0) && !set.setLimits {
		return errorAnswer(http.StatusForbidden, "this client may not send limits: give its clients: entry may_set_limits: true"), res, false
	}
	if in.Prompt != nil || in.Messages != nil {
		if n := promptBytes(in); n > s.cfg.MaxPromptBytes {
			return errorAnswer(http.StatusRequestEntityTooLarge, s.promptCapMessage(n)), res, false
		}
		if v, refused := s.r.RefuseExhausted(ctx, adm); refused {
			res = answerOf(&v, "")
			return apiAnswer{status: http.StatusTooManyRequests, retryAfterMS: res.RetryAfterMS}, res, true
		}
		adm.Req.PromptTokens = s.countAcquirePrompt(in)
	}
	v, err := s.r.Admit(ctx, adm)
	if err != nil {
		return decideErrorAnswer(err), res, false // an owner alive but slow: nothing admitted
	}
	var lease string
	if v.Allowed {
		lease = s.leases.sign(v.Lease)
	}
	res = answerOf(&v, lease)
	if !res.Allowed {
		return apiAnswer{status: http.StatusTooManyRequests, retryAfterMS: res.RetryAfterMS}, res, true
	}
	return apiAnswer{status: http.StatusOK}, res, true
}

// completeCall settles (with usage) or releases (without) one lease.
func (s *Server) completeCall(ctx context.Context, set tenantSet, in *completeRequest) apiAnswer {
	if a, refused := forbidden(set, in.Tenant); refused {
		return a
	}
	l, err := s.parseLeaseRequest(in)
	if err != nil {
		return leaseErrorAnswer(err)
	}
	op := node.OpRelease
	var usage limiter.Usage
	if in.Usage != nil {
		u := in.Usage
		for _, f := range []struct {
			name string
			v    int64
		}{{"usage.prompt_tokens", u.PromptTokens}, {"usage.completion_tokens", u.CompletionTokens}, {"usage.total_tokens", u.TotalTokens},
			{"usage.cached_tokens", u.CachedTokens}, {"usage.cache_write_tokens", u.CacheWriteTokens}} {
			if err := router.CheckCount(f.name, f.v); err != nil {
				return errorAnswer(http.StatusBadRequest, err.Error())
			}
		}
		if u.CachedTokens+u.CacheWriteTokens > u.PromptTokens {
			return errorAnswer(http.StatusBadRequest, "usage.cached_tokens + usage.cache_write_tokens must not exceed usage.prompt_tokens: they are parts of it")
		}
		op, usage = node.OpSettle, limiter.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
			CachedTokens: u.CachedTokens, CacheWriteTokens: u.CacheWriteTokens}
	}
	ok, status, _ := s.r.LeaseCall(ctx, l, op, usage)
	return apiAnswer{status: http.StatusOK, body: &settleAnswer{Settled: ok, Limits: limitsOf(status)}}
}

// renewCall extends one lease's expiry: 404 when it is no longer held.
func (s *Server) renewCall(ctx context.Context, set tenantSet, in *completeRequest) apiAnswer {
	if in.Usage != nil {
		return errorAnswer(http.StatusBadRequest, "renew takes no usage")
	}
	if a, refused := forbidden(set, in.Tenant); refused {
		return a
	}
	l, err := s.parseLeaseRequest(in)
	if err != nil {
		return leaseErrorAnswer(err)
	}
	ok, status, expires := s.r.LeaseCall(ctx, l, node.OpRenew, limiter.Usage{})
	if !ok {
		return errorAnswer(http.StatusNotFound, "lease not found: completed, expired or unknown")
	}
	out := map[string]any{"renewed": true, "limits": limitsOf(status)}
	if !expires.IsZero() {
		out["expires_in_ms"] = ceilMS(expires.Sub(s.cfg.Now()))
	}
	return apiAnswer{status: http.StatusOK, body: out}
}

// endpoint serves one decision call on its own endpoint: decode the body
// into a fresh In, check the caller's token, run call, write its answer.
func endpoint[In any](s *Server, call func(context.Context, tenantSet, *In) apiAnswer) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var in In
		if !decodeBody(w, req, &in) {
			return
		}
		set, deny := s.callerTenants(req)
		if deny != nil {
			deny.write(w)
			return
		}
		call(req.Context(), set, &in).write(w)
	}
}

// writeOwnerTimeout writes the decision API's 503 for err if it is an owner
// timeout or a full table (*TableFullError), and reports whether it did.
func writeOwnerTimeout(w http.ResponseWriter, err error) bool {
	a, ok := ownerTimeoutAnswer(err)
	if ok {
		a.write(w)
	}
	return ok
}
