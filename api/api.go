package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// maxLeaseText bounds the bytes of a lease's text: 9 keys of 256-byte
// names fit.
const maxLeaseText = 8192

// Config configures the decision API. Zero fields take the documented
// defaults.
type Config struct {
	// router.Counter counts prompts sent as text or messages. Nil refuses them
	// (400).
	Counter router.Counter
	// MaxPromptBytes bounds the bytes of a prompt (or of messages: every
	// role, name, content and tool field) counted with Counter: a larger
	// one is answered 413, naming the cap, and the caller sends
	// prompt_tokens instead. Counting costs about 0.3-0.5 s of CPU a MiB.
	// Zero means router.DefaultMaxPromptBytes (256 KiB).
	MaxPromptBytes int
	// ClusterSecrets are the cluster's secrets: the first signs the leases
	// this node hands out (HMAC-SHA256), every one verifies leases brought
	// back, so a secret being rotated is accepted on both sides of the
	// rotation. Empty signs with a fixed public key (see leaseSigner).
	ClusterSecrets [][]byte
	// Clients are the client tokens, each with the tenants it may act for
	// (AnyTenant for all). Empty leaves the API open; see clientTokens.
	Clients map[string][]string
	// ClientCerts are the clients known by a TLS client certificate, by
	// the identity it must carry (its subject common name, a DNS SAN or a
	// URI SAN, matched exactly): over TLS, a request without a token whose
	// verified certificate carries one acts as that client. Such a client
	// has no token. See clientTokens.
	ClientCerts map[string]CertClient
	// LimitSetters are the client tokens that may send limits with their
	// acquires ("limits", "parents"; clients: may_set_limits); any other
	// client gets a 403 for such an acquire. An open API takes them.
	LimitSetters map[string]bool
	// Now is the clock (a renewed lease's expires_in_ms). Nil means
	// time.Now.
	Now func() time.Time
}

// Server is the decision API of one node, deciding through its router.
// Safe for concurrent use.
type Server struct {
	r       *router.Router
	cfg     Config
	leases  *leaseSigner
	clients atomic.Pointer[clientTokens] // holds nil: the API is open
}

// New returns the decision API deciding through r.
func New(r *router.Router, cfg Config) *Server {
	if cfg.MaxPromptBytes <= 0 {
		cfg.MaxPromptBytes = router.DefaultMaxPromptBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{r: r, cfg: cfg, leases: newLeaseSigner(cfg.ClusterSecrets)}
	s.clients.Store(newClientTokens(cfg.Clients, cfg.ClientCerts, cfg.LimitSetters))
	return s
}

// SetClients replaces the clients (Config.Clients and ClientCerts: a
// config reload); a request already past its check keeps its verdict.
// Without any, the API is open: the caller decides whether a reload may
// open it.
func (s *Server) SetClients(tokens map[string][]string, certs map[string]CertClient, setters map[string]bool) {
	s.clients.Store(newClientTokens(tokens, certs, setters))
}

// Routes serves the decision API on mux: POST /v1/acquire, /v1/complete,
// /v1/renew and /v1/batch, GET /v1/tenants/{tenant}.
func (s *Server) Routes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/acquire", s.authenticated(post(endpoint(s, s.acquireCall))))
	mux.HandleFunc("/v1/complete", s.authenticated(post(endpoint(s, s.completeCall))))
	mux.HandleFunc("/v1/renew", s.authenticated(post(endpoint(s, s.renewCall))))
	mux.HandleFunc("/v1/batch", s.authenticated(post(s.batch)))
	mux.HandleFunc("/v1/tenants/{tenant}", s.authenticated(get(s.tenant)))
}

func post(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "method "+req.Method+" not allowed, use POST")
			return
		}
		req.Body = http.MaxBytesReader(w, req.Body, router.MaxBody)
		h(w, req)
	}
}

func get(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, "method "+req.Method+" not allowed, use GET")
			return
		}
		h(w, req)
	}
}

// decodeOne decodes exactly one JSON value from dec into v: anything after
// it but white space is an error. (dec.More would miss a stray ']' or '}'.)
func decodeOne(dec *json.Decoder, v any) error {
	if err := dec.Decode(v); err != nil {
		return err
	}
	_, err := dec.Token()
	var syntax *json.SyntaxError
	switch {
	case err == io.EOF:
		return nil
	case err != nil && !errors.As(err, &syntax):
		return err // reading failed (a body over its cap)
	}
	return errors.New("trailing data after the JSON object")
}

// decodeBody decodes a JSON body strictly into v, or writes the 4xx and
// returns false. The body is read whole into a pooled buffer; the bodies
// gateways send decode without reflection (decodeFast), any other through
// encoding/json, whose refusals are the ones answered.
func decodeBody(w http.ResponseWriter, req *http.Request, v any) bool {
	bp := bodyBuffers.Get().(*[]byte)
	defer putBody(bp)
	body, err := readBody((*bp)[:0], req.Body)
	*bp = body
	if err == nil {
		if decodeFast(body, v) {
			return true
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err = decodeOne(dec, v); err == nil {
			return true
		}
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", tooBig.Limit))
		return false
	}
	writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
	return false
}

// bodyBuffers holds the buffers request bodies are read into and answers
// written from; putBody keeps only small ones.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

func putBody(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		*bp = (*bp)[:0]
		bodyBuffers.Put(bp)
	}
}

// readBody appends everything r yields to dst.
func readBody(dst []byte, r io.Reader) ([]byte, error) {
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// acquireRequest is the body of POST /v1/acquire.
type acquireRequest struct {
	Tenant       string           `json:"tenant"`
	Model        string           `json:"model"`
	PromptTokens *int64           `json:"prompt_tokens"`
	Prompt       *string          `json:"prompt"`
	Messages     []prompt.Message `json:"messages"`
	MaxTokens    *int64           `json:"max_tokens"`
	Priority     string           `json:"priority"`
	WaitMS       int64            `json:"wait_ms"`
	// Limits and Parents are limits the gateway sends (its own database's):
	// the tenant's, and the groups above it, nearest first, each with its
	// own. Only a client that may set limits sends them.
	Limits  *sentLimits  `json:"limits"`
	Parents []sentParent `json:"parents"`
}

// sentLimits are a level's limits as a request sends them; an absent
// dimension is unlimited.
type sentLimits struct {
	RPM         int64 `json:"rpm"`
	TPM         int64 `json:"tpm"`
	Concurrency int64 `json:"concurrency"`
}

// sentParent is a group a request names above its tenant.
type sentParent struct {
	Name   string      `json:"name"`
	Limits *sentLimits `json:"limits"`
}

// parseAcquire validates an acquire without counting its prompt: a prompt
// or messages leave PromptTokens 0, for countAcquirePrompt to fill.
func (s *Server) parseAcquire(in *acquireRequest) (router.Admission, error) {
	a := router.Admission{Tenant: in.Tenant, Model: in.Model}
	if err := router.CheckName("tenant", in.Tenant, true); err != nil {
		return a, err
	}
	if err := router.CheckName("model", in.Model, false); err != nil {
		return a, err
	}
	given := 0
	for _, set := range []bool{in.PromptTokens != nil, in.Prompt != nil, in.Messages != nil} {
		if set {
			given++
		}
	}
	if given > 1 {
		return a, errors.New("give only one of prompt_tokens, prompt and messages")
	}
	switch {
	case in.PromptTokens != nil:
		if err := router.CheckCount("prompt_tokens", *in.PromptTokens); err != nil {
			return a, err
		}
		a.Req.PromptTokens = *in.PromptTokens
	case in.Prompt != nil || in.Messages != nil:
		// Counted later, by countAcquirePrompt, once the caller is known to be
		// allowed (acquireDecision): nothing is computed for a caller
		// before that.
		if s.cfg.Counter == nil {
			return a, errors.New("this node cannot count prompts; send prompt_tokens")
		}
		if in.Prompt == nil && len(in.Messages) == 0 {
			return a, errors.New("messages must not be empty")
		}
	}
	if in.MaxTokens != nil {
		if err := router.CheckCount("max_tokens", *in.MaxTokens); err != nil {
			return a, err
		}
		if *in.MaxTokens == 0 {
			return a, errors.New("max_tokens must be at least 1 when given")
		}
		a.Req.MaxTokens = *in.MaxTokens
	}
	switch in.Priority {
	case "", "interactive":
		a.Req.Priority = limiter.Interactive
	case "batch":
		a.Req.Priority = limiter.Batch
	default:
		return a, fmt.Errorf("priority must be interactive or batch, got %q", in.Priority)
	}
	if in.WaitMS < 0 || in.WaitMS > router.MaxWait.Milliseconds() {
		return a, fmt.Errorf("wait_ms must be between 0 and %d, got %d", router.MaxWait.Milliseconds(), in.WaitMS)
	}
	a.Req.Wait = time.Duration(in.WaitMS) * time.Millisecond
	return a, parseSent(in, &a)
}

// dimJSON is one dimension of "limits". Overdraft, how far what the
// window counts is past the limit (real usage settled beyond its
// reservation, limiter.DimStatus), is written only when there is one:
// an answer within its limits keeps its bytes.
type dimJSON struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Overdraft int64 `json:"overdraft,omitempty"`
	ResetMS   int64 `json:"reset_ms"`
}

// limitsJSON is the "limits" object: one dimJSON per dimension.
type limitsJSON struct {
	Requests    dimJSON     `json:"requests"`
	Tokens      dimJSON     `json:"tokens"`
	Concurrency dimJSON     `json:"concurrency"`
	Budget      *budgetJSON `json:"budget,omitempty"` // a key with a budget only
}

// budgetJSON is a key's spend in its current period, written as USD
// strings exactly (limiter.AppendUSD), by its appendJSON (MarshalJSON
// too): "limit_usd", "spent_usd" (settled, released or expired),
// "held_usd" (by requests in flight), "remaining_usd" (the limit after
// both), "overdraft_usd" (how far past it they are; only when past),
// "period_start" (RFC 3339, UTC; only once the key has spent) and
// "reset_ms" (until the period ends; 0: it never does). Amounts in
// picodollars.
type budgetJSON struct {
	Limit, Spent, Held, Remaining, Overdraft int64
	Start                                    time.Time
	ResetMS                                  int64
}

// budgetOf is s's budget, nil without one.
func budgetOf(s limiter.SpendStatus) *budgetJSON {
	if s.Limit <= 0 {
		return nil
	}
	return &budgetJSON{Limit: s.Limit, Spent: s.Spent, Held: s.Held, Remaining: s.Remaining, Overdraft: s.Overdraft,
		Start: s.Start, ResetMS: ceilMS(s.Reset)}
}

// MarshalJSON writes b as appendJSON does.
func (b *budgetJSON) MarshalJSON() ([]byte, error) { return b.appendJSON(nil), nil }

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func dim(d limiter.DimStatus) dimJSON {
	return dimJSON{Limit: d.Limit, Remaining: d.Remaining, Overdraft: d.Overdraft, ResetMS: ceilMS(d.Reset)}
}

func limitsOf(s limiter.Status) limitsJSON {
	return limitsJSON{Requests: dim(s.Requests), Tokens: dim(s.Tokens), Concurrency: dim(s.Concurrency), Budget: budgetOf(s.Spend)}
}

// acquireResponse is the answer of POST /v1/acquire.
type acquireResponse struct {
	Allowed        bool       `json:"allowed"`
	Lease          string     `json:"lease,omitempty"`
	ReservedTokens int64      `json:"reserved_tokens,omitempty"`
	Reason         string     `json:"reason,omitempty"`
	RetryAfterMS   int64      `json:"retry_after_ms,omitempty"`
	Limits         limitsJSON `json:"limits"`
	Pool           *poolJSON  `json:"pool,omitempty"`
	Fallback       bool       `json:"fallback,omitempty"`
	Owner          string     `json:"owner,omitempty"`
	// RefusedBy names the level that refused (router.Side.Label): "tenant:acme",
	// "tenant:acme|model:gpt-4o", "group:team-research",
	// "group:org-acme|model:gpt-4o-*", "pool:gpt-4o".
	RefusedBy string `json:"refused_by,omitempty"`
}

// answerOf is the answer of an acquire whose verdict is v: lease is v's
// lease signed (admitted), else "".
func answerOf(v *router.Verdict, lease string) acquireResponse {
	res := acquireResponse{Allowed: v.Allowed, Lease: lease, ReservedTokens: v.Reserved, Reason: v.Reason,
		Limits: limitsOf(v.Status), Fallback: v.Fallback, Owner: v.Owner}
	if !v.Allowed {
		res.RetryAfterMS, res.RefusedBy = max(1, ceilMS(v.RetryAfter)), v.RefusedBy.Label()
	}
	if v.Pool != "" {
		res.Pool = &poolJSON{Name: v.Pool, Limits: limitsOf(v.PoolStatus)}
	}
	return res
}

// poolJSON reports the pool's side of a decision.
type poolJSON struct {
	Name   string     `json:"name"`
	Limits limitsJSON `json:"limits"`
}

// setRetryAfter sets the Retry-After header in whole seconds, rounded up.
func setRetryAfter(w http.ResponseWriter, ms int64) {
	w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(ms), 10))
}

// retryAfterSeconds is a retry-after of ms milliseconds in whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(ms int64) int64 { return max(1, (ms+999)/1000) }

// completeRequest is the body of POST /v1/complete and /v1/renew.
type completeRequest struct {
	Tenant string     `json:"tenant"`
	Lease  string     `json:"lease"`
	Usage  *usageJSON `json:"usage"`
}

// usageJSON is the "usage" of a complete.
type usageJSON struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// TotalTokens is accepted, so that a client can pass an OpenAI usage
	// object as it came (the decoder refuses unknown fields), and
	// range-checked like the other two; it is not used: the settle counts
	// prompt + completion.
	TotalTokens int64 `json:"total_tokens"`
	// CachedTokens and CacheWriteTokens are the parts of PromptTokens
	// read from and written to the provider's prompt cache (OpenAI's
	// prompt_tokens_details.cached_tokens; Anthropic's
	// cache_read_input_tokens and cache_creation_input_tokens): a budget
	// charges them at their prices.
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

func (s *Server) parseLeaseRequest(in *completeRequest) (router.Lease, error) {
	if err := router.CheckName("tenant", in.Tenant, true); err != nil {
		return router.Lease{}, err
	}
	if in.Lease == "" {
		return router.Lease{}, errors.New("lease is required")
	}
	if len(in.Lease) > maxLeaseText {
		return router.Lease{}, errors.New("lease is too long")
	}
	l, err := s.leases.open(in.Lease)
	if err != nil {
		return router.Lease{}, err
	}
	if l.Tenant != in.Tenant {
		return router.Lease{}, errors.New("lease belongs to another tenant")
	}
	return l, nil
}

// tenant answers GET /v1/tenants/{t}[?model=m]: the tenant's "owner" and
// "limits", and "levels": every key an acquire of the tenant charges
// (sidesOf; with ?model=, its model-scoped keys and its pool too), in the
// order they are reserved, each with its label, owner and status.
func (s *Server) tenant(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("tenant")
	if err := router.CheckName("tenant", name, true); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.authorize(w, req, name) {
		return
	}
	model := req.URL.Query().Get("model")
	if err := router.CheckName("model", model, false); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	levels, unreachable, err := s.r.Levels(req.Context(), name, model)
	if err != nil {
		if writeOwnerTimeout(w, err) {
			return
		}
		writeError(w, 499, "request cancelled: "+err.Error())
		return
	}
	if unreachable != "" {
		writeError(w, http.StatusServiceUnavailable, "the owner of "+unreachable+" is unreachable")
		return
	}
	out := make([]levelJSON, len(levels))
	for i, l := range levels {
		out[i] = levelJSON{Level: l.Label, Owner: l.Owner, Limits: limitsOf(l.Status)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tenant": name, "owner": out[0].Owner, "limits": out[0].Limits, "levels": out})
}

// levelJSON is one level of GET /v1/tenants/{t}'s "levels".
type levelJSON struct {
	Level  string     `json:"level"`
	Owner  string     `json:"owner"`
	Limits limitsJSON `json:"limits"`
}

// jsonContentType is the Content-Type of every JSON answer (shared: a
// header value is never modified in place).
var jsonContentType = []string{"application/json"}

// writeJSON writes v as the code answer: v's own appendJSON when it has
// one, else encoding/json; the same bytes either way.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header()["Content-Type"] = jsonContentType
	a, ok := v.(jsonAppender)
	if !ok {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
		return
	}
	bp := bodyBuffers.Get().(*[]byte)
	*bp = append(a.appendJSON((*bp)[:0]), '\n')
	w.WriteHeader(code)
	_, _ = w.Write(*bp)
	putBody(bp)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, &errorBody{Error: msg})
}

// parseSent validates the limits an acquire sends into a: every number
// from 0 (unlimited) to router.MaxTokens, at most router.MaxGroups parents
// with valid, distinct names other than the tenant's.
func parseSent(in *acquireRequest, a *router.Admission) error {
	var err error
	if a.Limits, err = in.Limits.limits("limits"); err != nil {
		return err
	}
	if len(in.Parents) > router.MaxGroups {
		return fmt.Errorf("parents: at most %d, got %d", router.MaxGroups, len(in.Parents))
	}
	seen := map[string]bool{}
	for i, p := range in.Parents {
		field := fmt.Sprintf("parents[%d]", i)
		if err := router.CheckName(field+".name", p.Name, true); err != nil {
			return err
		}
		if seen[p.Name] {
			return fmt.Errorf("%s.name: %q named twice", field, p.Name)
		}
		seen[p.Name] = true
		l, err := p.Limits.limits(field + ".limits")
		if err != nil {
			return err
		}
		a.Parents = append(a.Parents, router.Parent{Name: p.Name, Limits: l})
	}
	return nil
}

// limits is l as the router takes it; nil when l is.
func (l *sentLimits) limits(field string) (*limiter.Limits, error) {
	if l == nil {
		return nil, nil
	}
	for _, d := range []struct {
		name string
		v    int64
	}{{"rpm", l.RPM}, {"tpm", l.TPM}, {"concurrency", l.Concurrency}} {
		if err := router.CheckCount(field+"."+d.name, d.v); err != nil {
			return nil, err
		}
	}
	return &limiter.Limits{Requests: l.RPM, Tokens: l.TPM, Concurrency: l.Concurrency}, nil
}
