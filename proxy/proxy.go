package proxy

// The LLM proxy (docs/proxy.md): OpenAI's POST /v1/chat/completions,
// /v1/responses and /v1/embeddings, and Anthropic's POST /v1/messages,
// admitted through the same path as the decision API (router.Router.Admit),
// forwarded to the upstream, and settled with the usage the upstream
// reported.
//
// How each way a request can end settles its lease. The lease is finished
// exactly once, and always before the client can see the end of the answer:
// before the terminal event of a stream ([DONE], message_stop,
// response.completed) is written,
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
// Each provider (openai.go, responses.go, embeddings.go, anthropic.go) is a
// value the shared path calls
// (provider.go); the upstream call is in forward.go, the stream relay in
// sse.go, the lease renewal in renew.go, the fast path in plainproxy.go.

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

	"github.com/tokenring/tokenring/internal/alarm"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
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

// Config configures the LLM proxy. The zero value serves the endpoints
// and answers 401 to every request.
type Config struct {
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
	// Now is the clock of the rate-limit headers that are times
	// (Anthropic's resets). Nil: time.Now.
	Now func() time.Time
}

// Server is the LLM proxy of one node, admitting through its router.
// Safe for concurrent use.
type Server struct {
	r              *router.Router
	cfg            Config
	counter        router.Counter // nil: prompts are estimated
	maxPromptBytes int
	log            *slog.Logger
	// upstreams are the proxy's clients, one per upstream, when
	// Config.Client is nil.
	upstreams map[Upstream]*http.Client
	// alarms bound the proxy's waits on upstreams (ResponseHeader,
	// StreamIdle) and time its leases' renewals, without a runtime timer
	// a call; on the wall clock, as the connections' deadlines are.
	alarms *alarm.Clock
	// upstream counts the calls to the upstreams (upstreamstats.go).
	upstream upstreamRecorder
}

// New returns the LLM proxy admitting through r. Prompts are counted with
// counter (nil: estimated at a token per three bytes) up to maxPromptBytes
// bytes (0: router.DefaultMaxPromptBytes), beyond which they are
// estimated too; log receives the logs (nil discards them).
func New(r *router.Router, cfg Config, counter router.Counter, maxPromptBytes int, log *slog.Logger) *Server {
	if maxPromptBytes <= 0 {
		maxPromptBytes = router.DefaultMaxPromptBytes
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{r: r, cfg: cfg, counter: counter, maxPromptBytes: maxPromptBytes, log: log,
		upstreams: map[Upstream]*http.Client{}, alarms: alarm.New(alarm.Config{})}
	if cfg.Client == nil {
		for _, u := range []Upstream{cfg.OpenAI, cfg.Anthropic} {
			s.upstreams[u] = NewUpstreamClient(u.Timeouts)
		}
	}
	s.traceUpstreams(r.Tracer()) // trace.go
	return s
}

// Close stops the proxy's timeouts and lease renewals (an upstream call
// still waiting then is no longer cut nor its lease renewed), and closes
// its idle upstream connections. It does not stop serving HTTP, and is
// safe to call more than once.
func (s *Server) Close() {
	s.alarms.Close()
	for _, c := range s.upstreams {
		c.CloseIdleConnections()
	}
}

// upstreamClient is the client that sends requests to u.
func (s *Server) upstreamClient(u Upstream) *http.Client {
	if c := s.cfg.Client; c != nil {
		return c
	}
	return s.upstreams[u]
}

// Routes serves each provider at its endpoint on mux, and the endpoints
// passed through uncharged (passthrough.go).
func (s *Server) Routes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, req *http.Request) { s.proxy(w, req, openAI{}) })
	mux.HandleFunc("/v1/responses", func(w http.ResponseWriter, req *http.Request) { s.proxy(w, req, openAIResponses{}) })
	mux.HandleFunc("/v1/embeddings", func(w http.ResponseWriter, req *http.Request) { s.proxy(w, req, openAIEmbeddings{}) })
	mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, req *http.Request) { s.proxy(w, req, anthropic{}) })
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, req *http.Request) { s.models(w, req, false) })
	mux.HandleFunc("/v1/models/{id...}", func(w http.ResponseWriter, req *http.Request) { s.models(w, req, true) })
	mux.HandleFunc("/v1/messages/count_tokens", s.countTokens)
}

// now is the time of Config.Now.
func (s *Server) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Now()
}

// setLimitHeaders writes the rate-limit headers of a level whose status
// is st, counted over window, in every shape p's clients read.
func (s *Server) setLimitHeaders(h http.Header, p provider, st limiter.Status, window time.Duration) {
	setRateLimitHeaders(h, st, window)
	if o, ok := p.(ownLimitHeaders); ok {
		o.limitHeaders(h, st, s.now())
	}
}

// boundLevel is the level whose status the rate-limit headers of an
// answer with verdict v show, and its window: the refusing level's (the
// tenant, a group, a models entry or the pool) when one refused, the
// tenant's (limits tl) otherwise.
func (s *Server) boundLevel(v *router.Verdict, tl limiter.Limits) (limiter.Status, time.Duration) {
	if !v.Allowed && v.RefusedBy.Key != "" {
		return v.RefusedStatus, s.r.Limits(v.RefusedBy.Key).Window
	}
	return v.Status, tl.Window
}

// proxy serves one provider's endpoint: authenticate, parse and count, admit
// (or refuse in the provider's shape), then forward and settle (forward.go).
func (s *Server) proxy(w http.ResponseWriter, req *http.Request, p provider) {
	s.proxyParsed(w, req, p, nil)
}

// proxyParsed is proxy for a request whose body parsed is (nil: the body
// is still to be read and parsed).
func (s *Server) proxyParsed(w http.ResponseWriter, req *http.Request, p provider, parsed *proxyCall) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		p.fail(w, apiError{http.StatusMethodNotAllowed, errInvalid, "method " + req.Method + " not allowed, use POST"})
		return
	}
	tenant, apiKey, ok := s.proxyTenant(req.Header)
	if !ok {
		p.fail(w, apiError{http.StatusUnauthorized, errAuth,
			"invalid or missing API key: send Authorization: Bearer <key> or x-api-key: <key>"})
		return
	}
	up, path := p.upstream(s.cfg)
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
	if s.cfg.Account != nil {
		c.account = s.cfg.Account(apiKey)
	}
	var err error
	adm := router.Admission{Tenant: tenant, Model: c.model, Req: limiter.Request{MaxTokens: c.maxTokens}}
	if adm.Req.Priority, adm.Req.Wait, err = proxyQueue(req.Header); err != nil {
		p.fail(w, badRequest("%v", err))
		return
	}
	tl := s.r.Limits(router.TenantKey(tenant))
	if v, refused := s.r.RefuseExhausted(req.Context(), adm); refused { // before counting: see RefuseExhausted
		s.setLimitHeaders(w.Header(), p, v.Status, tl.Window)
		s.refuse(w, &c, &v)
		return
	}
	s.countProxyPrompt(&c)
	adm.Req.PromptTokens = c.promptTokens
	if c.noCompletion { // the prompt alone, exactly (a MaxTokens of 0 would reserve the default)
		adm.Req.Reserve = max(c.promptTokens, 1)
	}
	v, err := s.r.Admit(req.Context(), adm)
	if full := (*router.TableFullError)(nil); errors.As(err, &full) { // the owner holds max_keys keys: nothing admitted
		setRetryHeaders(w.Header(), full.RetryMS())
		p.fail(w, apiError{http.StatusServiceUnavailable, errOverloaded, full.Error()})
		return
	}
	if unpriced := (*router.UnpricedError)(nil); errors.As(err, &unpriced) { // a budget cannot count an unpriced model
		p.fail(w, apiError{http.StatusBadRequest, errInvalid, unpriced.Error()})
		return
	}
	var slow *router.OwnerTimeoutError
	if errors.As(err, &slow) { // the owner is alive but slow: nothing admitted, nothing forwarded
		setRetryHeaders(w.Header(), router.OwnerTimeoutRetry.Milliseconds())
		p.fail(w, apiError{http.StatusServiceUnavailable, errOverloaded, slow.Error()})
		return
	}
	if err != nil {
		p.fail(w, apiError{499, errInvalid, "request cancelled: " + err.Error()})
		return
	}
	st, window := s.boundLevel(&v, tl)
	s.setLimitHeaders(w.Header(), p, st, window)
	if !v.Allowed {
		s.refuse(w, &c, &v)
		return
	}
	l := v.Lease
	x := &exchange{s: s, c: &c, l: l, ctx: context.WithoutCancel(req.Context())}
	x.seen.countText = textCounter(s.counter, c.model)
	x.stopRenew = s.renewEvery(l, s.r.RenewInterval(tl, l))
	defer x.finish(node.OpRelease, limiter.Usage{}) // a safety net: a no-op once finished
	x.forward(w, req, up, path)
}

// readProxyCall reads and parses req's body into c, or answers the 413
// or 400 and returns false.
func readProxyCall(w http.ResponseWriter, req *http.Request, p provider, c *proxyCall) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, router.MaxBody))
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

// refuse writes a 429 in the provider's shape for the refusal v.
func (s *Server) refuse(w http.ResponseWriter, c *proxyCall, v *router.Verdict) {
	retryMS := max(1, ceilMS(v.RetryAfter))
	setRetryHeaders(w.Header(), retryMS)
	w.Header().Set(hdrReason, v.Reason)
	w.Header().Set(hdrRefusedBy, v.RefusedBy.Label())
	who := "tenant " + c.tenant
	switch by := v.RefusedBy; {
	case v.Pool != "":
		who = "model " + c.model + " (upstream pool " + v.Pool + ", shared by all tenants)"
	case by.Kind == router.KeyGroup && by.Entry != "":
		who = "model " + c.model + " in group " + by.Name + " (models entry " + by.Entry + ", shared by the group's tenants)"
	case by.Kind == router.KeyGroup:
		who = "group " + by.Name + " (shared by its tenants, tenant " + c.tenant + " among them)"
	case by.Entry != "":
		who = "model " + c.model + " for tenant " + c.tenant + " (models entry " + by.Entry + ")"
	}
	msg := fmt.Sprintf("Rate limit reached for %s on %s. Please try again in %s.",
		who, v.Reason, openAIDuration(time.Duration(retryMS)*time.Millisecond))
	kind := errRateRequests // concurrency and queue_full count as requests
	switch v.Reason {
	case limiter.Tokens.String():
		kind = errRateTokens
	case limiter.Spend.String():
		kind = errQuota
		msg = fmt.Sprintf("Budget reached for %s: it resets in %s.", who, openAIDuration(time.Duration(retryMS)*time.Millisecond))
	}
	c.p.fail(w, apiError{http.StatusTooManyRequests, kind, msg})
}

// proxyTenant finds the tenant of the request's API key (the bearer token,
// else x-api-key) and returns it with the key.
func (s *Server) proxyTenant(h http.Header) (tenant, apiKey string, ok bool) {
	if s.cfg.Tenant == nil {
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
		if t, ok := s.cfg.Tenant(k); ok && router.CheckName("tenant", t, true) == nil {
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
		if err != nil || ms < 0 || ms > router.MaxWait.Milliseconds() {
			return 0, 0, fmt.Errorf("%s must be an integer between 0 and %d, got %q", hdrWaitMS, router.MaxWait.Milliseconds(), v)
		}
		wait = time.Duration(ms) * time.Millisecond
	}
	return prio, wait, nil
}

// exchange is one admitted request on its way through the upstream. It is
// used by the request's handler goroutine only.
type exchange struct {
	s         *Server
	c         *proxyCall
	l         router.Lease
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
	ok, _, _ := x.s.r.LeaseCall(x.ctx, x.l, op, u)
	if x.s.log.Enabled(x.ctx, slog.LevelDebug) { // the arguments cost allocations even when not logged
		x.s.log.Debug("proxy: finished", "tenant", x.l.Tenant, "op", op.String(), "prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens, "found", ok)
	}
}

// settleSeen settles from what the answer showed (see usageSeen.usage).
func (x *exchange) settleSeen() {
	if !x.finished {
		x.finish(node.OpSettle, x.seen.usage(x.c.promptTokens))
	}
}
