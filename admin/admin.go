package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// Config configures the operator's endpoints. Zero fields take the
// documented defaults.
type Config struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every path under /admin (and accepted as ?token= on /admin/ui).
	// Empty leaves /admin open. /metrics, /healthz and /readyz are open.
	Token string
	// Ready reports readiness for /readyz. Nil means always ready.
	Ready func() bool
	// Gatherer serves /metrics. Nil serves no /metrics.
	Gatherer prometheus.Gatherer
	// Now is the clock of /admin/stats. Nil means time.Now.
	Now func() time.Time
	// Levels gives the keys an acquire of tenant for model charges, with
	// each owner's status (router.Router.Levels), for /admin/limits. Nil
	// serves no /admin/limits.
	Levels func(ctx context.Context, tenant, model string) ([]router.Level, string, error)
	// Source names where a key's limits come from: the config entry
	// ("limits.tenants.acme", "limits.default", "pools.gpt-4o", ...).
	// Nil names none.
	Source func(key string) string
	// Limits are a key's limits in the config file; a key whose owner
	// applies others got them from a request ("request" in /admin/limits).
	// Nil: not compared.
	Limits func(key string) limiter.Limits
	// Activity is what this node's router recorded of the acquires it
	// answered (router.Router.Activity): the console's refusals and the
	// pools' top tenants. Nil: none.
	Activity *router.Activity
	// Group gives a group's key status at its owner (router.Router.
	// GroupLevel), for the console's search of a group. Nil: groups are
	// not searched.
	Group func(ctx context.Context, group string) (router.Level, bool, error)
	// Upstream gives the LLM proxy's upstream calls so far. Nil: none.
	Upstream func() UpstreamStats
}

// Server serves the operator's endpoints of one node: /admin (the ring,
// a key's owner, the status page and its JSON, pprof), /metrics, /healthz
// and /readyz.
type Server struct {
	cfg      Config
	cluster  router.Cluster
	counters router.Counters
	series   series // the last seriesPoints seconds of counts (health.go), sampled once Start is called
}

// New returns the operator's endpoints of the node whose cluster view is
// cluster and whose router counts its decisions in counters.
func New(cluster router.Cluster, counters router.Counters, cfg Config) *Server {
	if cfg.Ready == nil {
		cfg.Ready = func() bool { return true }
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Server{cfg: cfg, cluster: cluster, counters: counters}
}

// Routes serves the operator's endpoints on mux. Guard must wrap the
// handler mux is part of, so that every /admin path is guarded.
func (a *Server) Routes(mux *http.ServeMux) {
	mux.HandleFunc("/admin/ring", get(a.adminRing))
	mux.HandleFunc("/admin/owner", get(a.adminOwner))
	if a.cfg.Levels != nil {
		mux.HandleFunc("/admin/limits", get(a.adminLimits))
	}
	a.uiRoutes(mux)      // the status page and its JSON: /admin/ui, /admin/cluster, /admin/stats
	a.consoleRoutes(mux) // the console's searches and tables: /admin/tenant, /admin/tenants, /admin/refusals, /admin/history
	pprofRoutes(mux)
	mux.HandleFunc("/healthz", get(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
	mux.HandleFunc("/readyz", get(func(w http.ResponseWriter, _ *http.Request) {
		if !a.cfg.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}))
	if a.cfg.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(a.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
}

// Guard refuses every /admin/ path without the admin token (when one is
// configured), whether or not the path exists: new admin endpoints are
// guarded without having to remember it. /admin/ui also takes the token as
// ?token=, since a browser cannot send the header on navigation. /metrics,
// /healthz and /readyz stay open: they hold no tenant's data.
func (a *Server) Guard(next http.Handler) http.Handler {
	tok := a.cfg.Token
	if tok == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasPrefix(req.URL.Path, "/admin") {
			next.ServeHTTP(w, req)
			return
		}
		got, _ := bearer(req.Header)
		ok := sameToken(got, tok)
		if req.URL.Path == "/admin/ui" {
			ok = ok || sameToken(req.URL.Query().Get("token"), tok)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenring admin"`)
			writeError(w, http.StatusUnauthorized, "admin endpoints need Authorization: Bearer <admin_token>; in a browser open /admin/ui?token=<admin_token>")
			return
		}
		next.ServeHTTP(w, req)
	})
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(h http.Header) (string, bool) {
	a := h.Get("Authorization")
	if len(a) <= len("bearer ") || !strings.EqualFold(a[:len("bearer ")], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(a[len("bearer "):]), true
}

// sameToken compares two tokens in constant time: their SHA-256s, so that
// not even the length of the wanted token shows in the timing.
func sameToken(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// get serves h to GET and HEAD, and answers any other method 405.
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

// jsonContentType is the Content-Type of every JSON answer (shared: a
// header value is never modified in place).
var jsonContentType = []string{"application/json"}

// writeJSON writes v as the code answer, as the decision API writes its
// answers.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes the {"error": msg} answer with status code.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
