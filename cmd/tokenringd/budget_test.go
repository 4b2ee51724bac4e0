package main

import (
	"testing"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// TestLivePricesBudgetsAndShares: the config in force gives the router a
// model's price, a level's budget (its period and zone), a tenant's weight
// and a pool's fairness; a reload (live.set) changes each at once.
func TestLivePricesBudgetsAndShares(t *testing.T) {
	parse := func(text string) config.Config {
		t.Helper()
		c, err := config.Parse([]byte(text), nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cur := newLive(parse(`
prices: {gpt-4o: {input: "2.50", output: 10}}
limits:
  tenants:
    acme: {budget: {usd: "25", period: month, time_zone: Asia/Tokyo}}
pools: {gpt-4o: {tpm: 1000}}
weights: {acme: 3}
`))
	if p, ok := cur.price("gpt-4o"); !ok || p != (limiter.Price{Input: 2_500_000, CachedInput: 2_500_000, CacheWrite: 2_500_000, Output: 10_000_000}) {
		t.Fatalf("price %+v %v", p, ok)
	}
	l := cur.limits(router.TenantKey("acme"))
	if l.Spend != 25e12 || l.Period.Unit != limiter.PeriodMonth || l.Period.Loc.String() != "Asia/Tokyo" || !cur.budgeted() {
		t.Fatalf("acme's limits %+v", l)
	}
	if !cur.limits(router.PoolKey("gpt-4o")).Fair || cur.limits(router.TenantKey("acme")).Fair || cur.weight("acme") != 3 || cur.weight("other") != 1 {
		t.Fatal("fairness")
	}
	cur.set(parse(`
prices: {gpt-4o: {input: 5, output: 15}}
limits:
  tenants:
    acme: {budget: {usd: "1", period: 1h}}
pools: {gpt-4o: {tpm: 1000}}
fair_share: false
`))
	if p, _ := cur.price("gpt-4o"); p.Input != 5_000_000 || p.Output != 15_000_000 {
		t.Fatalf("price after the reload %+v", p)
	}
	if l := cur.limits(router.TenantKey("acme")); l.Spend != 1e12 || l.Period.Unit != limiter.PeriodEvery || l.Period.Every.Hours() != 1 {
		t.Fatalf("acme after the reload %+v", l)
	}
	if cur.limits(router.PoolKey("gpt-4o")).Fair || cur.weight("acme") != 1 {
		t.Fatal("fairness after the reload")
	}
	cur.set(parse("limits: {default: {rpm: 5}}"))
	if _, ok := cur.price("gpt-4o"); ok || cur.budgeted() || cur.limits(router.TenantKey("acme")).Spend != 0 {
		t.Fatal("prices and budgets outlived their removal")
	}
}
