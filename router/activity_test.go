package router

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// TestActivityRecordsRefusalsAndPoolAdmissions: acquires through a chain
// (tenant, group, pool) refused by each level are recorded with the tenant,
// the level and the reason, newest first; the tenant's counts add up by
// reason; admissions through the pool count for the tenant.
func TestActivityRecordsRefusalsAndPoolAdmissions(t *testing.T) {
	clock := newFakeClock()
	limits := func(key string) limiter.Limits {
		switch key {
		case TenantKey("acme"):
			return limiter.Limits{Requests: 3, Window: time.Minute}
		case GroupKey("research"):
			return limiter.Limits{Tokens: 1000, Window: time.Minute}
		case PoolKey("gpt"):
			return limiter.Limits{Concurrency: 2, Window: time.Minute}
		}
		return limiter.Limits{Window: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	chain := func(tenant, model string) (c Chain) {
		if tenant == "acme" {
			c.Groups[0], c.NGroups = "research", 1
		}
		return c
	}
	poolFor := func(model string) (string, bool) { return "gpt", model == "gpt-4o" }
	r, err := New(n, Config{Limits: limits, Chain: chain, PoolFor: poolFor, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	admit := func(model string, tokens int64) Verdict {
		t.Helper()
		v, err := r.Admit(t.Context(), Admission{Tenant: "acme", Model: model, Req: limiter.Request{Reserve: tokens}})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Two admitted through the pool (its 2 slots), a third refused there.
	for range 2 {
		if v := admit("gpt-4o", 10); !v.Allowed {
			t.Fatalf("refused: %+v", v)
		}
	}
	clock.Advance(time.Second)
	if v := admit("gpt-4o", 10); v.Allowed || v.Reason != "concurrency" {
		t.Fatalf("third through the pool: %+v", v)
	}
	clock.Advance(time.Second)
	if v := admit("", 5000); v.Allowed || v.Reason != "tokens" { // the group's 1000 tokens
		t.Fatalf("5000 tokens: %+v", v)
	}
	clock.Advance(time.Second)
	if v := admit("", 10); !v.Allowed { // the tenant's third request
		t.Fatalf("refused: %+v", v)
	}
	if v := admit("", 10); v.Allowed || v.Reason != "requests" {
		t.Fatalf("fourth request: %+v", v)
	}
	got := r.Activity().Recent(nil, 10)
	want := []struct{ level, reason string }{{"tenant:acme", "requests"}, {"group:research", "tokens"}, {"pool:gpt", "concurrency"}}
	if len(got) != len(want) {
		t.Fatalf("recent refusals: %+v", got)
	}
	for i, w := range want {
		if got[i].Tenant != "acme" || got[i].Level != w.level || got[i].Reason != w.reason {
			t.Fatalf("refusal %d: %+v, want %s by %s", i, got[i], w.reason, w.level)
		}
	}
	if !got[0].At.Equal(clock.Now()) || !got[2].At.Equal(clock.Now().Add(-2*time.Second)) {
		t.Fatalf("refusal times %v %v, now %v", got[0].At, got[2].At, clock.Now())
	}
	tr := r.Activity().RefusedTenants()
	if len(tr) != 1 || tr[0].Total != 3 || tr[0].ByReason["requests"] != 1 || tr[0].ByReason["tokens"] != 1 || tr[0].ByReason["concurrency"] != 1 {
		t.Fatalf("refused tenants: %+v", tr)
	}
	pt := r.Activity().PoolTenants()
	if len(pt) != 1 || len(pt["gpt"]) != 1 || pt["gpt"][0] != (PoolTenant{"acme", 2}) {
		t.Fatalf("pool tenants: %+v", pt)
	}
	r.Activity().RotatePools()
	r.Activity().RotatePools()
	if pt := r.Activity().PoolTenants(); len(pt["gpt"]) != 0 {
		t.Fatalf("after two periods, pool tenants %+v, want none", pt)
	}
}

// TestActivityBounds: the ring keeps the newest RecentRefusals; the tenant
// table holds MaxRefusedTenants, a new one replacing the one refused least
// recently; a pool counts PoolTopTenants tenants, a new one inheriting the
// smallest count.
func TestActivityBounds(t *testing.T) {
	var a Activity
	t0 := time.Unix(1_700_000_000, 0)
	for i := range MaxRefusedTenants + 10 {
		a.refused(Refusal{At: t0.Add(time.Duration(i) * time.Second), Tenant: fmt.Sprintf("t%04d", i), Reason: "requests"})
	}
	all := a.Recent(nil, 1<<20)
	if len(all) != RecentRefusals || all[0].Tenant != fmt.Sprintf("t%04d", MaxRefusedTenants+9) ||
		all[RecentRefusals-1].Tenant != fmt.Sprintf("t%04d", MaxRefusedTenants+10-RecentRefusals) {
		t.Fatalf("recent: %d kept, newest %s, oldest %s", len(all), all[0].Tenant, all[len(all)-1].Tenant)
	}
	tr := a.RefusedTenants()
	if len(tr) != MaxRefusedTenants {
		t.Fatalf("%d tenants kept, want %d", len(tr), MaxRefusedTenants)
	}
	names := map[string]bool{}
	for _, x := range tr {
		names[x.Tenant] = true
	}
	if names["t0009"] || !names["t0010"] || !names[fmt.Sprintf("t%04d", MaxRefusedTenants+9)] {
		t.Fatalf("eviction kept the wrong tenants: t0009 %v t0010 %v", names["t0009"], names["t0010"])
	}
	for i := range PoolTopTenants {
		for range i + 2 {
			a.admitted("p", fmt.Sprintf("u%02d", i))
		}
	}
	a.admitted("p", "newcomer") // takes u00's place (2 admissions) with 2+1
	top := a.PoolTenants()["p"]
	if len(top) != PoolTopTenants || top[0] != (PoolTenant{fmt.Sprintf("u%02d", PoolTopTenants-1), PoolTopTenants + 1}) {
		t.Fatalf("pool top: %d, first %+v", len(top), top[0])
	}
	for _, x := range top {
		if x.Tenant == "u00" || (x.Tenant == "newcomer" && x.Admissions != 3) {
			t.Fatalf("pool top: %+v", top)
		}
	}
	for i := range MaxActivityPools + 1 {
		a.admitted(fmt.Sprintf("pool%d", i), "x")
	}
	if n := len(a.PoolTenants()); n != MaxActivityPools {
		t.Fatalf("%d pools counted, want %d", n, MaxActivityPools)
	}
}

// TestActivityConcurrent: admissions and refusals recorded from many
// goroutines while others read are all counted (run with -race).
func TestActivityConcurrent(t *testing.T) {
	var a Activity
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				a.admitted("p", "t")
				a.refused(Refusal{Tenant: "t", Reason: []string{"requests", "tokens"}[(w+i)%2]})
			}
		})
		wg.Go(func() {
			for range 100 {
				a.PoolTenants()
				a.RefusedTenants()
				a.Recent(nil, 10)
			}
		})
	}
	wg.Wait()
	if got := a.PoolTenants()["p"]; len(got) != 1 || got[0] != (PoolTenant{"t", 4000}) {
		t.Fatalf("pool tenants %+v, want t with 4000", got)
	}
	if got := a.RefusedTenants(); len(got) != 1 || got[0].Total != 4000 || got[0].ByReason["requests"] != 2000 || got[0].ByReason["tokens"] != 2000 {
		t.Fatalf("refused %+v", got)
	}
}
