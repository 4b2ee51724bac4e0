package test

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The console's JSON, as TestAdminUI reads it to check the page: the same
// views as console_test.go's, built from the API's numbers.

// consoleAPI reads the JSON the console reads, from the node serving it.
type consoleAPI struct {
	t      *testing.T
	client *http.Client
	url    string
}

func (a consoleAPI) get(path string, v any) {
	a.t.Helper()
	if err := GetJSONWith(a.client, a.url+path, v); err != nil {
		a.t.Fatalf("GET %s: %v", path, err)
	}
}

// dimJSON, limitsJSON: a key's "limits" object, as admin writes it.
type dimJSON struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	Overdraft int64 `json:"overdraft"`
}

type limitsJSON struct {
	Requests    dimJSON `json:"requests"`
	Tokens      dimJSON `json:"tokens"`
	Concurrency dimJSON `json:"concurrency"`
	Budget      *struct {
		LimitUSD string `json:"limit_usd"`
		SpentUSD string `json:"spent_usd"`
		HeldUSD  string `json:"held_usd"`
	} `json:"budget"`
}

// budget is what the page's data-budget says of l's budget.
func (l limitsJSON) budget() string {
	if l.Budget == nil {
		return ""
	}
	return l.Budget.SpentUSD + "+" + l.Budget.HeldUSD + "/" + l.Budget.LimitUSD
}

type refusedJSON struct {
	Refused  int64            `json:"refused"`
	ByReason map[string]int64 `json:"by_reason"`
}

// used is what d counts; "used / limit" is how the page writes it.
func (d dimJSON) used() int64 {
	if d.Limit <= 0 {
		return 0
	}
	return d.Limit - d.Remaining + d.Overdraft
}

func (d dimJSON) usedText() string {
	if d.Limit <= 0 {
		return "∞"
	}
	return comma(d.used()) + " / " + comma(d.Limit)
}

// comma writes n as the page does (toLocaleString('en-US')).
func comma(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// tenant is /admin/tenant?q as the search panel shows it.
func (a consoleAPI) tenant(q string) panelView {
	a.t.Helper()
	var c struct {
		Levels []struct {
			Level  string     `json:"level"`
			Owner  string     `json:"owner"`
			Used   float64    `json:"used"`
			Limits limitsJSON `json:"limits"`
		} `json:"levels"`
		Refused  refusedJSON `json:"refused"`
		Refusals []struct {
			refusalView
			Tenant string `json:"tenant"`
		} `json:"refusals"`
		History struct {
			Buckets []struct {
				Requests int64 `json:"requests"`
			} `json:"buckets"`
		} `json:"history"`
	}
	a.get("/admin/tenant?"+q, &c)
	p := panelView{Levels: []levelView{}, Refused: c.Refused.Refused, RefusedText: comma(c.Refused.Refused), Reasons: c.Refused.ByReason,
		Refusals: []refusalView{}, WindowBuckets: int64(len(c.History.Buckets))}
	for _, l := range c.Levels {
		s := l.Limits
		inFlight := int64(0)
		if s.Concurrency.Limit > 0 {
			inFlight = s.Concurrency.Limit - s.Concurrency.Remaining
		}
		p.Levels = append(p.Levels, levelView{Level: l.Level, Owner: l.Owner, Used: l.Used, RequestsUsed: s.Requests.used(),
			RequestsLimit: s.Requests.Limit, TokensUsed: s.Tokens.used(), TokensLimit: s.Tokens.Limit, InFlight: inFlight,
			Overdraft: s.Tokens.Overdraft, Text: []string{s.Requests.usedText(), s.Tokens.usedText()}, Budget: s.budget()})
	}
	for _, r := range c.Refusals {
		p.Refusals = append(p.Refusals, r.refusalView)
	}
	for _, b := range c.History.Buckets {
		p.WindowRequests += b.Requests
	}
	return p
}

// clusterJSON is the part of /admin/cluster the checks read.
type clusterJSON struct {
	Members []struct {
		Name  string `json:"name"`
		Stats *struct {
			Keys      int64 `json:"keys"`
			Decisions struct {
				Allowed int64 `json:"allowed"`
				Refused int64 `json:"refused"`
			} `json:"decisions"`
			Fallbacks struct {
				Allowed int64 `json:"allowed"`
				Refused int64 `json:"refused"`
			} `json:"fallbacks"`
			Health struct {
				Ready      bool   `json:"ready"`
				Mandated   bool   `json:"mandated"`
				Fenced     bool   `json:"fenced"`
				LimitsHash string `json:"limits_hash"`
				Debts      struct {
					Outstanding int64 `json:"outstanding"`
				} `json:"debts"`
			} `json:"health"`
		} `json:"stats"`
	} `json:"members"`
	Pools  []poolView `json:"pools"`
	Series []struct {
		Allowed int64 `json:"allowed"`
		Refused int64 `json:"refused"`
	} `json:"series"`
	Upstream struct {
		Calls       int64 `json:"calls"`
		Unreachable int64 `json:"unreachable"`
		Timeouts    int64 `json:"timeouts"`
		Canceled    int64 `json:"canceled"`
		Status4xx   int64 `json:"status_4xx"`
		Status429   int64 `json:"status_429"`
		Status5xx   int64 `json:"status_5xx"`
	} `json:"upstream"`
}

func (a consoleAPI) cluster() clusterJSON {
	a.t.Helper()
	var c clusterJSON
	a.get("/admin/cluster?n=0", &c)
	return c
}

func (a consoleAPI) members() []memberView {
	out := []memberView{}
	for _, m := range a.cluster().Members {
		v := memberView{Name: m.Name, Down: m.Stats == nil}
		if s := m.Stats; s != nil {
			h := s.Health
			v.Ready, v.Mandated, v.Fenced, v.LimitsHash = h.Ready, h.Mandated, h.Fenced, h.LimitsHash
			v.Fallbacks, v.Debts, v.Keys = s.Fallbacks.Allowed+s.Fallbacks.Refused, h.Debts.Outstanding, s.Keys
		}
		out = append(out, v)
	}
	return out
}

func (a consoleAPI) pools() []poolView {
	out := []poolView{}
	for _, p := range a.cluster().Pools {
		if p.Top == nil {
			p.Top = []poolTopView{}
		}
		out = append(out, p)
	}
	return out
}

func (a consoleAPI) upstream() upstreamView {
	u := a.cluster().Upstream
	kinds := map[string]int64{"unreachable": u.Unreachable, "timeouts": u.Timeouts, "canceled": u.Canceled,
		"4xx": u.Status4xx, "429": u.Status429, "5xx": u.Status5xx}
	var errs int64
	for _, n := range kinds {
		errs += n
	}
	return upstreamView{Calls: u.Calls, Errors: errs, CallsText: comma(u.Calls), Kinds: kinds}
}

func (a consoleAPI) history() historyView {
	var h historyView
	for _, p := range a.cluster().Series {
		h.Allowed += p.Allowed
		h.Refused += p.Refused
	}
	return h
}

// decisions are the members' decision counters (tokenring_decisions_total)
// summed: what the history's points add up to while the history is
// shorter than its 120 s.
func (a consoleAPI) decisions() historyView {
	var h historyView
	for _, m := range a.cluster().Members {
		if m.Stats != nil {
			h.Allowed += m.Stats.Decisions.Allowed
			h.Refused += m.Stats.Decisions.Refused
		}
	}
	return h
}

// tenants is a page of 20 rows of /admin/tenants.
func (a consoleAPI) tenants(sort string, offset int) tenantsView {
	a.t.Helper()
	var p struct {
		Sort   string `json:"sort"`
		Offset int    `json:"offset"`
		Rows   []struct {
			Tenant  string      `json:"tenant"`
			Owner   string      `json:"owner"`
			Used    float64     `json:"used"`
			Refused refusedJSON `json:"refused"`
		} `json:"rows"`
	}
	a.get(fmt.Sprintf("/admin/tenants?sort=%s&offset=%d&limit=20", sort, offset), &p)
	v := tenantsView{Sort: p.Sort, Offset: p.Offset, Rows: []tenantRowView{}}
	for _, r := range p.Rows {
		v.Rows = append(v.Rows, tenantRowView{Tenant: r.Tenant, Owner: r.Owner, Used: r.Used, Refused: r.Refused.Refused,
			Reasons: reasonsText(r.Refused.ByReason)})
	}
	return v
}

// reasonsText writes a tenant's refusals by reason as the page does:
// "requests 2, tokens 1", by reason.
func reasonsText(by map[string]int64) string {
	var parts []string
	for _, k := range []string{"budget", "concurrency", "max_keys", "queue_full", "requests", "tokens"} {
		if n, ok := by[k]; ok {
			parts = append(parts, k+" "+comma(n))
		}
	}
	return strings.Join(parts, ", ")
}

// checkAcme: acme's panel shows its two levels, its three requests
// counted at both, the three refusals (the group's tokens, at n1; its own
// requests, at n2 and n3, the newest) and its window holding its three
// requests.
func checkAcme(t *testing.T, page, api panelView) {
	t.Helper()
	if len(page.Levels) != 2 || page.Levels[0].Level != "tenant:acme" || page.Levels[1].Level != "group:research" {
		t.Fatalf("acme's levels: %+v", page.Levels)
	}
	if l := page.Levels[0]; l.RequestsUsed != 3 || l.RequestsLimit != 3 || l.Used != 1 || l.Text[0] != "3 / 3" {
		t.Fatalf("acme's own level: %+v", l)
	}
	if l := page.Levels[1]; l.RequestsUsed != 3 || l.RequestsLimit != 1000 || l.TokensLimit != 5000 || l.Text[0] != "3 / 1,000" {
		t.Fatalf("research's level: %+v", l)
	}
	if page.Refused != 3 || page.RefusedText != "3" || !reflect.DeepEqual(page.Reasons, map[string]int64{"requests": 2, "tokens": 1}) {
		t.Fatalf("acme's refusals: %d (%q) %v", page.Refused, page.RefusedText, page.Reasons)
	}
	r := page.Refusals
	if len(r) != 3 || r[2] != (refusalView{AtMS: r[2].AtMS, Node: "n1", Level: "group:research", Reason: "tokens"}) ||
		r[0].Level != "tenant:acme" || r[0].Reason != "requests" || r[1].Level != "tenant:acme" || r[1].Reason != "requests" ||
		r[0].Node+r[1].Node != "n3n2" && r[0].Node+r[1].Node != "n2n3" {
		t.Fatalf("acme's refusals: %+v", r)
	}
	if page.WindowRequests != 3 || page.WindowBuckets < 1 {
		t.Fatalf("acme's window: %d requests in %d buckets", page.WindowRequests, page.WindowBuckets)
	}
	if !reflect.DeepEqual(page, api) {
		t.Logf("acme's panel differs from the API's while the load ran; compared again below:\n%+v\n%+v", page, api)
	}
}

// checkResearch: the group's panel shows its one refusal, at n1, tokens.
func checkResearch(t *testing.T, page panelView) {
	t.Helper()
	if len(page.Levels) != 1 || page.Levels[0].Level != "group:research" || page.Refused != 1 ||
		len(page.Refusals) != 1 || page.Refusals[0].Node != "n1" || page.Refusals[0].Reason != "tokens" {
		t.Fatalf("research's panel: %+v", page)
	}
}

// checkPools: the pool's top tenants are pool-a (3) and pool-b (2); the
// proxy sent 5 calls upstream, one answered 500.
func checkPools(t *testing.T, pools []poolView, up upstreamView) {
	t.Helper()
	want := []poolTopView{{"pool-a", 3}, {"pool-b", 2}}
	if len(pools) != 1 || pools[0].Pool != "gpt-4o-mini" || !reflect.DeepEqual(pools[0].Top, want) {
		t.Fatalf("pools %+v, want gpt-4o-mini with %v", pools, want)
	}
	if up.Calls != 5 || up.Errors != 1 || up.Kinds["5xx"] != 1 {
		t.Fatalf("upstream %+v, want 5 calls, one 5xx", up)
	}
}

// checkRefusedPage: the most refused tenants are acme (3), then every
// load tenant (2 each) by name.
func checkRefusedPage(t *testing.T, p tenantsView, offset int) {
	t.Helper()
	if len(p.Rows) != 20 || p.Sort != "refused" || p.Offset != offset {
		t.Fatalf("page at %d: %+v", offset, p)
	}
	for i, r := range p.Rows {
		want := tenantRowView{Tenant: fmt.Sprintf("load-%03d", offset+i-1), Refused: uiSends - uiAdmits,
			Reasons: "requests " + strconv.Itoa(uiSends-uiAdmits), Used: 1, Owner: r.Owner}
		if offset+i == 0 {
			want = tenantRowView{Tenant: "acme", Refused: 3, Reasons: "requests 2, tokens 1", Used: 1, Owner: r.Owner}
		}
		if r != want || r.Owner == "" {
			t.Fatalf("row %d: %+v, want %+v", offset+i, r, want)
		}
	}
}
