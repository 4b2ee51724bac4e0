package frontdoor

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/admin"
	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/router"
	"github.com/tokenring/tokenring/tracing"
)

// Config configures a node's front door. Zero fields take the documented
// defaults.
type Config struct {
	// Limits gives the limits of a limiter key (router.TenantKey,
	// PoolKey, GroupKey, ModelKey). Required.
	Limits func(key string) limiter.Limits
	// PoolFor maps a model name to its pool, if any. Nil means no pools.
	PoolFor func(model string) (pool string, ok bool)
	// Price and Budgeted are router.Config's: a model's price, whether
	// any key has a budget. Nil: nothing priced, nothing budgeted.
	Price    func(model string) (limiter.Price, bool)
	Budgeted func() bool
	// Weight is router.Config's: a tenant's weight in its pool's fair
	// shares. Nil: every tenant weighs 1.
	Weight func(tenant string) int64
	// LimitsSource names the config entry a key's limits come from, for
	// /admin/limits (admin.Config.Source). Nil names none.
	LimitsSource func(key string) string
	// Chain gives the groups above a tenant and the models entries that
	// apply to a model at each level (router.Config.Chain). Nil means
	// every tenant stands alone, without per-model limits.
	Chain func(tenant, model string) router.Chain
	// Counter counts prompts sent as text or messages. Nil refuses them (400).
	Counter router.Counter
	// Fallback is the policy when an owner is unreachable. Empty means
	// fallback.Degraded.
	Fallback fallback.Policy
	// ForwardTimeout is the config's forward_timeout
	// (router.Config.ForwardTimeout). Zero means 15ms.
	ForwardTimeout time.Duration
	// ForwardMaxWait is the hard cap on waiting for a key's owner that is
	// alive but slow (router.Config.ForwardMaxWait). Zero means 2s.
	ForwardMaxWait time.Duration
	// AdminToken, when set, is required as "Authorization: Bearer <token>"
	// on every path under /admin (and accepted as ?token= on /admin/ui).
	// Empty leaves /admin open. /metrics, /healthz and /readyz are open.
	AdminToken string
	// ClusterSecrets are the cluster's secrets: the first signs the leases
	// this node hands out, every one verifies leases brought back
	// (api.Config.ClusterSecrets).
	ClusterSecrets [][]byte
	// Clients are the decision API's client tokens, each with the tenants
	// it may act for (api.AnyTenant for all). Empty leaves the API open.
	Clients map[string][]string
	// ClientCerts are the decision API's clients known by a TLS client
	// certificate, by the identity it must carry (api.Config.ClientCerts).
	ClientCerts map[string]api.CertClient
	// LimitSetters are the client tokens that may send limits with their
	// acquires (api.Config.LimitSetters).
	LimitSetters map[string]bool
	// Ready reports readiness for /readyz. Nil means always ready.
	Ready func() bool
	// Registry receives the metrics; Gatherer serves /metrics. Nil
	// registers nothing and serves no /metrics.
	Registry prometheus.Registerer
	Gatherer prometheus.Gatherer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// DebtInterval is how often fallback debts are charged to their keys'
	// owners. Zero means fallback.DefaultDebtInterval (100ms).
	DebtInterval time.Duration
	// Logger receives the logs. Nil discards them.
	Logger *slog.Logger
	// Tracer, if not nil, makes the spans of the decision API's and the
	// proxy's requests and of their decisions (trace.go); nil is tracing
	// off.
	Tracer *tracing.Tracer
	// Proxy configures the LLM proxy (POST /v1/chat/completions and
	// /v1/messages). The zero value answers 401 to every key.
	Proxy proxy.Config
	// MaxPromptBytes bounds the bytes of a prompt the node counts with
	// Counter: the decision API answers a larger one 413, the proxy
	// estimates it (api.Config.MaxPromptBytes). Zero means
	// router.DefaultMaxPromptBytes (256 KiB).
	MaxPromptBytes int
	// MaxFallbackKeys bounds the keys the fallback remembers
	// (router.Config.MaxFallbackKeys). Zero means fallback.DefaultMaxKeys.
	MaxFallbackKeys int
}

// Door is a node's front door. Safe for concurrent use.
type Door struct {
	router  *router.Router
	api     *api.Server
	proxy   *proxy.Server
	ops     *admin.Server
	handler http.Handler
}

// New returns the front door of the node whose cluster view is cluster.
func New(cluster router.Cluster, cfg Config) (*Door, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r, err := router.New(cluster, router.Config{
		Limits: cfg.Limits, PoolFor: cfg.PoolFor, Chain: cfg.Chain, Price: cfg.Price, Budgeted: cfg.Budgeted, Weight: cfg.Weight,
		Fallback: cfg.Fallback, ForwardTimeout: cfg.ForwardTimeout, ForwardMaxWait: cfg.ForwardMaxWait,
		Registry: cfg.Registry, Now: cfg.Now, DebtInterval: cfg.DebtInterval, Logger: cfg.Logger,
		MaxFallbackKeys: cfg.MaxFallbackKeys, Tracer: cfg.Tracer,
	})
	if err != nil {
		return nil, err
	}
	decisions := api.New(r, api.Config{Counter: cfg.Counter, MaxPromptBytes: cfg.MaxPromptBytes,
		ClusterSecrets: cfg.ClusterSecrets, Clients: cfg.Clients, ClientCerts: cfg.ClientCerts, LimitSetters: cfg.LimitSetters, Now: cfg.Now})
	llm := proxy.New(r, cfg.Proxy, cfg.Counter, cfg.MaxPromptBytes, cfg.Logger)
	ops := admin.New(cluster, r.Counters(), admin.Config{Token: cfg.AdminToken, Ready: cfg.Ready, Gatherer: cfg.Gatherer, Now: cfg.Now,
		Levels: r.Levels, Source: cfg.LimitsSource, Limits: cfg.Limits,
		Activity: r.Activity(), Group: r.GroupLevel, Upstream: func() admin.UpstreamStats { return upstreamStats(llm.Upstream()) }})
	ops.Start() // the console's per-second history; stopped by Close
	mux := http.NewServeMux()
	decisions.Routes(mux) // /v1/acquire, /v1/complete, /v1/renew, /v1/batch, /v1/tenants/{tenant}
	llm.Routes(mux)       // /v1/chat/completions, /v1/messages
	ops.Routes(mux)       // /admin/*, /metrics, /healthz, /readyz
	mux.HandleFunc("/", notFound)
	return &Door{router: r, api: decisions, proxy: llm, ops: ops, handler: ops.Guard(mux)}, nil
}

// ServeHTTP implements http.Handler.
func (d *Door) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if t := d.router.Tracer(); t != nil {
		serveTraced(t, d.handler, w, req)
		return
	}
	d.handler.ServeHTTP(w, req)
}

// ServePlain is the fast path's http1.Handler: the decision API's calls
// and the LLM proxy's whole-answer requests, answered exactly as
// ServeHTTP would; any other request it declines (false) having changed
// nothing.
func (d *Door) ServePlain(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	if t := d.router.Tracer(); t != nil {
		return servePlainTraced(t, ctx, req, resp, d.servePlain)
	}
	return d.servePlain(ctx, req, resp)
}

// servePlain is ServePlain without its span.
func (d *Door) servePlain(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	return d.api.ServePlain(ctx, req, resp) || d.proxy.ServePlain(ctx, req, resp)
}

// ServeQuick is the fast path's http1 Quick handler, run on an event
// loop's thread: it takes what ServePlain takes when every key it touches
// is decided at this node at once, and declines everything else.
func (d *Door) ServeQuick(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	if t := d.router.Tracer(); t != nil {
		return servePlainTraced(t, ctx, req, resp, d.api.ServeQuick)
	}
	return d.api.ServeQuick(ctx, req, resp)
}

// SetClients replaces the decision API's clients (a config reload; see
// api.Server.SetClients).
func (d *Door) SetClients(tokens map[string][]string, certs map[string]api.CertClient, setters map[string]bool) {
	d.api.SetClients(tokens, certs, setters)
}

// Router is the router every front end of the node decides through (the
// gRPC rate limit service, package rls, is one).
func (d *Door) Router() *router.Router { return d.router }

// Close stops the background work: the router's (router.Router.Close),
// the proxy's (proxy.Server.Close) and the console's sampling
// (admin.Server.Close). It does not stop serving HTTP, and
// is safe to call more than once.
func (d *Door) Close() error {
	d.proxy.Close()
	d.ops.Close()
	return d.router.Close()
}

// Owe records what a member fenced off admitted after its last
// replication as debts (router.Router.Owe; node.FenceSink).
func (d *Door) Owe(key string, requests, tokens int64, at time.Time) {
	d.router.Owe(key, requests, tokens, at)
}

// PayDebts charges every debt still owed until none is left or ctx ends,
// and returns how many keys still owe (router.Router.PayDebts).
func (d *Door) PayDebts(ctx context.Context) (owing int) { return d.router.PayDebts(ctx) }

// notFound answers a path no endpoint serves: a 404 in the decision API's
// error shape.
func notFound(w http.ResponseWriter, req *http.Request) {
	w.Header()["Content-Type"] = []string{"application/json"}
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "no such endpoint: " + req.URL.Path})
}

// upstreamStats is the proxy's upstream counts as the admin console takes
// them.
func upstreamStats(u proxy.UpstreamStats) admin.UpstreamStats {
	return admin.UpstreamStats{Calls: u.Calls, Unreachable: u.Unreachable, Timeouts: u.Timeouts, Canceled: u.Canceled,
		Status4xx: u.Status4xx, Status429: u.Status429, Status5xx: u.Status5xx,
		LatencyBoundsMS: proxy.UpstreamLatencyBoundsMS[:], LatencyMS: u.LatencyMS[:], SumMS: u.SumMS}
}
