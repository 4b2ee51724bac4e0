package main

import (
	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/router"
)

// chainLevels is one tenant's chain, resolved once: its groups, nearest
// first, and the models map of each level (the tenant's first).
type chainLevels struct {
	groups [router.MaxGroups]string
	n      int
	models [router.MaxGroups + 1]map[string]config.Limits
}

// chainOf returns the router's Config.Chain for cfg's limits.tenants
// parents and models (config/chains.go), resolved once; nil when no tenant
// has either, so the router takes its path for tenants alone. cfg must be
// valid (config.Validate): chains are then at most router.MaxGroups deep.
// The function only reads: safe for concurrent use.
func chainOf(cfg config.Config) func(tenant, model string) router.Chain {
	if len(cfg.Limits.TenantChains) == 0 {
		return nil
	}
	chains := make(map[string]*chainLevels, len(cfg.Limits.TenantChains))
	for t := range cfg.Limits.TenantChains {
		c := &chainLevels{}
		c.models[0] = cfg.TenantModels(t)
		for _, g := range cfg.Ancestors(t) {
			if c.n == router.MaxGroups {
				break
			}
			c.groups[c.n] = g
			c.n++
			c.models[c.n] = cfg.Limits.Groups[g].Models
		}
		chains[t] = c
	}
	return func(tenant, model string) router.Chain {
		c := chains[tenant]
		if c == nil {
			return router.Chain{}
		}
		out := router.Chain{Groups: c.groups, NGroups: c.n}
		for i := range c.n + 1 {
			if e, _, ok := config.MatchModel(c.models[i], model); ok {
				out.Models[i] = e
			}
		}
		return out
	}
}

// levelLimits returns the configured limits of a limiter key of any kind
// (router.SplitKey): a pool's, a group's, a tenant's (or the default), or
// a models entry's at a tenant or a group. A key the config does not name
// is unlimited, but a tenant's, which gets limits.default.
func levelLimits(cfg *config.Config, key string) config.Limits {
	kind, name, entry := router.SplitKey(key)
	switch {
	case kind == router.KeyPool:
		_, l, _ := cfg.Pool(name)
		return l
	case kind == router.KeyGroup && entry != "":
		return cfg.Limits.Groups[name].Models[entry]
	case kind == router.KeyGroup:
		return cfg.Limits.Groups[name].Limits
	case entry != "":
		return cfg.TenantModels(name)[entry]
	}
	return cfg.TenantLimits(name)
}
