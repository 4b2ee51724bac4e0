package main

import (
	"testing"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/router"
)

// TestChainWiring: the router sees each listed tenant's groups and the
// models entries that apply, and every kind of key gets its limits.
func TestChainWiring(t *testing.T) {
	cfg, err := config.Parse([]byte(`
limits:
  default: {rpm: 60, tpm: 100000, concurrency: 10}
  tenants:
    k: {rpm: 100, parent: team, models: {gpt-4o: {tpm: 50000}}}
    plain: {rpm: 5}
  groups:
    team: {rpm: 1000, parent: org, models: {"gpt-4o-*": {rpm: 7}}}
    org: {tpm: 10000000}
pools:
  gpt-4o: {tpm: 30000000}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	chain := chainOf(cfg)
	got := chain("k", "gpt-4o-mini")
	want := router.Chain{Groups: [router.MaxGroups]string{"team", "org"}, NGroups: 2, Models: [router.MaxGroups + 1]string{"", "gpt-4o-*"}}
	if got != want {
		t.Errorf("chain(k, gpt-4o-mini) = %+v, want %+v", got, want)
	}
	if got := chain("k", "gpt-4o"); got.Models != [router.MaxGroups + 1]string{"gpt-4o"} { // "gpt-4o-*" does not match gpt-4o
		t.Errorf("chain(k, gpt-4o).Models = %q", got.Models)
	}
	for _, tenant := range []string{"plain", "unlisted"} {
		if got := chain(tenant, "gpt-4o"); got != (router.Chain{}) {
			t.Errorf("chain(%s) = %+v, want a tenant alone", tenant, got)
		}
	}
	limits := newLive(cfg).limits
	tk, gk := router.TenantKey("k"), router.GroupKey("team")
	for key, want := range map[string]int64{
		tk: 100, router.TenantKey("unlisted"): 60, router.GroupKey("org"): 0, gk: 1000,
		router.ModelKey(gk, "gpt-4o-*"): 7, router.ModelKey(tk, "gpt-4o"): 0,
	} {
		if got := limits(key).Requests; got != want {
			t.Errorf("limits(%q).Requests = %d, want %d", key, got, want)
		}
	}
	if got := limits(router.ModelKey(tk, "gpt-4o")).Tokens; got != 50000 {
		t.Errorf("the tenant's gpt-4o entry: %d tokens, want 50000", got)
	}
	if got := limits(router.PoolKey("gpt-4o")).Tokens; got != 30000000 {
		t.Errorf("the pool: %d tokens", got)
	}
	if chainOf(config.Default()) != nil {
		t.Error("a config without chains gives the router a Chain function")
	}
}
