package admin

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// The console's searches and tables, beside the status page's JSON
// (ui.go). Two read this node alone, for the console node to gather:
//
//	GET /admin/refusals  this node's recent refusals (?tenant= or ?group= filters), and its refused tenants' counts
//	GET /admin/history   ?key=: the buckets of a key's window this node holds
//
// and two gather from every member, as /admin/cluster does:
//
//	GET /admin/tenant    ?tenant=NAME[&model=M] or ?group=NAME: every level with its owner's status,
//	                     the refusals every member recorded, the window's history at the owner
//	GET /admin/tenants   ?sort=used|refused&offset=&limit=: the tenants nearest their limits, or most refused, a page
//
// The refusals are router.Activity's: each member keeps its own, bounded
// (router.RecentRefusals, router.MaxRefusedTenants).

// Bounds of the console's answers.
const (
	refusalsShown = 50  // the refusals /admin/tenant lists, newest first
	maxPage       = 100 // the rows of a page of /admin/tenants
)

func (a *Server) consoleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/admin/refusals", get(a.adminRefusals))
	mux.HandleFunc("/admin/history", get(a.adminHistory))
	mux.HandleFunc("/admin/tenant", get(a.adminTenant))
	mux.HandleFunc("/admin/tenants", get(a.adminTenants))
}

// refusalJSON is one refused acquire, as the node that answered it
// recorded it.
type refusalJSON struct {
	AtMS         int64  `json:"at_ms"` // Unix ms
	Node         string `json:"node"`
	Tenant       string `json:"tenant"`
	Level        string `json:"level"`  // the level that refused: "tenant:acme", "group:research", "pool:gpt-4o"
	Reason       string `json:"reason"` // requests, tokens, concurrency, queue_full, ...
	Fallback     bool   `json:"fallback,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms"`
}

// refusedJSON counts a tenant's (or a group's) refusals: in total and by
// reason.
type refusedJSON struct {
	Tenant   string           `json:"tenant,omitempty"`
	Refused  int64            `json:"refused"`
	ByReason map[string]int64 `json:"by_reason"`
	LastMS   int64            `json:"last_ms,omitempty"` // the latest, Unix ms
}

func (r *refusedJSON) add(o refusedJSON) {
	r.Refused += o.Refused
	if r.ByReason == nil {
		r.ByReason = map[string]int64{}
	}
	for k, v := range o.ByReason {
		r.ByReason[k] += v
	}
	r.LastMS = max(r.LastMS, o.LastMS)
}

// nodeRefusalsJSON is GET /admin/refusals: one node's.
type nodeRefusalsJSON struct {
	Node    string        `json:"node"`
	Recent  []refusalJSON `json:"recent"`  // newest first
	Tenants []refusedJSON `json:"tenants"` // with ?tenant=: its counts (if any); else every tenant's, most refused first
}

// refusalFilter is what ?tenant= or ?group= of q keep (nil: all).
func refusalFilter(q url.Values) func(*router.Refusal) bool {
	switch {
	case q.Get("tenant") != "":
		t := q.Get("tenant")
		return func(r *router.Refusal) bool { return r.Tenant == t }
	case q.Get("group") != "":
		level := router.Side{Kind: router.KeyGroup, Name: q.Get("group")}.Label()
		return func(r *router.Refusal) bool { return r.Level == level }
	}
	return nil
}

// localRefusals is this node's nodeRefusalsJSON for q.
func (a *Server) localRefusals(q url.Values) nodeRefusalsJSON {
	out := nodeRefusalsJSON{Node: a.cluster.Name(), Recent: []refusalJSON{}, Tenants: []refusedJSON{}}
	act := a.cfg.Activity
	if act == nil {
		return out
	}
	for _, r := range act.Recent(refusalFilter(q), router.RecentRefusals) {
		out.Recent = append(out.Recent, refusalJSON{AtMS: r.At.UnixMilli(), Node: out.Node, Tenant: r.Tenant, Level: r.Level,
			Reason: r.Reason, Fallback: r.Fallback, RetryAfterMS: r.RetryAfter.Milliseconds()})
	}
	if q.Get("group") != "" {
		return out
	}
	tenant := q.Get("tenant")
	for _, t := range act.RefusedTenants() {
		if tenant == "" || t.Tenant == tenant {
			out.Tenants = append(out.Tenants, refusedJSON{Tenant: t.Tenant, Refused: t.Total, ByReason: t.ByReason, LastMS: t.Last.UnixMilli()})
		}
	}
	return out
}

func (a *Server) adminRefusals(w http.ResponseWriter, req *http.Request) {
	writeJSON(w, http.StatusOK, a.localRefusals(req.URL.Query()))
}

// gatherRefusals is every member's /admin/refusals for q, and the members
// that did not answer.
func (a *Server) gatherRefusals(ctx context.Context, q url.Values) ([]nodeRefusalsJSON, []string) {
	rg := a.cluster.Ring()
	n := 1
	if rg != nil {
		n = len(rg.Members())
	}
	got := make(chan nodeRefusalsJSON, n)
	errs := a.fanOut(ctx, func() { got <- a.localRefusals(q) }, func(ctx context.Context, m ring.Member) error {
		var r nodeRefusalsJSON
		if err := a.memberGet(ctx, m.HTTP, "/admin/refusals?"+q.Encode(), &r); err != nil {
			return err
		}
		got <- r
		return nil
	})
	close(got)
	var out []nodeRefusalsJSON
	for r := range got {
		out = append(out, r)
	}
	return out, errs
}

// bucketJSON is one bucket of a key's window.
type bucketJSON struct {
	TMS      int64 `json:"t_ms"` // the bucket's start, Unix ms
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
}

// historyJSON is GET /admin/history: what a key's window counts, bucket
// by bucket, at the member holding it.
type historyJSON struct {
	Key      string       `json:"key"`
	Node     string       `json:"node"`
	Held     bool         `json:"held"` // false: this node does not hold the key's state
	WindowMS int64        `json:"window_ms"`
	Buckets  []bucketJSON `json:"buckets"` // oldest first; only those that count something, within the window
}

// historian is a Cluster that shows a key's window bucket by bucket
// (*node.Node).
type historian interface {
	History(key string, fn func(at time.Time, requests, tokens int64)) (time.Duration, bool)
}

// localHistory is this node's historyJSON of key.
func (a *Server) localHistory(key string) historyJSON {
	out := historyJSON{Key: key, Node: a.cluster.Name(), Buckets: []bucketJSON{}}
	h, ok := a.cluster.(historian)
	if !ok {
		return out
	}
	var all []bucketJSON
	window, held := h.History(key, func(at time.Time, requests, tokens int64) {
		all = append(all, bucketJSON{TMS: at.UnixMilli(), Requests: requests, Tokens: tokens})
	})
	out.Held, out.WindowMS = held, window.Milliseconds()
	from := a.cfg.Now().Add(-window).UnixMilli()
	for _, b := range all {
		if b.TMS >= from {
			out.Buckets = append(out.Buckets, b)
		}
	}
	return out
}

func (a *Server) adminHistory(w http.ResponseWriter, req *http.Request) {
	key := req.URL.Query().Get("key")
	if key == "" {
		writeError(w, http.StatusBadRequest, "give ?key=KEY (t:tenant, g:group, p:pool)")
		return
	}
	writeJSON(w, http.StatusOK, a.localHistory(key))
}

// history asks owner (this node or another member) for key's history.
func (a *Server) history(ctx context.Context, owner, key string) (historyJSON, error) {
	if owner == a.cluster.Name() {
		return a.localHistory(key), nil
	}
	m, ok := a.member(owner)
	if !ok {
		return historyJSON{}, errNotMember(owner)
	}
	var h historyJSON
	err := a.memberGet(ctx, m.HTTP, "/admin/history?key="+url.QueryEscape(key), &h)
	return h, err
}

type errNotMember string

func (e errNotMember) Error() string { return string(e) + " is not in the ring" }

// usedOf is the largest fraction used of s's limited dimensions, as
// node.KeyStatus.Used: 1 at a limit, above 1 overdrawn.
func usedOf(s limiter.Status) float64 {
	u := 0.0
	for _, d := range []limiter.DimStatus{s.Requests, s.Tokens, s.Concurrency} {
		if d.Limit > 0 {
			u = max(u, float64(d.Limit-d.Remaining+d.Overdraft)/float64(d.Limit))
		}
	}
	return u
}

// pageParams are /admin/tenants's ?sort=, ?offset= and ?limit=.
func pageParams(q url.Values) (sort string, offset, limit int, err error) {
	sort, offset, limit = q.Get("sort"), 0, 20
	if sort == "" {
		sort = "used"
	}
	if sort != "used" && sort != "refused" {
		return "", 0, 0, errParam("sort: want used or refused, got " + strconv.Quote(sort))
	}
	if s := q.Get("offset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			return "", 0, 0, errParam("offset: want 0 or more, got " + strconv.Quote(s))
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxPage {
			return "", 0, 0, errParam("limit: want 1 to " + strconv.Itoa(maxPage) + ", got " + strconv.Quote(s))
		}
	}
	if offset+limit > maxNearest {
		return "", 0, 0, errParam("offset+limit: at most " + strconv.Itoa(maxNearest))
	}
	return sort, offset, limit, nil
}

type errParam string

func (e errParam) Error() string { return string(e) }

func itoa(n int) string { return strconv.Itoa(n) }
