package router

// Chains: a request charges every key its limits name, all or nothing.
//
// The keys of one acquire, in the order they are reserved (chainOrder):
//
//	t:<tenant>                       the tenant
//	t:<tenant>\x1fm:<entry>          the tenant's limits for the model, if its models map has an entry for it
//	g:<group>                        each group above the tenant, nearest first
//	g:<group>\x1fm:<entry>           the group's limits for the model, if any
//	p:<pool>                         the model's pool, if any
//
// A model-scoped key is its level's key, the control character U+001F and
// "m:" and the name of the models entry the model falls under (an exact
// name or a "prefix*"). No tenant or model name the API accepts (checkName)
// and no group or models entry the config accepts holds a control
// character, so the first U+001F of a key ends its level's name and no two
// (level, entry) pairs share a key. Tenant, group and pool keys differ in
// their prefix, so a group may share a tenant's or a pool's name.

import (
	"context"
	"strings"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// MaxGroups is the most groups above a tenant: a chain has at most
// MaxGroups+1 levels (config.MaxChainLevels).
const MaxGroups = 3

// maxSides is the most keys one acquire charges: every level, every
// level's model-scoped key, and the pool.
const maxSides = 2*(MaxGroups+1) + 1

// Chain is what the limits say of one acquire beyond its tenant's key and
// its pool: the groups above the tenant and, at each level, the models
// entry the request's model falls under. The zero Chain is a tenant alone.
type Chain struct {
	// Groups[:NGroups] are the tenant's ancestors, nearest first.
	Groups  [MaxGroups]string
	NGroups int
	// Models[0] is the entry of the tenant's models map that the model
	// falls under, Models[i] that of Groups[i-1]; "" where none applies.
	Models [MaxGroups + 1]string
}

// hdrRefusedBy is the LLM proxy's header naming the level that refused a
// request (acquireResponse.RefusedBy), beside x-tokenring-reason.
const hdrRefusedBy = "x-tokenring-refused-by"

// modelSep joins a level's key and a models entry into a model-scoped key.
const modelSep = "\x1fm:"

// GroupKey is the limiter key of a group.
func GroupKey(group string) string { return "g:" + group }

// ModelKey is the limiter key of the models entry entry at the level whose
// key is levelKey (TenantKey or GroupKey).
func ModelKey(levelKey, entry string) string { return levelKey + modelSep + entry }

// KeyKind is the kind of level a limiter key belongs to.
type KeyKind uint8

// The kinds of keys.
const (
	KeyUnknown KeyKind = iota
	KeyTenant          // t:<tenant>, and t:<tenant>\x1fm:<entry>
	KeyGroup           // g:<group>, and g:<group>\x1fm:<entry>
	KeyPool            // p:<pool>
)

// SplitKey returns the kind of key, the name of its level (tenant, group
// or pool) and, for a model-scoped key, its models entry ("" otherwise).
func SplitKey(key string) (kind KeyKind, name, entry string) {
	if len(key) < 2 || key[1] != ':' {
		return KeyUnknown, key, ""
	}
	switch key[0] {
	case 't':
		kind = KeyTenant
	case 'g':
		kind = KeyGroup
	case 'p':
		return KeyPool, key[2:], ""
	default:
		return KeyUnknown, key, ""
	}
	name, entry, _ = strings.Cut(key[2:], modelSep)
	return kind, name, entry
}

// side is one key an acquire charges.
type side struct {
	key   string
	kind  KeyKind
	name  string // the level's name: the tenant, group or pool
	entry string // the models entry of a model-scoped key, else ""
}

// label names the side in answers: "tenant:acme", "group:team-research",
// "pool:gpt-4o", and for a model-scoped key "tenant:acme|model:gpt-4o"
// (the models entry, as configured: possibly "gpt-4o-*").
func (s side) label() string {
	var b strings.Builder
	switch s.kind {
	case KeyGroup:
		b.WriteString("group:")
	case KeyPool:
		b.WriteString("pool:")
	default:
		b.WriteString("tenant:")
	}
	b.WriteString(s.name)
	if s.entry != "" {
		b.WriteString("|model:")
		b.WriteString(s.entry)
	}
	return b.String()
}

// metric is the side's value of tokenring_decisions_total's "side" label.
func (s side) metric() string {
	switch {
	case s.kind == KeyPool:
		return "pool"
	case s.kind == KeyGroup && s.entry != "":
		return "group_model"
	case s.kind == KeyGroup:
		return "group"
	case s.entry != "":
		return "tenant_model"
	}
	return "tenant"
}

// sideSet is the keys of one acquire, in chainOrder.
type sideSet struct {
	n int
	s [maxSides]side
}

func (ss *sideSet) add(s side) {
	ss.s[ss.n] = s
	ss.n++
}

// sidesOf fills ss with the keys an acquire of tenant for model charges,
// in chainOrder: the tenant and its model-scoped key, each group above it
// and its model-scoped key, the pool. model "" names no model: no
// model-scoped key and no pool.
func (r *Router) sidesOf(tenant, model string, ss *sideSet) {
	tk := TenantKey(tenant)
	ss.add(side{key: tk, kind: KeyTenant, name: tenant})
	if r.cfg.Chain != nil {
		ch := r.cfg.Chain(tenant, model)
		if e := ch.Models[0]; e != "" {
			ss.add(side{key: ModelKey(tk, e), kind: KeyTenant, name: tenant, entry: e})
		}
		for i, g := range ch.Groups[:min(max(ch.NGroups, 0), MaxGroups)] {
			gk := GroupKey(g)
			ss.add(side{key: gk, kind: KeyGroup, name: g})
			if e := ch.Models[i+1]; e != "" {
				ss.add(side{key: ModelKey(gk, e), kind: KeyGroup, name: g, entry: e})
			}
		}
	}
	if model == "" {
		return
	}
	if pool, ok := r.cfg.PoolFor(model); ok {
		ss.add(side{key: PoolKey(pool), kind: KeyPool, name: pool})
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

// maxChainAttempts bounds the attempts of one waiting acquire (admit).
const maxChainAttempts = 8

// admit runs a validated acquire over every key of its chain (sidesOf),
// all or nothing: it reserves them one after the other in chainOrder, and
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
func (r *Router) admit(ctx context.Context, adm admission) (acquireResponse, error) {
	var ss sideSet
	r.sidesOf(adm.tenant, adm.model, &ss)
	if adm.req.Wait <= 0 {
		res, _, err := r.reserveAll(ctx, adm.req, &ss, 0)
		return res, err
	}
	deadline := r.cfg.Now().Add(adm.req.Wait)
	first, req := 0, adm.req
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			req.Wait = max(0, deadline.Sub(r.cfg.Now()))
		}
		res, refusedAt, err := r.reserveAll(ctx, req, &ss, first)
		if err != nil || res.Allowed || refusedAt == first || attempt == maxChainAttempts || req.Wait == 0 {
			return res, err
		}
		first = refusedAt
	}
}

// reserveAll runs one attempt of admit: it reserves ss's keys, first (the
// one req waits at) before the others in chainOrder, with no wait but
// at first. Every key reserves the tokens the first one did. On a refusal
// it cancels what it reserved and returns the refusal and the index of
// the key that refused; on an error, what it reserved is cancelled too.
func (r *Router) reserveAll(ctx context.Context, req limiter.Request, ss *sideSet, first int) (res acquireResponse, refusedAt int, err error) {
	var held [maxSides]outcome
	var order [maxSides]int
	order[0] = first
	for i, j := 0, 1; i < ss.n; i++ {
		if i != first {
			order[j] = i
			j++
		}
	}
	tokens := req.PromptTokens + req.MaxTokens
	for k, i := range order[:ss.n] {
		c := node.Call{Op: node.OpAcquire, Key: ss.s[i].key, Req: req}
		if k > 0 {
			c.Req.Wait = 0
		}
		o, err := r.decide(ctx, &c, tokens)
		if err != nil || !o.answer.Decision.Allowed {
			r.rollback(ss, &held, order[:k])
			if err != nil {
				return acquireResponse{}, i, err
			}
			return r.refusal(ss, &held, order[:k], i, o), i, nil
		}
		held[i] = o
		if k == 0 { // every other key follows the first one's estimate
			req.Reserve, tokens = o.answer.Decision.Reserved, o.answer.Decision.Reserved
		}
	}
	return r.admitted(ss, &held, tokens), -1, nil
}

// rollback cancels the reservations of ss's keys at indexes done, the
// last reserved first.
func (r *Router) rollback(ss *sideSet, held *[maxSides]outcome, done []int) {
	for k := len(done) - 1; k >= 0; k-- {
		i := done[k]
		r.undo(ss.s[i].key, held[i], node.OpCancel)
	}
}

// refusal is the answer of an acquire that key at bad refused with o,
// the keys at done having been reserved (and cancelled since): the reason
// and retry-after are the refusing key's, "limits" the tenant's status as
// its own answer reported it (the refusing key's when the tenant was not
// asked), "pool" the pool's when the pool refused.
func (r *Router) refusal(ss *sideSet, held *[maxSides]outcome, done []int, bad int, o outcome) acquireResponse {
	d := o.answer.Decision
	by := ss.s[bad]
	res := acquireResponse{Limits: limitsOf(d.Status), Owner: o.answer.Owner, Fallback: o.fallback,
		Reason: d.Reason.String(), RetryAfterMS: max(1, ceilMS(d.RetryAfter)), RefusedBy: by.label(), refused: by}
	for _, i := range done {
		if i == 0 {
			res.Limits, res.Owner = limitsOf(held[0].answer.Decision.Status), held[0].answer.Owner
		}
		res.Fallback = res.Fallback || held[i].fallback
	}
	if by.kind == KeyPool {
		res.Pool = &poolJSON{Name: by.name, Limits: limitsOf(d.Status)}
	}
	r.metrics.decision(by.metric(), res.Reason, o.fallback)
	return res
}

// admitted is the answer of an acquire every key of ss admitted: the
// lease names every key with its lease id, in chainOrder.
func (r *Router) admitted(ss *sideSet, held *[maxSides]outcome, reserved int64) acquireResponse {
	t := held[0].answer
	res := acquireResponse{Allowed: true, Limits: limitsOf(t.Decision.Status), Owner: t.Owner, ReservedTokens: reserved}
	l := lease{Tenant: ss.s[0].name, Node: r.cluster.Name()}
	for i := range ss.n {
		o := held[i]
		l.add(ss.s[i].key, o.answer.Decision.Lease, o.fallback)
		res.Fallback = res.Fallback || o.fallback
		if ss.s[i].kind == KeyPool {
			res.Pool = &poolJSON{Name: ss.s[i].name, Limits: limitsOf(o.answer.Decision.Status)}
		}
	}
	res.Lease, res.lease = r.leases.sign(l), l
	r.metrics.decision("none", "", res.Fallback) // allowed: no side refused
	return res
}

// undo rolls back (or releases) one side of an admission.
func (r *Router) undo(key string, o outcome, op node.Op) {
	if o.fallback {
		r.degraded.Release(key, o.answer.Decision.Lease)
		return
	}
	c := node.Call{Op: op, Key: key, Lease: o.answer.Decision.Lease}
	if _, err := r.decide(context.Background(), &c, 0); err != nil {
		r.log.Warn("rollback failed; the slot expires by its TTL", "key", key, "err", err)
	}
}

// levelJSON is one level of GET /v1/tenants/{t}'s "levels".
type levelJSON struct {
	Level  string     `json:"level"`
	Owner  string     `json:"owner"`
	Limits limitsJSON `json:"limits"`
}

// levelsStatus returns the status of every key an acquire of tenant for
// model would charge (sidesOf), in chainOrder, or the error or the side
// whose owner could not be reached (fallback true).
func (r *Router) levelsStatus(ctx context.Context, tenant, model string) (out []levelJSON, unreachable string, err error) {
	var ss sideSet
	r.sidesOf(tenant, model, &ss)
	out = make([]levelJSON, 0, ss.n)
	for _, s := range ss.s[:ss.n] {
		c := node.Call{Op: node.OpStatus, Key: s.key}
		o, err := r.decide(ctx, &c, 0)
		if err != nil {
			return nil, "", err
		}
		if o.fallback {
			return nil, s.label(), nil
		}
		out = append(out, levelJSON{Level: s.label(), Owner: o.answer.Owner, Limits: limitsOf(o.answer.Decision.Status)})
	}
	return out, "", nil
}

// renewInterval is a third of the shortest lease TTL of the lease's keys.
func (r *Router) renewInterval(tl limiter.Limits, l lease) time.Duration {
	ttl := tl.LeaseTTL
	if ttl <= 0 {
		ttl = limiter.DefaultLeaseTTL
	}
	for _, s := range l.all()[1:] {
		if t := r.cfg.Limits(s.key).LeaseTTL; t > 0 {
			ttl = min(ttl, t)
		}
	}
	return max(ttl/3, time.Millisecond)
}
