package main

import (
	"sync/atomic"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/router"
)

// live is the config in force, replaced whole by a reload (configFile).
// The functions it hands the node, the router and the proxy read it at
// each call, so a reload takes effect at the next one; the node's table
// also needs LimitsChanged to look again at the keys it holds. Safe for
// concurrent use.
type live struct{ p atomic.Pointer[liveState] }

// liveState is one config and what is resolved from it once.
type liveState struct {
	cfg   config.Config
	chain func(tenant, model string) router.Chain // chainOf(cfg): nil without chains
}

func newLive(cfg config.Config) *live {
	l := &live{}
	l.set(cfg)
	return l
}

// set makes cfg the config in force.
func (l *live) set(cfg config.Config) {
	l.p.Store(&liveState{cfg: cfg, chain: chainOf(cfg)})
}

// limits maps a limiter key to its configured limits (levelLimits):
// "t:<tenant>" to the tenant's (or the default), "p:<model>" to the
// pool's, "g:<group>" to the group's, a model-scoped key to its entry's.
func (l *live) limits(key string) limiter.Limits {
	s := l.p.Load()
	return keyLimits(&s.cfg, key)
}

// keyLimits is key's limits in cfg (see live.limits).
func keyLimits(cfg *config.Config, key string) limiter.Limits {
	lim := levelLimits(cfg, key)
	return limiter.Limits{Requests: lim.RPM, Tokens: lim.TPM, Concurrency: lim.Concurrency, Window: cfg.Limits.Window, LeaseTTL: cfg.Limits.LeaseTTL}
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
