package frontdoor

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/admin"
	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/router"
)

// Config configures a node's front door. Zero fields take the documented
// defaults.
type Config struct {
	// Limits gives the limits of a limiter key (router.TenantKey,
	// PoolKey, GroupKey, ModelKey). Required.
	Limits func(key string) limiter.Limits
	// PoolFor maps a model name to its pool, if any. Nil means no pools.
	PoolFor func(model string) (pool string, ok bool)
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
	// (router.Config.ClusterSecrets).
	ClusterSecrets [][]byte
	// Clients are the decision API's client tokens, each with the tenants
	// it may act for (router.AnyTenant for all). Empty leaves the API open.
	Clients map[string][]string
	// ClientCerts are the decision API's clients known by a TLS client
	// certificate, by the identity it must carry (router.Config.ClientCerts).
	ClientCerts map[string]router.CertClient
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
	// Proxy configures the LLM proxy (POST /v1/chat/completions and
	// /v1/messages). The zero value answers 401 to every key.
	Proxy proxy.Config
	// MaxPromptBytes bounds the bytes of a prompt the node counts with
	// Counter (router.Config.MaxPromptBytes). Zero means
	// router.DefaultMaxPromptBytes (256 KiB).
	MaxPromptBytes int
	// MaxFallbackKeys bounds the keys the fallback remembers
	// (router.Config.MaxFallbackKeys). Zero means fallback.DefaultMaxKeys.
	MaxFallbackKeys int
}

// Door is a node's front door. Safe for concurrent use.
type Door struct {
	router  *router.Router
	proxy   *proxy.Server
	handler http.Handler
}

// New returns the front door of the node whose cluster view is cluster.
func New(cluster router.Cluster, cfg Config) (*Door, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r, err := router.New(cluster, router.Config{
		Limits: cfg.Limits, PoolFor: cfg.PoolFor, Chain: cfg.Chain, Counter: cfg.Counter,
		Fallback: cfg.Fallback, ForwardTimeout: cfg.ForwardTimeout, ForwardMaxWait: cfg.ForwardMaxWait,
		ClusterSecrets: cfg.ClusterSecrets, Clients: cfg.Clients, ClientCerts: cfg.ClientCerts,
		Registry: cfg.Registry, Now: cfg.Now, DebtInterval: cfg.DebtInterval, Logger: cfg.Logger,
		MaxPromptBytes: cfg.MaxPromptBytes, MaxFallbackKeys: cfg.MaxFallbackKeys,
	})
	if err != nil {
		return nil, err
	}
	llm := proxy.New(r, cfg.Proxy, cfg.Counter, cfg.MaxPromptBytes, cfg.Logger)
	ops := admin.New(cluster, r.Counters(), admin.Config{Token: cfg.AdminToken, Ready: cfg.Ready, Gatherer: cfg.Gatherer, Now: cfg.Now})
	mux := http.NewServeMux()
	llm.Routes(mux) // /v1/chat/completions, /v1/messages
	ops.Routes(mux) // /admin/*, /metrics, /healthz, /readyz
	mux.Handle("/", r)
	return &Door{router: r, proxy: llm, handler: ops.Guard(mux)}, nil
}

// ServeHTTP implements http.Handler.
func (d *Door) ServeHTTP(w http.ResponseWriter, req *http.Request) { d.handler.ServeHTTP(w, req) }

// ServePlain is the fast path's http1.Handler: the decision API's calls
// and the LLM proxy's whole-answer requests, answered exactly as
// ServeHTTP would; any other request it declines (false) having changed
// nothing.
func (d *Door) ServePlain(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	return d.router.ServePlain(ctx, req, resp) || d.proxy.ServePlain(ctx, req, resp)
}

// ServeQuick is the fast path's http1 Quick handler, run on an event
// loop's thread: it takes what ServePlain takes when every key it touches
// is decided at this node at once, and declines everything else.
func (d *Door) ServeQuick(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	return d.router.ServeQuick(ctx, req, resp)
}

// Close stops the background work: the router's (router.Router.Close)
// and the proxy's (proxy.Server.Close). It does not stop serving HTTP, and
// is safe to call more than once.
func (d *Door) Close() error {
	d.proxy.Close()
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
