package router

// The LLM proxy (DESIGN.md, "LLM proxy"): OpenAI's POST /v1/chat/completions
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
// OpenAI streams: the proxy adds stream_options.include_usage=true when the
// client did not ask for it, so that it can settle, and then removes the
// final usage-only chunk (empty choices, usage set) from what the client
// receives, so the client gets the stream it asked for. The other chunks
// carry "usage":null when include_usage is on; they are passed through
// untouched.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/prompt"
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
	// Client sends the forwarded requests. It must not have a Timeout that
	// would cut long streams. Nil means http.DefaultClient.
	Client *http.Client
}

// Proxy bounds.
const (
	maxAnswer  = 32 << 20 // bytes of a non-streaming answer parsed for its usage; larger ones pass through and release
	maxEvent   = 1 << 20  // bytes of one stream event parsed; larger ones pass through unparsed
	maxTextBuf = 64 << 10 // completion text buffered before it is counted
	maxChoices = 128      // OpenAI's n
)

// provider is the API shape of a proxied request.
type provider uint8

const (
	openAI provider = iota
	anthropic
)

func (p provider) String() string {
	if p == anthropic {
		return "anthropic"
	}
	return "openai"
}

func (r *Router) proxyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, req *http.Request) { r.proxy(w, req, openAI) })
	mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, req *http.Request) { r.proxy(w, req, anthropic) })
}

// apiError is an error answer in both providers' shapes.
type apiError struct {
	status     int
	openAIType string // OpenAI error.type
	openAICode string // OpenAI error.code; "" is null
	claudeType string // Anthropic error.type
	msg        string
}

func badRequest(format string, args ...any) apiError {
	return apiError{http.StatusBadRequest, "invalid_request_error", "", "invalid_request_error", fmt.Sprintf(format, args...)}
}

type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// fail writes e in p's error shape.
func (p provider) fail(w http.ResponseWriter, e apiError) {
	if p == anthropic {
		var b anthropicErrorBody
		b.Type, b.Error.Type, b.Error.Message = "error", e.claudeType, e.msg
		writeJSON(w, e.status, b)
		return
	}
	var b openAIErrorBody
	b.Error.Message, b.Error.Type = e.msg, e.openAIType
	if e.openAICode != "" {
		b.Error.Code = &e.openAICode
	}
	writeJSON(w, e.status, b)
}

// proxyCall is a validated proxy request.
type proxyCall struct {
	p            provider
	tenant       string
	model        string
	promptTokens int64  // counted locally
	maxTokens    int64  // the completion bound the client gave (× n); 0: none
	stream       bool   // the client asked for a stream
	stripUsage   bool   // OpenAI: include_usage was added by the proxy; drop the usage-only chunk
	body         []byte // what to forward
}

func (r *Router) proxy(w http.ResponseWriter, req *http.Request, p provider) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		p.fail(w, apiError{http.StatusMethodNotAllowed, "invalid_request_error", "", "invalid_request_error", "method " + req.Method + " not allowed, use POST"})
		return
	}
	tenant, ok := r.proxyTenant(req.Header)
	if !ok {
		p.fail(w, apiError{http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "authentication_error",
			"invalid or missing API key: send Authorization: Bearer <key> or x-api-key: <key>"})
		return
	}
	up, path := r.cfg.Proxy.OpenAI, "/chat/completions"
	if p == anthropic {
		up, path = r.cfg.Proxy.Anthropic, "/messages"
	}
	if up.BaseURL == "" {
		p.fail(w, apiError{http.StatusBadGateway, "server_error", "", "api_error", "no upstream is configured for " + p.String()})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			p.fail(w, apiError{http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large", fmt.Sprintf("body over %d bytes", tooBig.Limit)})
			return
		}
		p.fail(w, badRequest("reading the body: %v", err))
		return
	}
	c := proxyCall{p: p, tenant: tenant}
	if p == anthropic {
		err = r.parseAnthropic(&c, body)
	} else {
		err = r.parseOpenAI(&c, body)
	}
	if err != nil {
		p.fail(w, badRequest("%v", err))
		return
	}
	adm := admission{tenant: tenant, model: c.model, req: limiter.Request{PromptTokens: c.promptTokens, MaxTokens: c.maxTokens}}
	if adm.req.Priority, adm.req.Wait, err = proxyQueue(req.Header); err != nil {
		p.fail(w, badRequest("%v", err))
		return
	}
	res, err := r.admit(req.Context(), adm)
	var slow *ownerTimeoutError
	if errors.As(err, &slow) { // the owner is alive but slow: nothing admitted, nothing forwarded
		setRetryHeaders(w.Header(), ownerTimeoutRetry.Milliseconds())
		p.fail(w, apiError{http.StatusServiceUnavailable, "server_error", "", "overloaded_error", slow.Error()})
		return
	}
	if err != nil {
		p.fail(w, apiError{499, "invalid_request_error", "", "invalid_request_error", "request cancelled: " + err.Error()})
		return
	}
	tl := r.cfg.Limits(TenantKey(tenant))
	setRateLimitHeaders(w.Header(), statusOf(res.Limits), tl.Window)
	if !res.Allowed {
		r.refuse(w, &c, res)
		return
	}
	l, err := parseLease(res.Lease)
	if err != nil { // cannot happen: admit made it
		p.fail(w, apiError{http.StatusInternalServerError, "server_error", "", "api_error", "internal error: " + err.Error()})
		return
	}
	x := &exchange{r: r, c: &c, l: l, ctx: context.WithoutCancel(req.Context())}
	x.stopRenew = r.renewEvery(l, r.renewInterval(tl, l))
	defer x.finish(node.OpRelease, limiter.Usage{}) // a safety net: a no-op once finished
	x.forward(w, req, up.BaseURL+path)
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
	who := "tenant " + c.tenant
	if res.Pool != nil {
		who = "model " + c.model + " (upstream pool " + res.Pool.Name + ", shared by all tenants)"
	}
	msg := fmt.Sprintf("Rate limit reached for %s on %s. Please try again in %s.",
		who, res.Reason, openAIDuration(time.Duration(res.RetryAfterMS)*time.Millisecond))
	kind := "requests" // OpenAI's types are requests and tokens; concurrency and queue_full count requests
	if res.Reason == limiter.Tokens.String() {
		kind = "tokens"
	}
	c.p.fail(w, apiError{http.StatusTooManyRequests, kind, "rate_limit_exceeded", "rate_limit_error", msg})
}

// proxyTenant finds the tenant of the request's API key: the bearer token,
// else x-api-key.
func (r *Router) proxyTenant(h http.Header) (string, bool) {
	if r.cfg.Proxy.Tenant == nil {
		return "", false
	}
	var keys []string
	if a := h.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		keys = append(keys, strings.TrimSpace(a[7:]))
	}
	if k := h.Get("x-api-key"); k != "" {
		keys = append(keys, k)
	}
	for _, k := range keys {
		if t, ok := r.cfg.Proxy.Tenant(k); ok && checkName("tenant", t, true) == nil {
			return t, true
		}
	}
	return "", false
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

// parseOpenAI validates an OpenAI chat completion request and counts its
// prompt. Fields it does not know are the upstream's business.
func (r *Router) parseOpenAI(c *proxyCall, body []byte) error {
	var in struct {
		Model               string           `json:"model"`
		Messages            []prompt.Message `json:"messages"`
		MaxTokens           *int64           `json:"max_tokens"`
		MaxCompletionTokens *int64           `json:"max_completion_tokens"`
		N                   *int64           `json:"n"`
		Stream              bool             `json:"stream"`
		StreamOptions       *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if err := checkName("model", in.Model, true); err != nil {
		return err
	}
	if len(in.Messages) == 0 {
		return errors.New("messages is required and must not be empty")
	}
	c.model, c.stream, c.body = in.Model, in.Stream, body
	mt := in.MaxTokens
	if in.MaxCompletionTokens != nil { // the newer name wins
		mt = in.MaxCompletionTokens
	}
	if mt != nil {
		name := "max_tokens"
		if mt == in.MaxCompletionTokens {
			name = "max_completion_tokens"
		}
		if err := checkCount(name, *mt); err != nil {
			return err
		}
		c.maxTokens = *mt
		if in.N != nil && *in.N > 1 { // each choice may use max_tokens
			c.maxTokens = min(c.maxTokens*min(*in.N, maxChoices), maxTokens)
		}
	}
	c.promptTokens = r.count(body, func(k Counter) int { return k.Messages(in.Model, in.Messages) })
	if in.Stream && (in.StreamOptions == nil || !in.StreamOptions.IncludeUsage) {
		b, err := withIncludeUsage(body)
		if err != nil {
			return err
		}
		c.body, c.stripUsage = b, true
	}
	return nil
}

// withIncludeUsage returns body with stream_options.include_usage set to
// true, keeping every other field.
func withIncludeUsage(body []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := obj["stream_options"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("stream_options must be an object: %v", err)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	var err error
	if obj["stream_options"], err = marshalRaw(opts); err != nil {
		return nil, err
	}
	return marshalRaw(obj)
}

// marshalRaw marshals v without escaping <, > and &, so that text passes
// through as the client wrote it.
func marshalRaw(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// parseAnthropic validates an Anthropic Messages request and counts its
// prompt.
func (r *Router) parseAnthropic(c *proxyCall, body []byte) error {
	var in struct {
		Model     string           `json:"model"`
		System    json.RawMessage  `json:"system"`
		Messages  []prompt.Message `json:"messages"`
		MaxTokens *int64           `json:"max_tokens"`
		Stream    bool             `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if err := checkName("model", in.Model, true); err != nil {
		return err
	}
	if len(in.Messages) == 0 {
		return errors.New("messages is required and must not be empty")
	}
	if in.MaxTokens != nil {
		if err := checkCount("max_tokens", *in.MaxTokens); err != nil {
			return err
		}
		c.maxTokens = *in.MaxTokens
	}
	var system string
	msgs := in.Messages
	switch sys := bytes.TrimSpace(in.System); {
	case len(sys) == 0 || string(sys) == "null":
	case sys[0] == '"':
		if err := json.Unmarshal(sys, &system); err != nil {
			return fmt.Errorf("system: %v", err)
		}
	case sys[0] == '[': // blocks: counted as a first message, as prompt.AnthropicMessages says
		msgs = append([]prompt.Message{{Role: "system", Content: in.System}}, in.Messages...)
	default:
		return errors.New("system must be a string or an array of content blocks")
	}
	c.model, c.stream, c.body = in.Model, in.Stream, body
	c.promptTokens = r.count(body, func(k Counter) int {
		if ac, ok := k.(interface {
			AnthropicMessages(model, system string, msgs []prompt.Message) int
		}); ok {
			return ac.AnthropicMessages(in.Model, system, msgs)
		}
		if system != "" {
			msgs = append([]prompt.Message{{Role: "system", Content: json.RawMessage(strconv.Quote(system))}}, msgs...)
		}
		return k.Messages(in.Model, msgs)
	})
	return nil
}

// count counts a prompt with the Counter, or, without one, estimates one
// token per three bytes of the body (prompt's own fallback: too much rather
// than too little).
func (r *Router) count(body []byte, f func(Counter) int) int64 {
	if r.cfg.Counter == nil {
		return int64(len(body)+2) / 3
	}
	return int64(f(r.cfg.Counter))
}

// renewInterval is a third of the shortest lease TTL of the lease's keys.
func (r *Router) renewInterval(tl limiter.Limits, l lease) time.Duration {
	ttl := tl.LeaseTTL
	if ttl <= 0 {
		ttl = limiter.DefaultLeaseTTL
	}
	if l.Pool != "" {
		if pt := r.cfg.Limits(PoolKey(l.Pool)).LeaseTTL; pt > 0 {
			ttl = min(ttl, pt)
		}
	}
	return max(ttl/3, time.Millisecond)
}

// renewEvery renews l every interval until the returned stop is called; stop
// returns once the renewing goroutine has ended.
func (r *Router) renewEvery(l lease, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ok, _, _ := r.leaseCall(ctx, l, node.OpRenew, limiter.Usage{}); !ok && ctx.Err() == nil {
					r.log.Warn("proxy: renewing a streaming request's lease failed; its slot may expire", "tenant", l.Tenant)
				}
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
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
	x.r.log.Debug("proxy: finished", "tenant", x.l.Tenant, "op", op.String(), "prompt_tokens", u.PromptTokens, "completion_tokens", u.CompletionTokens, "found", ok)
}

// settleSeen settles from what the answer showed (see usageSeen.usage).
func (x *exchange) settleSeen() {
	if !x.finished {
		x.finish(node.OpSettle, x.seen.usage(x))
	}
}

// usageSeen is what an answer has shown of its usage so far.
type usageSeen struct {
	prompt     int64 // reported prompt tokens; valid when promptSet
	promptSet  bool
	completion int64 // reported completion tokens; final when final
	final      bool
	text       strings.Builder // completion text not counted yet
	counted    int64           // tokens of the completion text counted so far
}

// addText records completion text, counting it in pieces so memory stays
// bounded (each cut can shift the count by about a token).
func (s *usageSeen) addText(x *exchange, t string) {
	s.text.WriteString(t)
	if s.text.Len() >= maxTextBuf {
		s.counted += x.countText(s.text.String())
		s.text.Reset()
	}
}

func (x *exchange) countText(t string) int64 {
	if t == "" {
		return 0
	}
	if x.r.cfg.Counter == nil {
		return int64(len(t)+2) / 3
	}
	return int64(x.r.cfg.Counter.Text(x.c.model, t))
}

// usage is the usage to settle with: what was reported, else the counted
// prompt and the completion counted from the text seen (never less than a
// partial count the upstream reported).
func (s *usageSeen) usage(x *exchange) limiter.Usage {
	u := limiter.Usage{PromptTokens: x.c.promptTokens, CompletionTokens: s.completion}
	if s.promptSet {
		u.PromptTokens = s.prompt
	}
	if !s.final {
		u.CompletionTokens = max(s.completion, s.counted+x.countText(s.text.String()))
	}
	return u
}

// hopHeaders are connection-level headers a proxy does not forward.
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyHeader copies src's end-to-end headers into dst, except those skip
// names (canonical names).
func copyHeader(dst, src http.Header, skip func(string) bool) {
	conn := map[string]bool{}
	for _, v := range src.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			conn[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for k, vv := range src {
		if hopHeaders[k] || conn[k] || skip(k) {
			continue
		}
		dst[k] = append([]string(nil), vv...)
	}
}

// forward sends the request upstream and relays the answer.
func (x *exchange) forward(w http.ResponseWriter, req *http.Request, url string) {
	c := x.c
	if req.Context().Err() != nil { // gone while queued or admitted: nothing was sent
		x.finish(node.OpCancel, limiter.Usage{})
		return
	}
	if req.URL.RawQuery != "" {
		url += "?" + req.URL.RawQuery
	}
	up, err := http.NewRequestWithContext(req.Context(), http.MethodPost, url, bytes.NewReader(c.body))
	if err != nil {
		x.finish(node.OpCancel, limiter.Usage{})
		c.p.fail(w, apiError{http.StatusBadGateway, "server_error", "", "api_error", "bad upstream URL: " + err.Error()})
		return
	}
	key := x.r.cfg.Proxy.OpenAI.APIKey
	if c.p == anthropic {
		key = x.r.cfg.Proxy.Anthropic.APIKey
	}
	copyHeader(up.Header, req.Header, func(k string) bool {
		switch k {
		case "Content-Length", "Accept-Encoding", "Host":
			return true
		case "Authorization", "X-Api-Key":
			return key != ""
		}
		return strings.HasPrefix(k, "X-Tokenring-")
	})
	switch {
	case key != "" && c.p == anthropic:
		up.Header.Set("x-api-key", key)
	case key != "":
		up.Header.Set("Authorization", "Bearer "+key)
	}
	up.Header.Set("Content-Type", "application/json")
	if c.stream {
		up.Header.Set("Accept-Encoding", "identity") // a gzip reader may hold back events
	}
	client := x.r.cfg.Proxy.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(up)
	if err != nil {
		var op *net.OpError
		switch {
		case req.Context().Err() != nil:
			x.finish(node.OpRelease, limiter.Usage{}) // the upstream may have started
			return
		case errors.As(err, &op) && op.Op == "dial":
			x.finish(node.OpCancel, limiter.Usage{})
		default:
			x.finish(node.OpRelease, limiter.Usage{})
		}
		c.p.fail(w, apiError{http.StatusBadGateway, "server_error", "", "api_error", "upstream unreachable: " + err.Error()})
		return
	}
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
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		x.finish(node.OpRelease, limiter.Usage{})
		if req.Context().Err() == nil {
			w.Header().Del("Content-Type")
			x.c.p.fail(w, apiError{http.StatusBadGateway, "server_error", "", "api_error", "upstream answer cut: " + err.Error()})
		}
		return
	}
	switch {
	case len(raw) > maxAnswer:
		x.finish(node.OpRelease, limiter.Usage{})
	case resp.StatusCode/100 != 2:
		x.finish(node.OpSettle, limiter.Usage{PromptTokens: x.c.promptTokens})
	default:
		if x.observeBody(raw) {
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

// observeBody reads the usage (or, failing that, the content) of a
// non-streaming answer into x.seen; false when it is not JSON.
func (x *exchange) observeBody(raw []byte) bool {
	s := &x.seen
	if x.c.p == anthropic {
		var m struct {
			Content []anthropicBlock `json:"content"`
			Usage   *anthropicUsage  `json:"usage"`
		}
		if json.Unmarshal(raw, &m) != nil {
			return false
		}
		for _, b := range m.Content {
			b.addTo(x)
		}
		if m.Usage != nil {
			m.Usage.addTo(s, true)
		}
		return true
	}
	var m openAIAnswer
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	m.addTo(x)
	return true
}

// openAIAnswer is what the proxy reads of an OpenAI answer: a whole
// completion (choices[].message) or a stream chunk (choices[].delta).
type openAIAnswer struct {
	Choices []struct {
		Message openAIDelta `json:"message"`
		Delta   openAIDelta `json:"delta"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

// addTo adds the answer's content and usage to what x has seen.
func (a *openAIAnswer) addTo(x *exchange) {
	for i := range a.Choices {
		a.Choices[i].Message.addTo(x)
		a.Choices[i].Delta.addTo(x)
	}
	if a.Usage != nil {
		a.Usage.addTo(&x.seen)
	}
}

// relayStream relays an event stream event by event, flushing each, and
// settles before the terminal event or at the end.
func (x *exchange) relayStream(w http.ResponseWriter, req *http.Request, resp *http.Response) {
	rc := http.NewResponseController(w)
	w.WriteHeader(resp.StatusCode)
	if err := rc.Flush(); err != nil { // the client is gone
		x.settleSeen()
		return
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var ev []byte        // the current event, while it is at most maxEvent bytes
	passthrough := false // the current event outgrew maxEvent: written as it comes, unparsed
	lineStart := true    // the next fragment starts a line
	var werr error
	write := func(b []byte) {
		if werr == nil && len(b) > 0 {
			_, werr = w.Write(b)
		}
	}
	for werr == nil {
		frag, rerr := br.ReadSlice('\n')
		blank := lineStart && rerr == nil && (len(frag) == 1 || (len(frag) == 2 && frag[0] == '\r'))
		lineStart = rerr == nil
		if passthrough {
			write(frag)
		} else {
			ev = append(ev, frag...)
			if len(ev) > maxEvent {
				write(ev)
				ev, passthrough = ev[:0], true
			}
		}
		if blank || (rerr != nil && rerr != bufio.ErrBufferFull) {
			if !passthrough && len(ev) > 0 && x.observeEvent(ev) {
				write(ev)
			}
			ev, passthrough = ev[:0], false
			if werr == nil {
				werr = rc.Flush()
			}
		}
		if rerr == nil || rerr == bufio.ErrBufferFull {
			continue
		}
		// The stream ended: cleanly (EOF), cut by the upstream, or
		// because the client went away (the request's context ends).
		x.settleSeen()
		if rerr != io.EOF && werr == nil && req.Context().Err() == nil {
			// Cut upstream: cut the client's stream too, so it knows
			// the answer is incomplete.
			panic(http.ErrAbortHandler)
		}
		return
	}
	x.settleSeen() // the client went away
}

// observeEvent reads one stream event's usage and content into x.seen,
// settling before a terminal event. It returns whether the event is passed
// on to the client.
func (x *exchange) observeEvent(ev []byte) bool {
	data, ok := sseData(ev)
	if !ok {
		return true
	}
	s := &x.seen
	if x.c.p == anthropic {
		var e struct {
			Type    string `json:"type"`
			Message *struct {
				Content []anthropicBlock `json:"content"`
				Usage   *anthropicUsage  `json:"usage"`
			} `json:"message"`
			ContentBlock *anthropicBlock `json:"content_block"`
			Delta        *anthropicBlock `json:"delta"`
			Usage        *anthropicUsage `json:"usage"`
		}
		if json.Unmarshal(data, &e) != nil {
			return true
		}
		switch e.Type {
		case "message_start":
			if e.Message != nil && e.Message.Usage != nil {
				e.Message.Usage.addTo(s, false)
			}
		case "content_block_start":
			if e.ContentBlock != nil {
				e.ContentBlock.addTo(x)
			}
		case "content_block_delta":
			if e.Delta != nil {
				e.Delta.addTo(x)
			}
		case "message_delta":
			if e.Usage != nil {
				e.Usage.addTo(s, true)
			}
		case "message_stop":
			x.settleSeen()
		}
		return true
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		x.settleSeen()
		return true
	}
	var chunk openAIAnswer
	if json.Unmarshal(data, &chunk) != nil {
		return true
	}
	chunk.addTo(x)
	return chunk.Usage == nil || !(x.c.stripUsage && len(chunk.Choices) == 0)
}

// sseData returns the data of an event: its data lines' values joined by
// "\n"; false when it has none.
func sseData(ev []byte) ([]byte, bool) {
	var data []byte
	found := false
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if found {
			data = append(data, '\n')
		}
		data = append(data, v...)
		found = true
	}
	return data, found
}

// openAIUsage is OpenAI's usage object.
type openAIUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

func (u *openAIUsage) addTo(s *usageSeen) {
	s.prompt, s.promptSet = u.PromptTokens, true
	s.completion, s.final = u.CompletionTokens, true
}

// openAIDelta is the part of a streamed delta, or of a whole message, whose
// text counts as completion.
type openAIDelta struct {
	Content          string `json:"content"`
	Refusal          string `json:"refusal"`
	ReasoningContent string `json:"reasoning_content"`
	ToolCalls        []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func (d *openAIDelta) addTo(x *exchange) {
	for _, t := range []string{d.Content, d.Refusal, d.ReasoningContent} {
		x.seen.addText(x, t)
	}
	for _, tc := range d.ToolCalls {
		x.seen.addText(x, tc.Function.Name)
		x.seen.addText(x, tc.Function.Arguments)
	}
}

// anthropicUsage is Anthropic's usage object. Its prompt is every input
// token the model processed, cached or not: what the prompt was counted as.
type anthropicUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
}

// addTo records u; final marks output_tokens as the final count
// (message_delta, or a whole message).
func (u *anthropicUsage) addTo(s *usageSeen, final bool) {
	if u.InputTokens != nil { // message_delta may repeat it, cumulative
		s.prompt, s.promptSet = max(s.prompt, *u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens), true
	}
	if u.OutputTokens != nil {
		s.completion = max(s.completion, *u.OutputTokens)
		s.final = s.final || final
	}
}

// anthropicBlock is the part of a content block, or of a streamed delta,
// whose text counts as completion.
type anthropicBlock struct {
	Text        string          `json:"text"`
	Thinking    string          `json:"thinking"`
	PartialJSON string          `json:"partial_json"`
	Name        string          `json:"name"`
	Input       json.RawMessage `json:"input"`
}

func (b *anthropicBlock) addTo(x *exchange) {
	for _, t := range []string{b.Text, b.Thinking, b.PartialJSON, b.Name} {
		x.seen.addText(x, t)
	}
	if in := bytes.TrimSpace(b.Input); len(in) > 0 && string(in) != "{}" {
		x.seen.addText(x, string(in))
	}
}
