package admin

import (
	"cmp"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// The admin console and the JSON it polls:
//
//	GET /admin/ui       one self-contained HTML page (ui.html and ui.js: inline CSS and JS, no build step)
//	GET /admin/cluster  the ring (every partition's owner) and every member's /admin/stats,
//	                    gathered by this node: the page talks to one node only, no CORS
//	GET /admin/stats    this node's counters and the tenants it owns nearest their limits
//
// All three are guarded like every /admin endpoint: with admin_token set,
// "Authorization: Bearer <admin_token>" is required. A browser cannot send
// that header when it opens a page, so /admin/ui alone also takes the token
// as ?token=<admin_token>; the page's script then sends it as the header on
// its own requests. /admin/cluster asks the other members with this node's
// own admin_token: the members of a cluster share one.

// The page is ui.html with ui.js as its one inline script (so that the
// CSP can allow it by hash and no second request, which a browser would
// send without the token, is needed).
var (
	//go:embed ui.html
	uiHTML string
	//go:embed ui.js
	uiJS   string
	uiPage = []byte(strings.Replace(uiHTML, "<script></script>", "<script>\n"+uiJS+"</script>", 1))
)

// uiCSP allows the page's one inline script and one inline style (by hash),
// requests to its own origin, and nothing else.
var uiCSP = "default-src 'none'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"script-src " + inlineHash(uiPage, "script") + "; style-src " + inlineHash(uiPage, "style")

// inlineHash is the CSP source of the contents of page's first <tag>
// element; 'none' if it has none.
func inlineHash(page []byte, tag string) string {
	s := string(page)
	open := strings.Index(s, "<"+tag+">")
	if open < 0 {
		return "'none'"
	}
	body := s[open+len(tag)+2:]
	end := strings.Index(body, "</"+tag+">")
	if end < 0 {
		return "'none'"
	}
	sum := sha256.Sum256([]byte(body[:end]))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// Bounds of the ?n= of /admin/stats and /admin/cluster: how many tenants.
const (
	defaultNearest = 10
	maxNearest     = 1000
)

// statsTimeout bounds /admin/cluster's request to each member.
const statsTimeout = 1500 * time.Millisecond

// statsClient asks the other members for their /admin/stats. It keeps no
// idle connections: the page polls about once a second, and nothing lingers
// between polls.
var statsClient = &http.Client{
	Timeout:   statsTimeout,
	Transport: &http.Transport{DisableKeepAlives: true, ResponseHeaderTimeout: statsTimeout},
}

func (a *Server) uiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/admin/ui", get(a.adminUI))
	mux.HandleFunc("/admin/stats", get(a.adminStats))
	mux.HandleFunc("/admin/cluster", get(a.adminCluster))
}

func (a *Server) adminUI(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer") // the URL may hold the token
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(uiPage)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(uiPage)
}

// countsJSON are counters split by outcome.
type countsJSON struct {
	Allowed int64 `json:"allowed"`
	Refused int64 `json:"refused"`
}

// callsJSON counts the calls this node's front door made to keys' owners,
// by where they were decided.
type callsJSON struct {
	Local     int64 `json:"local"`     // this node owned the key
	Forwarded int64 `json:"forwarded"` // another member owned it and answered
	Failed    int64 `json:"failed"`    // the owner could not be reached (then the fallback decided)
}

// dimJSON is one dimension of "limits".
type dimJSON struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Overdraft int64 `json:"overdraft,omitempty"`
	ResetMS   int64 `json:"reset_ms"`
}

// limitsJSON is a key's "limits" object, as the decision API writes it:
// one dimJSON per dimension.
type limitsJSON struct {
	Requests    dimJSON     `json:"requests"`
	Tokens      dimJSON     `json:"tokens"`
	Concurrency dimJSON     `json:"concurrency"`
	Budget      *budgetJSON `json:"budget,omitempty"`
}

// budgetJSON is a key's spend in its period, as the decision API writes
// it: exact USD (limiter.USD).
type budgetJSON struct {
	LimitUSD     string `json:"limit_usd"`
	SpentUSD     string `json:"spent_usd"`
	HeldUSD      string `json:"held_usd"`
	RemainingUSD string `json:"remaining_usd"`
	OverdraftUSD string `json:"overdraft_usd,omitempty"`
	ResetMS      int64  `json:"reset_ms"`
}

func limitsOf(s limiter.Status) limitsJSON {
	dim := func(d limiter.DimStatus) dimJSON {
		reset := int64(0)
		if d.Reset > 0 {
			reset = int64((d.Reset + time.Millisecond - 1) / time.Millisecond)
		}
		return dimJSON{Limit: d.Limit, Remaining: d.Remaining, Overdraft: d.Overdraft, ResetMS: reset}
	}
	l := limitsJSON{Requests: dim(s.Requests), Tokens: dim(s.Tokens), Concurrency: dim(s.Concurrency)}
	if sp := s.Spend; sp.Limit > 0 {
		l.Budget = &budgetJSON{LimitUSD: limiter.USD(sp.Limit), SpentUSD: limiter.USD(sp.Spent), HeldUSD: limiter.USD(sp.Held),
			RemainingUSD: limiter.USD(sp.Remaining), ResetMS: dim(sp.DimStatus).ResetMS}
		if sp.Overdraft > 0 {
			l.Budget.OverdraftUSD = limiter.USD(sp.Overdraft)
		}
	}
	return l
}

// tenantJSON is a tenant near its limits.
type tenantJSON struct {
	Tenant string     `json:"tenant"`
	Owner  string     `json:"owner,omitempty"`
	Used   float64    `json:"used"` // the largest fraction used of a limited dimension; 1 is at a limit, above 1 overdrawn
	Limits limitsJSON `json:"limits"`
}

// statsJSON is GET /admin/stats: this node's counters since it started
// (the page turns successive ones into rates) and the tenants it owns
// nearest their limits, nearest first.
type statsJSON struct {
	Node      string       `json:"node"`
	NowMS     int64        `json:"now_ms"`    // this node's clock when it answered
	Decisions countsJSON   `json:"decisions"` // acquires answered here (tokenring_decisions_total)
	Calls     callsJSON    `json:"calls"`     // calls to owners, every op (tokenring_call_seconds_count)
	Fallbacks countsJSON   `json:"fallbacks"` // decided by the fallback policy (tokenring_fallback_decisions_total)
	Keys      int          `json:"keys"`      // keys whose state this node holds
	Tenants   []tenantJSON `json:"tenants"`
	Health    healthJSON   `json:"health"`
	// Series is the last seriesPoints seconds, one point a second, oldest
	// first (empty until the node's Server.Start).
	Series []pointJSON `json:"series"`
	// Upstream is the proxy's upstream calls (nil without a proxy).
	Upstream *UpstreamStats `json:"upstream,omitempty"`
	// Pools are the pools this node holds, nearest their limits first
	// (at most maxPools); PoolTenants each pool's tenants this node
	// admitted most through it (router.Activity.PoolTenants).
	Pools       []poolJSON                     `json:"pools"`
	PoolTenants map[string][]router.PoolTenant `json:"pool_tenants"`
}

// nearestLister is implemented by a Cluster that can list the keys it
// holds (*node.Node).
type nearestLister interface {
	Nearest(prefix string, k int) []node.KeyStatus
	Keys() int
}

// nearestParam is the ?n= of a request: how many tenants to list.
func nearestParam(req *http.Request) (int, error) {
	s := req.URL.Query().Get("n")
	if s == "" {
		return defaultNearest, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxNearest {
		return 0, fmt.Errorf("n: want 0 to %d, got %q", maxNearest, s)
	}
	return n, nil
}

func (a *Server) adminStats(w http.ResponseWriter, req *http.Request) {
	n, err := nearestParam(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, a.stats(n))
}

// stats is this node's statsJSON with up to n tenants.
func (a *Server) stats(n int) statsJSON {
	s := statsJSON{Node: a.cluster.Name(), NowMS: a.cfg.Now().UnixMilli(), Tenants: []tenantJSON{},
		Health: a.health(), Series: a.points(), Pools: []poolJSON{}, PoolTenants: map[string][]router.PoolTenant{}}
	if a.cfg.Upstream != nil {
		u := a.cfg.Upstream()
		s.Upstream = &u
	}
	if a.cfg.Activity != nil {
		s.PoolTenants = a.cfg.Activity.PoolTenants()
	}
	d := sumBy(a.counters.Decisions, "result")
	s.Decisions = countsJSON{Allowed: d["allowed"], Refused: d["refused"]}
	f := sumBy(a.counters.Fallbacks, "result")
	s.Fallbacks = countsJSON{Allowed: f["allowed"], Refused: f["refused"]}
	c := sumBy(a.counters.Calls, "where")
	s.Calls = callsJSON{Local: c["local"], Forwarded: c["forwarded"], Failed: c["failed"]}
	s.Tenants = a.nearest(n)
	if l, ok := a.cluster.(nearestLister); ok {
		s.Keys = l.Keys()
		for _, k := range l.Nearest(router.PoolKey(""), maxPools) {
			lim := limitsOf(k.Status)
			s.Pools = append(s.Pools, poolJSON{Pool: strings.TrimPrefix(k.Key, router.PoolKey("")), Owner: s.Node,
				Used: k.Used, Limits: &lim})
		}
	}
	return s
}

// nearest is up to n of the tenants this node holds, nearest their
// limits first.
func (a *Server) nearest(n int) []tenantJSON {
	out := []tenantJSON{}
	l, ok := a.cluster.(nearestLister)
	if !ok {
		return out
	}
	for _, k := range l.Nearest(router.TenantKey(""), n) {
		out = append(out, tenantJSON{Tenant: strings.TrimPrefix(k.Key, router.TenantKey("")), Owner: a.cluster.Name(),
			Used: k.Used, Limits: limitsOf(k.Status)})
	}
	return out
}

// sumBy sums c's counters (a histogram's counts) by the value of label.
func sumBy(c prometheus.Collector, label string) map[string]int64 {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	sums := map[string]int64{}
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		var v int64
		switch {
		case pb.Counter != nil:
			v = int64(pb.Counter.GetValue())
		case pb.Histogram != nil:
			v = int64(pb.Histogram.GetSampleCount())
		}
		for _, lp := range pb.GetLabel() {
			if lp.GetName() == label {
				sums[lp.GetValue()] += v
			}
		}
	}
	return sums
}

// clusterMemberJSON is one member in GET /admin/cluster: /admin/ring's
// member, and its /admin/stats or why they could not be had.
type clusterMemberJSON struct {
	memberJSON
	Stats *statsJSON `json:"stats,omitempty"`
	Error string     `json:"error,omitempty"`
}

// clusterJSON is GET /admin/cluster.
type clusterJSON struct {
	Self           string              `json:"self"`
	Version        string              `json:"version"`
	PartitionCount int                 `json:"partition_count"`
	Owners         []int               `json:"owners"` // partition → index in members
	Members        []clusterMemberJSON `json:"members"`
	Tenants        []tenantJSON        `json:"tenants"` // every member's, nearest their limits first, at most n
	// Pools, Series and Upstream are the members' (that answered) merged:
	// mergePools, mergeSeries, and the upstream calls summed.
	Pools    []poolJSON    `json:"pools"`
	Series   []pointJSON   `json:"series"`
	Upstream UpstreamStats `json:"upstream"`
}

func (a *Server) adminCluster(w http.ResponseWriter, req *http.Request) {
	n, err := nearestParam(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rg := a.cluster.Ring()
	if rg == nil {
		writeError(w, http.StatusServiceUnavailable, "no ring yet: the node has not joined")
		return
	}
	out := clusterJSON{Self: a.cluster.Name(), Version: rg.Version(), PartitionCount: rg.PartitionCount(), Tenants: []tenantJSON{}}
	counts := rg.Partitions()
	index := map[string]int{}
	for i, m := range rg.Members() {
		index[m.Name] = i
		out.Members = append(out.Members, clusterMemberJSON{memberJSON: memberJSON{
			Name: m.Name, HTTP: m.HTTP, Peer: m.Peer, Gossip: m.Gossip, Partitions: counts[m.Name]}})
	}
	out.Owners = make([]int, rg.PartitionCount())
	for p := range out.Owners {
		out.Owners[p] = -1
		if m, ok := rg.PartitionOwner(p); ok {
			out.Owners[p] = index[m.Name]
		}
	}
	a.gatherStats(req.Context(), out.Members, n)
	stats := make([]*statsJSON, 0, len(out.Members))
	for _, m := range out.Members {
		if m.Stats != nil {
			out.Tenants = append(out.Tenants, m.Stats.Tenants...)
			if m.Stats.Upstream != nil {
				out.Upstream.add(*m.Stats.Upstream)
			}
		}
		stats = append(stats, m.Stats)
	}
	out.Pools, out.Series = mergePools(stats), mergeSeries(stats)
	slices.SortStableFunc(out.Tenants, func(a, b tenantJSON) int {
		if c := cmp.Compare(b.Used, a.Used); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	out.Tenants = out.Tenants[:min(n, len(out.Tenants))]
	writeJSON(w, http.StatusOK, out)
}

// gatherStats fills in every member's stats, this node's from here and the
// others' from their /admin/stats, all at once.
func (a *Server) gatherStats(ctx context.Context, members []clusterMemberJSON, n int) {
	var wg sync.WaitGroup
	for i := range members {
		m := &members[i]
		if m.Name == a.cluster.Name() {
			s := a.stats(n)
			m.Stats = &s
			continue
		}
		wg.Go(func() {
			s, err := a.memberStats(ctx, m.HTTP, n)
			if err != nil {
				m.Error = err.Error()
				return
			}
			m.Stats = s
		})
	}
	wg.Wait()
}

// memberStats GETs /admin/stats from the member at addr.
func (a *Server) memberStats(ctx context.Context, addr string, n int) (*statsJSON, error) {
	if addr == "" {
		return nil, fmt.Errorf("no HTTP address advertised")
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/admin/stats?n="+strconv.Itoa(n), nil)
	if err != nil {
		return nil, err
	}
	if a.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	}
	resp, err := statsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/stats: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var s statsJSON
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("GET /admin/stats: %w", err)
	}
	return &s, nil
}
