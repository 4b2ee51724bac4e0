package router

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// What this node's router saw of the acquires it answered, kept for the
// admin console (package admin) in bounded memory. The node that answers
// an acquire records it; the console gathers every member's.

// Bounds of Activity.
const (
	// RecentRefusals is how many refusals Activity keeps, the newest: a
	// ring of fixed size (about 100 bytes each, plus the names).
	RecentRefusals = 512
	// MaxRefusedTenants is how many tenants Activity counts refusals
	// for. A tenant refused when the table is full takes the place of the
	// one refused least recently.
	MaxRefusedTenants = 1024
	// MaxActivityPools is how many pools Activity counts admissions for,
	// and PoolTopTenants how many tenants each (the heaviest, by the
	// Space-Saving rule: a new tenant at the cap takes the place of the one
	// with the fewest, starting from its count, so a count may exceed the
	// tenant's admissions by at most the count it inherited, never fall
	// short of them). An admission to a pool past MaxActivityPools is not
	// counted.
	MaxActivityPools = 64
	PoolTopTenants   = 32
)

// Refusal is one refused acquire as the node that answered it saw it.
type Refusal struct {
	At         time.Time
	Tenant     string        // the acquire's tenant
	Level      string        // the level that refused, as "refused_by" names it: "tenant:acme", "group:research", "pool:gpt-4o"
	Reason     string        // limiter.Dimension's String: requests, tokens, concurrency, queue_full, ...
	Fallback   bool          // the fallback decided (the owner was unreachable)
	RetryAfter time.Duration // the answer's retry-after
}

// TenantRefusals counts one tenant's refusals at this node since the
// tenant entered the table (Since), by reason.
type TenantRefusals struct {
	Tenant   string
	Total    int64
	ByReason map[string]int64
	Since    time.Time // when the tenant's first counted refusal happened
	Last     time.Time // its latest refusal
}

// PoolTenant is one of a pool's heaviest tenants: the admissions this node
// answered for it through the pool in the current and previous periods
// (Activity.RotatePools).
type PoolTenant struct {
	Tenant     string `json:"tenant"`
	Admissions int64  `json:"admissions"`
}

// Activity records the refusals an acquire got at this node and the
// admissions through each pool, all bounded: RecentRefusals refusals,
// MaxRefusedTenants tenants' counts, MaxActivityPools pools ×
// PoolTopTenants tenants, twice (two periods). The zero value is ready.
// Safe for concurrent use.
type Activity struct {
	mu      sync.Mutex
	recent  [RecentRefusals]Refusal // a ring; next is the total ever recorded
	next    uint64
	tenants map[string]*TenantRefusals

	// pools maps a pool's name to its *poolTop: read without a lock on
	// the admissions' path; npools counts them.
	pools  sync.Map
	npools atomic.Int32
}

// poolTop counts a pool's heaviest tenants in the current period (cur)
// and keeps the previous one's (prev).
type poolTop struct {
	mu        sync.Mutex
	cur, prev map[string]int64
}

// refused records a refusal.
func (a *Activity) refused(r Refusal) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recent[a.next%RecentRefusals] = r
	a.next++
	if a.tenants == nil {
		a.tenants = map[string]*TenantRefusals{}
	}
	t, ok := a.tenants[r.Tenant]
	if !ok {
		if len(a.tenants) >= MaxRefusedTenants {
			a.evictLocked()
		}
		t = &TenantRefusals{Tenant: r.Tenant, ByReason: map[string]int64{}, Since: r.At}
		a.tenants[r.Tenant] = t
	}
	t.Total++
	t.ByReason[r.Reason]++
	t.Last = r.At
}

// evictLocked drops the tenant refused least recently (ties: the first
// name): O(MaxRefusedTenants), only when a new tenant is refused at the cap.
func (a *Activity) evictLocked() {
	var old *TenantRefusals
	for _, t := range a.tenants {
		if old == nil || t.Last.Before(old.Last) || (t.Last.Equal(old.Last) && t.Tenant < old.Tenant) {
			old = t
		}
	}
	delete(a.tenants, old.Tenant)
}

// Recent returns the refusals kept, newest first, that keep says to (nil:
// all), at most limit of them.
func (a *Activity) Recent(keep func(*Refusal) bool, limit int) []Refusal {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Refusal
	for i := a.next; i > 0 && a.next-i < RecentRefusals && len(out) < limit; i-- {
		r := &a.recent[(i-1)%RecentRefusals]
		if keep == nil || keep(r) {
			out = append(out, *r)
		}
	}
	return out
}

// RefusedTenants returns a copy of every tenant's refusal counts kept,
// the most refused first (then by name).
func (a *Activity) RefusedTenants() []TenantRefusals {
	a.mu.Lock()
	out := make([]TenantRefusals, 0, len(a.tenants))
	for _, t := range a.tenants {
		c := *t
		c.ByReason = make(map[string]int64, len(t.ByReason))
		for k, v := range t.ByReason {
			c.ByReason[k] = v
		}
		out = append(out, c)
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y TenantRefusals) int {
		if c := cmp.Compare(y.Total, x.Total); c != 0 {
			return c
		}
		return cmp.Compare(x.Tenant, y.Tenant)
	})
	return out
}

// admitted counts an admission of tenant through pool.
func (a *Activity) admitted(pool, tenant string) {
	v, ok := a.pools.Load(pool)
	if !ok {
		if a.npools.Load() >= MaxActivityPools {
			return
		}
		var loaded bool
		if v, loaded = a.pools.LoadOrStore(pool, &poolTop{cur: map[string]int64{}}); !loaded && a.npools.Add(1) > MaxActivityPools {
			a.pools.Delete(pool) // another pool took the last place meanwhile
			a.npools.Add(-1)
			return
		}
	}
	p := v.(*poolTop)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cur[tenant]; !ok && len(p.cur) >= PoolTopTenants {
		least, n := "", int64(-1)
		for t, c := range p.cur {
			if n < 0 || c < n || (c == n && t < least) {
				least, n = t, c
			}
		}
		delete(p.cur, least)
		p.cur[tenant] = n
	}
	p.cur[tenant]++
}

// RotatePools starts a new period for every pool's counts: the current
// period's become the previous one's, the previous one's are dropped.
func (a *Activity) RotatePools() {
	for _, v := range a.pools.Range {
		p := v.(*poolTop)
		p.mu.Lock()
		p.prev, p.cur = p.cur, make(map[string]int64, len(p.cur))
		p.mu.Unlock()
	}
}

// PoolTenants returns, for every pool with admissions counted, its
// tenants (current and previous periods summed), the heaviest first, at
// most PoolTopTenants.
func (a *Activity) PoolTenants() map[string][]PoolTenant {
	out := map[string][]PoolTenant{}
	for k, v := range a.pools.Range {
		name, p := k.(string), v.(*poolTop)
		p.mu.Lock()
		sum := make(map[string]int64, len(p.cur)+len(p.prev))
		for _, m := range []map[string]int64{p.prev, p.cur} {
			for t, c := range m {
				sum[t] += c
			}
		}
		p.mu.Unlock()
		top := make([]PoolTenant, 0, len(sum))
		for t, c := range sum {
			top = append(top, PoolTenant{Tenant: t, Admissions: c})
		}
		slices.SortFunc(top, func(x, y PoolTenant) int {
			if c := cmp.Compare(y.Admissions, x.Admissions); c != 0 {
				return c
			}
			return cmp.Compare(x.Tenant, y.Tenant)
		})
		out[name] = top[:min(len(top), PoolTopTenants)]
	}
	return out
}

// Activity is what r recorded of the acquires it answered.
func (r *Router) Activity() *Activity { return &r.activity }

// recordRefusal records the refused verdict v of an acquire of tenant.
func (r *Router) recordRefusal(tenant string, v *Verdict) {
	r.activity.refused(Refusal{At: r.cfg.Now(), Tenant: tenant, Level: v.RefusedBy.Label(), Reason: v.Reason,
		Fallback: v.Fallback, RetryAfter: v.RetryAfter})
}
