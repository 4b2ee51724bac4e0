package router

// The LLM proxy (README.md, "LLM proxy"): OpenAI's POST /v1/chat/completions
// and Anthropic's POST /v1/messages, admitted through the same path as the
// decision API (Router.admit), forwarded to the upstream, and settled with
// the usage the upstream reported.
//
// How each way a request can end settles its lease. The lease is finished
// exactly once, and always before the client can see the end of the answer:
// before the terminal event of a stream ([DONE], message_stop) is written,
// and before a non-streaming body is written. So a client that sends its
// next request as soon as it has read an answer finds its slot free and its
// tokens settled.
//
//	upstream answered 2xx with usage      settle with the reported usage
//	2xx without usage (a server that      settle: counted prompt + the completion
//	  ignores include_usage)                counted from the content seen
//	stream cut by the upstream or         settle from what was seen: the prompt as
//	  abandoned by the client               reported (Anthropic message_start) or
//	                                        counted, the completion counted from the
//	                                        content deltas streamed so far
//	upstream answered non-2xx             settle: counted prompt, completion 0. The
//	                                        request stays counted: providers count
//	                                        failed requests against their limits too,
//	                                        and a tenant must not flood the upstream
//	                                        with bad requests for free
//	upstream not reachable (dial error)   cancel: it never got there
//	  or client gone before forwarding
//	no answer, outcome unknown (client    release: the reservation stays charged as
//	  gone or transport error while the     reserved, the best guess of what the
//	  upstream worked; a non-streaming      upstream spent
//	  body cut or too big to parse)
//
// Each provider (openai.go, anthropic.go) is a value the shared path calls
// (provider.go); the upstream call is in forward.go, the stream relay in
// sse.go, the lease renewal in renew.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// Upstream is an LLM provider the proxy forwards to.
type Upstream struct {
	// BaseURL is an http(s) URL without a trailing slash, e.g.
	// "https://api.openai.com/v1"; the proxy appends "/chat/completions" or
	// "/messages" and the client's query string. Empty: the endpoint answers
	// 502 and reserves nothing.
	BaseURL string
	// APIKey, when not empty, replaces the client's key on forwarded
	// requests (OpenAI: Authorization: Bearer; Anthropic: x-api-key). Empty:
	// the client's credentials are forwarded as they came.
	APIKey string
	// Timeouts bound the waits on this upstream.
	Timeouts UpstreamTimeouts
}

// ProxyConfig configures the LLM proxy. The zero value serves the endpoints
// and answers 401 to every request.
type ProxyConfig struct {
	// Tenant maps a client's API key (Authorization: Bearer <key>, or
	// x-api-key: <key>) to its tenant; false means unknown (401). Nil knows
	// no key. It is called concurrently.
	Tenant func(apiKey string) (tenant string, ok bool)
	// OpenAI is where POST /v1/chat/completions goes.
	OpenAI Upstream
	// Anthropic is where POST /v1/messages goes.
	Anthropic Upstream
	// Account gives the OpenAI organisation and project the proxy sets
	// upstream for a client's API key (the client's own headers for them
	// are never forwarded). Nil sets none.
	Account func(apiKey string) Account
	// Client sends the forwarded requests to both upstreams. It must not
	// have a Timeout that would cut long streams; the upstreams' dial and
	// TLS timeouts are then its own business (their header and idle
	// timeouts still apply). Nil gives each upstream a client of its own,
	// NewUpstreamClient(its Timeouts).
	Client *http.Client
}

// proxyRoutes serves each provider at its endpoint.
func (r *Router) proxyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, req *http.Request) { r.proxy(w, req, openAI{}) })
	mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, req *http.Request) { r.proxy(w, req, anthropic{}) })
}

// proxy serves one provider's endpoint: authenticate, parse and count, admit
// (or refuse in the provider's shape), then forward and settle (forward.go).
func (r *Router) proxy(w http.ResponseWriter, req *http.Request, p provider) {
	r.proxyParsed(w, req, p, nil)
}

// proxyParsed is proxy for a request whose body parsed is (nil: the body
// is still to be read and parsed).
func (r *Router) proxyParsed(w http.ResponseWriter, req *http.Request, p provider, parsed *proxyCall) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		p.fail(w, apiError{http.StatusMethodNotAllowed, errInvalid, "method " + req.Method + " not allowed, use POST"})
		return
	}
	tenant, apiKey, ok := r.proxyTenant(req.Header)
	if !ok {
		p.fail(w, apiError{http.StatusUnauthorized, errAuth,
			"invalid or missing API key: send Authorization: Bearer <key> or x-api-key: <key>"})
		return
	}
	up, path := p.upstream(r.cfg.Proxy)
	if up.BaseURL == "" {
		p.fail(w, apiError{http.StatusBadGateway, errServer, "no upstream is configured for " + p.name()})
		return
	}
	var c proxyCall
	if parsed != nil {
		c = *parsed
	} else if !readProxyCall(w, req, p, &c) {
		return
	}
	c.tenant = tenant
	if r.cfg.Proxy.Account != nil {
		c.account = r.cfg.Proxy.Account(apiKey)
	}
	var err error
	adm := admission{tenant: tenant, model: c.model, req: limiter.Request{MaxTokens: c.maxTokens}}
	if adm.req.Priority, adm.req.Wait, err = proxyQueue(req.Header); err != nil {
		p.fail(w, badRequest("%v", err))
		return
	}
	tl := r.cfg.Limits(TenantKey(tenant))
	if res, refused := r.refuseExhausted(req.Context(), adm); refused { // before counting: see refuseExhausted
		setRateLimitHeaders(w.Header(), statusOf(res.Limits), tl.Window)
		r.refuse(w, &c, res)
		return
	}
	r.countProxyPrompt(&c)
	adm.req.PromptTokens = c.promptTokens
	res, err := r.admit(req.Context(), adm)
	if full := (*tableFullError)(nil); errors.As(err, &full) { // the owner holds max_keys keys: nothing admitted
		setRetryHeaders(w.Header(), full.retryMS())
		p.fail(w, apiError{http.StatusServiceUnavailable, errOverloaded, full.Error()})
		return
	}
	var slow *ownerTimeoutError
	if errors.As(err, &slow) { // the owner is alive but slow: nothing admitted, nothing forwarded
		setRetryHeaders(w.Header(), ownerTimeoutRetry.Milliseconds())
		p.fail(w, apiError{http.StatusServiceUnavailable, errOverloaded, slow.Error()})
		return
	}
	if err != nil {
		p.fail(w, apiError{499, errInvalid, "request cancelled: " + err.Error()})
		return
	}
	setRateLimitHeaders(w.Header(), statusOf(res.Limits), tl.Window)
	if !res.Allowed {
		r.refuse(w, &c, res)
		return
	}
	l := res.lease
	x := &exchange{r: r, c: &c, l: l, ctx: context.WithoutCancel(req.Context())}
	x.seen.countText = textCounter(r.cfg.Counter, c.model)
	x.stopRenew = r.renewEvery(l, r.renewInterval(tl, l))
	defer x.finish(node.OpRelease, limiter.Usage{}) // a safety net: a no-op once finished
	x.forward(w, req, up, path)
}

// readProxyCall reads and parses req's body into c, or answers the 413
// or 400 and returns false.
func readProxyCall(w http.ResponseWriter, req *http.Request, p provider, c *proxyCall) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			p.fail(w, apiError{http.StatusRequestEntityTooLarge, errTooLarge, fmt.Sprintf("body over %d bytes", tooBig.Limit)})
			return false
		}
		p.fail(w, badRequest("reading the body: %v", err))
		return false
	}
	*c = proxyCall{p: p}
	if err := p.parse(c, body); err != nil {
		p.fail(w, badRequest("%v", err))
		return false
	}
	return true
}

// statusOf turns a "limits" object back into a limiter.Status.
func statusOf(l limitsJSON) limiter.Status {
	d := func(j dimJSON) limiter.DimStatus {
		return limiter.DimStatus{Limit: j.Limit, Remaining: j.Remaining, Reset: time.Duration(j.ResetMS) * time.Millisecond}
	}
	return limiter.Status{Requests: d(l.Requests), Tokens: d(l.Tokens), Concurrency: d(l.Concurrency)}
}

// refuse writes a 429 in the provider's shape.
func (r *Router) refuse(w http.ResponseWriter, c *proxyCall, res acquireResponse) {
	setRetryHeaders(w.Header(), res.RetryAfterMS)
	w.Header().Set(hdrReason, res.Reason)
	w.Header().Set(hdrRefusedBy, res.RefusedBy)
	who := "tenant " + c.tenant
	switch by := res.refused; {
	case res.Pool != nil:
		who = "model " + c.model + " (upstream pool " + res.Pool.Name + ", shared by all tenants)"
	case by.kind == KeyGroup && by.entry != "":
		who = "model " + c.model + " in group " + by.name + " (models entry " + by.entry + ", shared by the group's tenants)"
	case by.kind == KeyGroup:
		who = "group " + by.name + " (shared by its tenants, tenant " + c.tenant + " among them)"
	case by.entry != "":
		who = "model " + c.model + " for tenant " + c.tenant + " (models entry " + by.entry + ")"
	}
	msg := fmt.Sprintf("Rate limit reached for %s on %s. Please try again in %s.",
		who, res.Reason, openAIDuration(time.Duration(res.RetryAfterMS)*time.Millisecond))
	kind := errRateRequests // concurrency and queue_full count as requests
	if res.Reason == limiter.Tokens.String() {
		kind = errRateTokens
	}
	c.p.fail(w, apiError{http.StatusTooManyRequests, kind, msg})
}

// proxyTenant finds the tenant of the request's API key (the bearer token,
// else x-api-key) and returns it with the key.
func (r *Router) proxyTenant(h http.Header) (tenant, apiKey string, ok bool) {
	if r.cfg.Proxy.Tenant == nil {
		return "", "", false
	}
	var keys []string
	if a := h.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		keys = append(keys, strings.TrimSpace(a[7:]))
	}
	if k := h.Get("x-api-key"); k != "" {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if t, ok := r.cfg.Proxy.Tenant(k); ok && CheckName("tenant", t, true) == nil {
			return t, k, true
		}
	}
	return "", "", false
}

// proxyQueue reads the optional x-tokenring-priority and x-tokenring-wait-ms
// request headers.
func proxyQueue(h http.Header) (limiter.Priority, time.Duration, error) {
	var prio limiter.Priority
	switch v := h.Get(hdrPriority); v {
	case "", "interactive":
		prio = limiter.Interactive
	case "batch":
		prio = limiter.Batch
	default:
		return 0, 0, fmt.Errorf("%s must be interactive or batch, got %q", hdrPriority, v)
	}
	var wait time.Duration
	if v := h.Get(hdrWaitMS); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 || ms > maxWait.Milliseconds() {
			return 0, 0, fmt.Errorf("%s must be an integer between 0 and %d, got %q", hdrWaitMS, maxWait.Milliseconds(), v)
		}
		wait = time.Duration(ms) * time.Millisecond
	}
	return prio, wait, nil
}

// exchange is one admitted request on its way through the upstream. It is
// used by the request's handler goroutine only.
type exchange struct {
	r         *Router
	c         *proxyCall
	l         lease
	ctx       context.Context // for settling: not cancelled when the client goes
	stopRenew func()
	finished  bool
	seen      usageSeen
}

// finish ends the lease with op, once; later calls do nothing.
func (x *exchange) finish(op node.Op, u limiter.Usage) {
	if x.finished {
		return
	}
	x.finished = true
	x.stopRenew()
	ok, _, _ := x.r.leaseCall(x.ctx, x.l, op, u)
	if x.r.log.Enabled(x.ctx, slog.LevelDebug) { // the arguments cost allocations even when not logged
		x.r.log.Debug("proxy: finished", "tenant", x.l.Tenant, "op", op.String(), "prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens, "found", ok)
	}
}

// settleSeen settles from what the answer showed (see usageSeen.usage).
func (x *exchange) settleSeen() {
	if !x.finished {
		x.finish(node.OpSettle, x.seen.usage(x.c.promptTokens))
	}
}
