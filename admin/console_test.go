package admin

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/router"
)

// getJSON GETs url with auth and decodes its 200 answer into v.
func getJSON(t *testing.T, url, auth string, v any) {
	t.Helper()
	resp, body := getRaw(t, url, auth)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// A tenant searched at n1 and owned by n2, refused at both: its level with
// the owner's exact counts, every refusal either member recorded (newest
// first, with the node, level and reason), their sum by reason, and its
// window at n2 bucket by bucket adding up to what it counts.
func TestConsoleTenantSearch(t *testing.T) {
	ms, rg := startUICluster(t, "s3cret", []string{"n1", "n2"})
	const auth = "Bearer s3cret"
	x := tenantOwnedBy(t, rg, "n2")
	if got := acquireN(t, ms["n1"], x, 12); got != 10 { // 10 admitted, 2 refused at n1
		t.Fatalf("%d admitted, want 10", got)
	}
	if got := acquireN(t, ms["n2"], x, 1); got != 0 { // refused at n2
		t.Fatalf("%d admitted, want 0", got)
	}
	var c consoleTenantJSON
	getJSON(t, ms["n1"].srv.URL+"/admin/tenant?tenant="+x, auth, &c)
	if len(c.Levels) != 1 {
		t.Fatalf("levels %+v", c.Levels)
	}
	l := c.Levels[0]
	l.Limits.Requests.ResetMS, l.Limits.Tokens.ResetMS, l.Limits.Concurrency.ResetMS = 0, 0, 0
	want := consoleLevelJSON{Level: "tenant:" + x, Key: router.TenantKey(x), Owner: "n2", Used: 1, Limits: limitsJSON{
		Requests: dimJSON{Limit: 10}, Tokens: dimJSON{Limit: 10_000, Remaining: 8_500}, Concurrency: dimJSON{Limit: 100, Remaining: 90}}}
	if l != want {
		t.Fatalf("level\n got %+v\nwant %+v", l, want)
	}
	if c.Refused.Refused != 3 || !reflect.DeepEqual(c.Refused.ByReason, map[string]int64{"requests": 3}) || len(c.Errors) != 0 {
		t.Fatalf("refused %+v, errors %v", c.Refused, c.Errors)
	}
	nodes := []string{}
	for i, r := range c.Refusals {
		if r.Tenant != x || r.Level != "tenant:"+x || r.Reason != "requests" || r.RetryAfterMS <= 0 || (i > 0 && r.AtMS > c.Refusals[i-1].AtMS) {
			t.Fatalf("refusal %d: %+v", i, r)
		}
		nodes = append(nodes, r.Node)
	}
	if slices.Sort(nodes); !reflect.DeepEqual(nodes, []string{"n1", "n1", "n2"}) {
		t.Fatalf("refusals recorded at %v, want n1 twice and n2", nodes)
	}
	h := c.History
	var reqs, toks int64
	for _, b := range h.Buckets {
		reqs, toks = reqs+b.Requests, toks+b.Tokens
	}
	if h.Node != "n2" || !h.Held || h.Key != router.TenantKey(x) || h.WindowMS != time.Minute.Milliseconds() || reqs != 10 || toks != 1_500 {
		t.Fatalf("history %+v: %d requests, %d tokens; want n2's, 10 and 1500", h, reqs, toks)
	}
	// n2's own answer is the same search.
	var c2 consoleTenantJSON
	getJSON(t, ms["n2"].srv.URL+"/admin/tenant?tenant="+x, auth, &c2)
	if !reflect.DeepEqual(c2.Refusals, c.Refusals) || !reflect.DeepEqual(c2.Refused, c.Refused) || !reflect.DeepEqual(c2.History, c.History) {
		t.Fatalf("n2's answer differs:\n%+v\n%+v", c2, c)
	}
	for _, bad := range []string{"", "?tenant=", "?tenant=a&group=b", "?group=a%1Fb"} {
		if resp, body := getRaw(t, ms["n1"].srv.URL+"/admin/tenant"+bad, auth); resp.StatusCode != 400 {
			t.Fatalf("/admin/tenant%s: %d %s, want 400", bad, resp.StatusCode, body)
		}
	}
}

// The tenants' table by refusals and by use, a page at a time: 25 tenants
// spread over two members, tenant i refused i%5 times.
func TestConsoleTenantsPages(t *testing.T) {
	ms, _ := startUICluster(t, "", []string{"n1", "n2"})
	names := make([]string, 25)
	for i := range names {
		names[i] = fmt.Sprintf("t%02d", i)
		via := ms[[]string{"n1", "n2"}[i%2]]
		if got := acquireN(t, via, names[i], 10+i%5); got != 10 {
			t.Fatalf("%s: %d admitted", names[i], got)
		}
	}
	// By refusals: 4 refused first (t04, t09, ...), then 3, 2, 1; none
	// for t00, t05, ... (not listed); ties by name (all used 1).
	var byRefused []string
	for k := 4; k >= 1; k-- {
		for i := range names {
			if i%5 == k {
				byRefused = append(byRefused, names[i])
			}
		}
	}
	url := ms["n1"].srv.URL + "/admin/tenants"
	var p tenantsPageJSON
	getJSON(t, url+"?sort=refused&limit=8", "", &p)
	checkPage(t, p, byRefused[:8], true)
	for _, r := range p.Rows[:5] {
		if r.Refused.Refused != 4 || r.Refused.ByReason["requests"] != 4 || r.Limits == nil || r.Limits.Requests.Remaining != 0 || r.Owner == "" {
			t.Fatalf("row %+v", r)
		}
	}
	getJSON(t, url+"?sort=refused&offset=16&limit=8", "", &p)
	checkPage(t, p, byRefused[16:], false)
	// By use: every tenant at 1, so by name.
	getJSON(t, url+"?limit=10&offset=20", "", &p)
	checkPage(t, p, names[20:], false)
	if p.Sort != "used" || p.Rows[0].Refused.Refused != 0 || p.Rows[4].Refused.Refused != 4 {
		t.Fatalf("page %+v", p)
	}
	getJSON(t, url+"?limit=10", "", &p)
	checkPage(t, p, names[:10], true)
	for _, bad := range []string{"?sort=x", "?limit=0", "?limit=101", "?offset=-1", "?offset=990&limit=20"} {
		if resp, body := getRaw(t, url+bad, ""); resp.StatusCode != 400 {
			t.Fatalf("/admin/tenants%s: %d %s, want 400", bad, resp.StatusCode, body)
		}
	}
}

func checkPage(t *testing.T, p tenantsPageJSON, want []string, more bool) {
	t.Helper()
	var got []string
	for _, r := range p.Rows {
		got = append(got, r.Tenant)
	}
	if !reflect.DeepEqual(got, want) || p.More != more || len(p.Errors) != 0 {
		t.Fatalf("page %v more %v errors %v, want %v more %v", got, p.More, p.Errors, want, more)
	}
}

// The series: a point a second with what the counters grew by; the health:
// the registry's debt and fence counters.
func TestConsoleSeriesAndHealth(t *testing.T) {
	ms, _ := startUICluster(t, "", []string{"n1"})
	m := ms["n1"]
	reg := prometheus.NewRegistry()
	for name, v := range map[string]float64{"tokenring_fences_total": 2, "tokenring_fallback_debts_outstanding": 3,
		"tokenring_fallback_debts_recorded_total": 7, "tokenring_fallback_debts_repaid_total": 4, "tokenring_fallback_debts_expired_total": 1} {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name})
		g.Set(v)
		reg.MustRegister(g)
	}
	a := New(m.node, m.router.Counters(), Config{Gatherer: reg, Activity: m.router.Activity()})
	t0 := time.Unix(1_800_000_000, 0)
	a.sample(t0) // the base
	acquireN(t, m, "a", 12)
	a.sample(t0.Add(time.Second))
	a.sample(t0.Add(2 * time.Second))
	acquireN(t, m, "b", 3)
	a.sample(t0.Add(3 * time.Second))
	want := []pointJSON{{T: t0.Unix() + 1, Allowed: 10, Refused: 2}, {T: t0.Unix() + 2}, {T: t0.Unix() + 3, Allowed: 3}}
	if got := a.points(); !reflect.DeepEqual(got, want) {
		t.Fatalf("points %+v, want %+v", got, want)
	}
	for i := range seriesPoints + 5 {
		a.sample(t0.Add(time.Duration(4+i) * time.Second))
	}
	if got := a.points(); len(got) != seriesPoints || got[len(got)-1].T != t0.Unix()+seriesPoints+8 {
		t.Fatalf("%d points, last %+v", len(got), got[len(got)-1])
	}
	h := a.health()
	if h != (healthJSON{Ready: true, Mandated: true, Fences: 2, Debts: debtsJSON{Outstanding: 3, Recorded: 7, Repaid: 4, Expired: 1}}) {
		t.Fatalf("health %+v", h)
	}
	a.Start()
	a.Close()
	a.Close()
}

// The members' pools merge: the owner's state, and each tenant's
// admissions summed over the members, heaviest first.
func TestConsoleMergePools(t *testing.T) {
	lim := limitsJSON{Concurrency: dimJSON{Limit: 4, Remaining: 1}}
	s1 := &statsJSON{Pools: []poolJSON{{Pool: "gpt", Owner: "n1", Used: 0.75, Limits: &lim}},
		PoolTenants: map[string][]router.PoolTenant{"gpt": {{Tenant: "a", Admissions: 5}, {Tenant: "b", Admissions: 1}}},
		Series:      []pointJSON{{T: 10, Allowed: 1}, {T: 11, Refused: 2}}}
	s2 := &statsJSON{PoolTenants: map[string][]router.PoolTenant{"gpt": {{Tenant: "b", Admissions: 6}}, "claude": {{Tenant: "c", Admissions: 2}}},
		Series: []pointJSON{{T: 11, Allowed: 3, Fallbacks: 1}}}
	got := mergePools([]*statsJSON{s1, nil, s2})
	want := []poolJSON{
		{Pool: "claude", Top: []router.PoolTenant{{Tenant: "c", Admissions: 2}}},
		{Pool: "gpt", Owner: "n1", Used: 0.75, Limits: &lim, Top: []router.PoolTenant{{Tenant: "b", Admissions: 7}, {Tenant: "a", Admissions: 5}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pools\n got %+v\nwant %+v", got, want)
	}
	if got := mergeSeries([]*statsJSON{s1, s2}); !reflect.DeepEqual(got, []pointJSON{{T: 10, Allowed: 1}, {T: 11, Allowed: 3, Refused: 2, Fallbacks: 1}}) {
		t.Fatalf("series %+v", got)
	}
}
