package router

// An acquire over every key of its chain (keys.go), all or nothing.

import (
	"context"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// sideSet is the keys of one acquire, in chainOrder, and the limits its
// request sent for each (nil: the file's).
type sideSet struct {
	n      int
	s      [MaxSides]Side
	sent   [MaxSides]*limiter.Limits
	weight int64 // the tenant's weight in its pool (reqFor)
}

func (ss *sideSet) add(s Side) {
	ss.s[ss.n] = s
	ss.n++
}

// sidesOf fills ss with the keys an acquire of tenant for model charges,
// in chainOrder: the tenant and its model-scoped key, each group above it
// and its model-scoped key, the pool. model "" names no model: no
// model-scoped key and no pool.
func (r *Router) sidesOf(tenant, model string, ss *sideSet) {
	tk := TenantKey(tenant)
	ss.add(Side{Key: tk, Kind: KeyTenant, Name: tenant})
	if r.cfg.Chain != nil {
		ch := r.cfg.Chain(tenant, model)
		if e := ch.Models[0]; e != "" {
			ss.add(Side{Key: ModelKey(tk, e), Kind: KeyTenant, Name: tenant, Entry: e})
		}
		for i, g := range ch.Groups[:min(max(ch.NGroups, 0), MaxGroups)] {
			gk := GroupKey(g)
			ss.add(Side{Key: gk, Kind: KeyGroup, Name: g})
			if e := ch.Models[i+1]; e != "" {
				ss.add(Side{Key: ModelKey(gk, e), Kind: KeyGroup, Name: g, Entry: e})
			}
		}
	}
	if model == "" {
		return
	}
	if pool, ok := r.cfg.PoolFor(model); ok {
		ss.add(Side{Key: PoolKey(pool), Kind: KeyPool, Name: pool})
	}
}

// sidesFor fills ss with the keys adm charges: sidesOf's, or, when the
// request names its own parents, its tenant (with the tenant's models
// entry from the file), those parents as its groups, nearest first, and
// the pool; each with the limits the request sent for it.
func (r *Router) sidesFor(adm *Admission, ss *sideSet) {
	if len(adm.Parents) == 0 {
		r.sidesOf(adm.Tenant, adm.Model, ss)
		ss.sent[0] = adm.Limits
		return
	}
	tk := TenantKey(adm.Tenant)
	ss.add(Side{Key: tk, Kind: KeyTenant, Name: adm.Tenant})
	ss.sent[0] = adm.Limits
	if r.cfg.Chain != nil {
		if e := r.cfg.Chain(adm.Tenant, adm.Model).Models[0]; e != "" {
			ss.add(Side{Key: ModelKey(tk, e), Kind: KeyTenant, Name: adm.Tenant, Entry: e})
		}
	}
	for _, p := range adm.Parents[:min(len(adm.Parents), MaxGroups)] {
		ss.sent[ss.n] = p.Limits
		ss.add(Side{Key: GroupKey(p.Name), Kind: KeyGroup, Name: p.Name})
	}
	if adm.Model == "" {
		return
	}
	if pool, ok := r.cfg.PoolFor(adm.Model); ok {
		ss.add(Side{Key: PoolKey(pool), Kind: KeyPool, Name: pool})
	}
}

// chained reports whether an acquire of tenant for model charges a key
// beyond its tenant's and its pool's: a group or a model-scoped key.
func (r *Router) chained(tenant, model string) bool {
	if r.cfg.Chain == nil {
		return false
	}
	return r.cfg.Chain(tenant, model) != Chain{}
}

// maxChainAttempts bounds the attempts of one waiting acquire (Admit).
const maxChainAttempts = 8

// Admission is a validated acquire: its tenant, its model ("" names none)
// and what it asks of every key of its chain.
type Admission struct {
	Tenant, Model string
	Req           limiter.Request
	// Limits are the tenant's limits the request sent (nil: the file's),
	// and Parents the groups above the tenant, nearest first, that it
	// names itself (nil: the file's chain; at most MaxGroups), each with
	// the limits it sent for it. A key's owner applies the limits of the
	// newest request it decided (limiter.Budget.SetSentLimits).
	Limits  *limiter.Limits
	Parents []Parent
}

// Parent is a group a request names above its tenant, and the limits it
// sends for it (nil: the file's).
type Parent struct {
	Name   string
	Limits *limiter.Limits
}

// Verdict is what an acquire came to across the keys of its chain.
type Verdict struct {
	// Allowed is true when every key admitted the acquire.
	Allowed bool
	// Lease names every key charged, with its lease id, in chainOrder
	// (admitted only): what the client's signed lease carries.
	Lease Lease
	// Reserved is the tokens every key reserved (admitted only).
	Reserved int64
	// Reason names the dimension that refused (limiter.Dimension's
	// String), RetryAfter is the refusing key's retry-after and RefusedBy
	// the refusing key (refused only).
	Reason     string
	RetryAfter time.Duration
	RefusedBy  Side
	// RefusedStatus is the refusing key's status as its answer reported
	// it (refused only): what a front end's rate-limit headers show.
	RefusedStatus limiter.Status
	// Status is the tenant's status as its own answer reported it, and
	// Owner its owner (the refusing key's when the tenant was not asked).
	Status limiter.Status
	Owner  string
	// Pool is the pool's name and PoolStatus its status when the pool
	// admitted the acquire or refused it; "" otherwise.
	Pool       string
	PoolStatus limiter.Status
	// Fallback is true when the fallback decided a key, its owner being
	// unreachable.
	Fallback bool
}

// Admit runs a validated acquire over every key of its chain (sidesOf),
// at its model's price (an UnpricedError if it has none and a key has a
// budget), all or nothing: it reserves them one after the other in chainOrder, and
// when one refuses (or its owner cannot answer) it cancels, in reverse
// order, every reservation it made, so that nothing stays charged.
//
// Order. Every attempt without a wait reserves in chainOrder: a tenant
// before its model-scoped key, a level before the level above it, the pool
// last. Chains are paths in one forest of groups, so any two acquires
// reserve the keys they share in the same order (the restriction of one
// total order): two acquires that contend for the last unit of two keys
// cannot each take one and refuse each other; the first to reach the first
// shared key goes on.
//
// Waiting (wait_ms). A request waits only while it holds nothing, and only
// at one key: the first key of the attempt gets what is left of wait_ms,
// every other key none. When a later key refuses, what was reserved is
// cancelled and the request starts again from scratch, holding nothing,
// now waiting first at the key that refused (in that key's queue, by its
// priority), then taking the others in chainOrder, until wait_ms runs out
// or after maxChainAttempts attempts. So no request ever holds a level
// while it queues for another (which could starve that level's other
// tenants for as long as the wait), and a chain of one key waits exactly
// as a tenant always did.
func (r *Router) Admit(ctx context.Context, adm Admission) (Verdict, error) {
	if r.cfg.Tracer != nil && needsSpan(ctx, false) {
		return r.admitTraced(ctx, adm) // trace.go
	}
	var ss sideSet
	r.sidesFor(&adm, &ss)
	if err := r.price(&adm, &ss); err != nil {
		return Verdict{}, err
	}
	r.weigh(&ss)
	if adm.Req.Wait <= 0 {
		v, _, err := r.reserveAll(ctx, adm.Req, &ss, 0)
		return v, err
	}
	deadline := r.cfg.Now().Add(adm.Req.Wait)
	first, req := 0, adm.Req
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			req.Wait = max(0, deadline.Sub(r.cfg.Now()))
		}
		v, refusedAt, err := r.reserveAll(ctx, req, &ss, first)
		if err != nil || v.Allowed || refusedAt == first || attempt == maxChainAttempts || req.Wait == 0 {
			return v, err
		}
		first = refusedAt
	}
}

// reserveAll runs one attempt of Admit: it reserves ss's keys, first (the
// one req waits at) before the others in chainOrder, with no wait but
// at first. Every key reserves the tokens the first one did. On a refusal
// it cancels what it reserved and returns the refusal and the index of
// the key that refused; on an error, what it reserved is cancelled too.
// Consecutive keys (in that order) that another member owns go to it in
// one call (decideRun): the same decisions, in the same order, in fewer
// round trips.
func (r *Router) reserveAll(ctx context.Context, req limiter.Request, ss *sideSet, first int) (v Verdict, refusedAt int, err error) {
	var held [MaxSides]outcome
	var order [MaxSides]int
	order[0] = first
	for i, j := 0, 1; i < ss.n; i++ {
		if i != first {
			order[j] = i
			j++
		}
	}
	tokens := req.PromptTokens + req.MaxTokens
	var one [1]outcome
	for k := 0; k < ss.n; {
		var outs []outcome
		if m := r.runLen(ss, order[k:ss.n], k == 0 && req.Wait > 0); m > 1 {
			if outs, err = r.decideRun(ctx, ss, order[k:k+m], req, tokens); err != nil {
				r.rollback(ss, &held, order[:k])
				return Verdict{}, order[k], err
			}
		}
		if len(outs) == 0 {
			i := order[k]
			c := node.Call{Op: node.OpAcquire, Key: ss.s[i].Key, Req: ss.reqFor(i, req), Limits: ss.sent[i]}
			if k > 0 {
				c.Req.Wait = 0
			}
			o, err := r.decide(ctx, &c, tokens)
			if err != nil {
				r.rollback(ss, &held, order[:k])
				return Verdict{}, i, err
			}
			one[0] = o
			outs = one[:]
		}
		for _, o := range outs {
			i := order[k]
			if !o.answer.Decision.Allowed {
				r.rollback(ss, &held, order[:k])
				return r.refusal(ss, &held, order[:k], i, o), i, nil
			}
			held[i] = o
			if k == 0 { // every other key follows the first one's estimate
				req.Reserve, tokens = o.answer.Decision.Reserved, o.answer.Decision.Reserved
			}
			k++
		}
	}
	return r.admitted(ss, &held, tokens), -1, nil
}

// rollback cancels the reservations of ss's keys at indexes done, the
// last reserved first.
func (r *Router) rollback(ss *sideSet, held *[MaxSides]outcome, done []int) {
	for k := len(done) - 1; k >= 0; k-- {
		i := done[k]
		r.undo(ss.s[i].Key, held[i], node.OpCancel)
	}
}

// refusal is the verdict on an acquire that key at bad refused with o,
// the keys at done having been reserved (and cancelled since): the reason
// and retry-after are the refusing key's, the status the tenant's as its
// own answer reported it (the refusing key's when the tenant was not
// asked), the pool's status there when the pool refused.
func (r *Router) refusal(ss *sideSet, held *[MaxSides]outcome, done []int, bad int, o outcome) Verdict {
	d := o.answer.Decision
	by := ss.s[bad]
	v := Verdict{Status: d.Status, Owner: o.answer.Owner, Fallback: o.fallback,
		Reason: d.Reason.String(), RetryAfter: d.RetryAfter, RefusedBy: by, RefusedStatus: d.Status}
	for _, i := range done {
		if i == 0 {
			v.Status, v.Owner = held[0].answer.Decision.Status, held[0].answer.Owner
		}
		v.Fallback = v.Fallback || held[i].fallback
	}
	if by.Kind == KeyPool {
		v.Pool, v.PoolStatus = by.Name, d.Status
	}
	r.metrics.decision(by.metric(), v.Reason, o.fallback)
	r.recordRefusal(ss.s[0].Name, &v)
	return v
}

// admitted is the verdict on an acquire every key of ss admitted: the
// lease names every key with its lease id, in chainOrder.
func (r *Router) admitted(ss *sideSet, held *[MaxSides]outcome, reserved int64) Verdict {
	t := held[0].answer
	v := Verdict{Allowed: true, Status: t.Decision.Status, Owner: t.Owner, Reserved: reserved,
		Lease: Lease{Tenant: ss.s[0].Name, Node: r.cluster.Name()}}
	for i := range ss.n {
		o := held[i]
		v.Lease.Add(ss.s[i].Key, o.answer.Decision.Lease, o.fallback)
		v.Fallback = v.Fallback || o.fallback
		if ss.s[i].Kind == KeyPool {
			v.Pool, v.PoolStatus = ss.s[i].Name, o.answer.Decision.Status
		}
	}
	r.metrics.decision("none", "", v.Fallback) // allowed: no side refused
	if v.Pool != "" {
		r.activity.admitted(v.Pool, ss.s[0].Name)
	}
	return v
}

// Level is one key an acquire charges, with its owner's status of it.
type Level struct {
	Label  string // Side.Label
	Key    string // Side.Key
	Owner  string
	Status limiter.Status
}

// Levels returns the status of every key an acquire of tenant for model
// would charge (sidesOf), in chainOrder, or the error or the label of the
// key whose owner could not be reached.
func (r *Router) Levels(ctx context.Context, tenant, model string) (out []Level, unreachable string, err error) {
	var ss sideSet
	r.sidesOf(tenant, model, &ss)
	out = make([]Level, 0, ss.n)
	for _, s := range ss.s[:ss.n] {
		c := node.Call{Op: node.OpStatus, Key: s.Key}
		o, err := r.decide(ctx, &c, 0)
		if err != nil {
			return nil, "", err
		}
		if o.fallback {
			return nil, s.Label(), nil
		}
		out = append(out, Level{Label: s.Label(), Key: s.Key, Owner: o.answer.Owner, Status: o.answer.Decision.Status})
	}
	return out, "", nil
}

// RenewInterval is a third of the shortest lease TTL of the lease's keys.
func (r *Router) RenewInterval(tl limiter.Limits, l Lease) time.Duration {
	ttl := tl.LeaseTTL
	if ttl <= 0 {
		ttl = limiter.DefaultLeaseTTL
	}
	for _, s := range l.Sides()[1:] {
		if t := r.cfg.Limits(s.Key).LeaseTTL; t > 0 {
			ttl = min(ttl, t)
		}
	}
	return max(ttl/3, time.Millisecond)
}
