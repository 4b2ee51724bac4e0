package main

import (
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/rls"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

// live is the config in force, replaced whole by a reload (configFile).
// The functions it hands the node, the router and the proxy read it at
// each call, so a reload takes effect at the next one; the node's table
// also needs LimitsChanged to look again at the keys it holds. Safe for
// concurrent use.
type live struct {
	p atomic.Pointer[liveState]
	// descs is the rate limit files of rls.config_dir in force (nil: none),
	// replaced whole when the directory changes (rlsDir).
	descs atomic.Pointer[descriptors.Config]
}

// liveState is one config and what is resolved from it once.
type liveState struct {
	cfg      config.Config
	chain    func(tenant, model string) router.Chain // chainOf(cfg): nil without chains
	budgeted bool                                    // cfg.Budgeted()
}

func newLive(cfg config.Config) *live {
	l := &live{}
	l.set(cfg)
	return l
}

// set makes cfg the config in force.
func (l *live) set(cfg config.Config) {
	l.p.Store(&liveState{cfg: cfg, chain: chainOf(cfg), budgeted: cfg.Budgeted()})
}

// limits maps a limiter key to its configured limits (levelLimits):
// "t:<tenant>" to the tenant's (or the default), "p:<model>" to the
// pool's, "g:<group>" to the group's, a model-scoped key to its entry's.
func (l *live) limits(key string) limiter.Limits {
	s := l.p.Load()
	if strings.HasPrefix(key, "d:") {
		return descriptorLimits(&s.cfg, l.descs.Load(), key)
	}
	return keyLimits(&s.cfg, key)
}

// descriptorLimits is the limits of a descriptor key ("d:...") in descs
// (rls.KeyLimits): a token or concurrency limit's slots live
// limits.lease_ttl, the longest a stream may run before its slot is freed
// with its reservation still charged; a request limit's leases
// rls.KeyLeaseTTL. A key descs does not know (the files changed since it
// was charged) is unlimited until it goes idle.
func descriptorLimits(cfg *config.Config, descs *descriptors.Config, key string) limiter.Limits {
	lim, _ := rls.KeyLimits(descs, key)
	if lim.LeaseTTL == 0 {
		lim.LeaseTTL = cfg.Limits.LeaseTTL
	}
	if lim.Window == 0 {
		lim.Window = cfg.Limits.Window
	}
	return lim
}

// keyLimits is key's limits in cfg (see live.limits).
func keyLimits(cfg *config.Config, key string) limiter.Limits {
	lim := levelLimits(cfg, key)
	l := limiter.Limits{Requests: lim.RPM, Tokens: lim.TPM, Concurrency: lim.Concurrency, Window: cfg.Limits.Window, LeaseTTL: cfg.Limits.LeaseTTL,
		Reserve: reserveMode(lim.Reservation)}
	if b := lim.Budget; b != nil {
		l.Spend, l.Period = int64(b.Amount), spendPeriod(b)
	}
	if kind, _, _ := router.SplitKey(key); kind == router.KeyPool {
		l.Fair = cfg.FairShare
	}
	return l
}

// pools names the config's pools.
func (l *live) pools() []string { return slices.Sorted(maps.Keys(l.p.Load().cfg.Pools)) }

// weight is a tenant's weight in its pools' fair shares.
func (l *live) weight(tenant string) int64 { return l.p.Load().cfg.Weight(tenant) }

// spendPeriod is the limiter's Period of a budget.
func spendPeriod(b *config.Budget) limiter.Period {
	p := limiter.Period{Loc: b.Loc}
	switch b.Period {
	case config.PeriodDay:
		p.Unit = limiter.PeriodDay
	case config.PeriodWeek:
		p.Unit = limiter.PeriodWeek
	case config.PeriodMonth:
		p.Unit = limiter.PeriodMonth
	case config.PeriodTotal:
		p.Unit = limiter.PeriodTotal
	default:
		p.Unit = limiter.PeriodEvery
		p.Every, _ = b.Every()
	}
	return p
}

// price is a model's price in the limiter's terms.
func (l *live) price(model string) (limiter.Price, bool) {
	p, ok := l.p.Load().cfg.Price(model)
	return limiter.Price{Input: int64(p.Input), CachedInput: int64(p.CachedInput), CacheWrite: int64(p.CacheWrite), Output: int64(p.Output)}, ok
}

// budgeted reports whether the config in force has a budget.
func (l *live) budgeted() bool { return l.p.Load().budgeted }

// reserveMode is the limiter's name for a reservation of the config: ""
// (absent) and estimate are the estimate.
func reserveMode(r config.Reservation) limiter.ReserveMode {
	if r == config.ReserveMaxTokens {
		return limiter.ReserveMaxTokens
	}
	return limiter.ReserveEstimate
}

// poolFor is the pool a model's requests also charge.
func (l *live) poolFor(model string) (string, bool) {
	name, _, ok := l.p.Load().cfg.Pool(model)
	return name, ok
}

// chain is a tenant's chain for a model (chainOf); empty without chains.
func (l *live) chain(tenant, model string) router.Chain {
	if c := l.p.Load().chain; c != nil {
		return c(tenant, model)
	}
	return router.Chain{}
}

// tenant is the tenant an LLM proxy API key stands for.
func (l *live) tenant(apiKey string) (string, bool) { return l.p.Load().cfg.Tenant(apiKey) }

// account is the upstream account of an LLM proxy API key.
func (l *live) account(apiKey string) proxy.Account {
	a := l.p.Load().cfg.KeyAccounts[apiKey]
	return proxy.Account{OpenAIOrganization: a.OpenAIOrganization, OpenAIProject: a.OpenAIProject}
}

// source names the config entry key's limits come from, for
// /admin/limits: "limits.tenants.<t>" or "limits.default" for a tenant,
// "limits.groups.<g>", "...models.<entry>" for a model-scoped level,
// "pools.<p>"; "none" for a key the config does not limit.
func (l *live) source(key string) string {
	cfg := &l.p.Load().cfg
	kind, name, entry := router.SplitKey(key)
	switch {
	case kind == router.KeyDescriptor:
		return "rls.config_dir"
	case kind == router.KeyPool:
		if _, ok := cfg.Pools[name]; ok {
			return "pools." + name
		}
		return "none"
	case kind == router.KeyGroup && entry != "":
		return "limits.groups." + name + ".models." + entry
	case kind == router.KeyGroup:
		return "limits.groups." + name
	case entry != "":
		return "limits.tenants." + name + ".models." + entry
	}
	if _, ok := cfg.Limits.Tenants[name]; ok {
		return "limits.tenants." + name
	}
	return "limits.default"
}
