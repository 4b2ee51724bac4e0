package router

import (
	"context"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// Lease is what the opaque lease string handed to clients carries (the
// decision API signs it): every key the acquire charged (the tenant's
// first, then the others in chainOrder) with its lease id, enough to route
// complete and renew to each key's owner.
type Lease struct {
	Tenant string
	// Node is the node that admitted it: the only one that holds its
	// sides admitted by the fallback.
	Node  string
	n     int
	sides [MaxSides]LeaseSide
}

// LeaseSide is one key of a lease.
type LeaseSide struct {
	Key string
	ID  uint64
	// Fallback marks a side admitted by the fallback of node Node while
	// its owner was unreachable.
	Fallback bool
}

// Add appends a side; a lease holds at most MaxSides.
func (l *Lease) Add(key string, id uint64, fallback bool) {
	if l.n < MaxSides {
		l.sides[l.n] = LeaseSide{key, id, fallback}
		l.n++
	}
}

// Sides returns l's sides, the tenant's first. The slice is l's own
// storage: changing it changes l.
func (l *Lease) Sides() []LeaseSide { return l.sides[:l.n] }

// LeaseCall runs op for every side of l, one after the other: settles
// each key with the same usage, renews or releases or cancels each. ok is
// true when every side found its lease. Status and expiry are the
// tenant's.
func (r *Router) LeaseCall(ctx context.Context, l Lease, op node.Op, usage limiter.Usage) (ok bool, status limiter.Status, expires time.Time) {
	if r.cfg.Tracer != nil && needsSpan(ctx, true) {
		return r.leaseTraced(ctx, l, op, usage) // trace.go
	}
	sides := l.Sides()
	var ran [MaxSides]bool
	var answers [MaxSides]node.Answer
	r.leaseRuns(ctx, sides, op, usage, &ran, &answers)
	ok = true
	for i, s := range sides {
		var found bool
		var a node.Answer
		switch {
		case ran[i]:
			found, a = answers[i].OK, answers[i]
		case s.Fallback && op == node.OpRenew:
			found = true // local slots live one lease TTL; a degraded period is short
		case s.Fallback:
			// Only the node that admitted it holds a fallback slot; elsewhere
			// it expires there by its TTL.
			found = l.Node == r.cluster.Name() && r.degraded.Release(s.Key, s.ID)
		default:
			c := node.Call{Op: op, Key: s.Key, Lease: s.ID, Usage: usage}
			o, err := r.decide(ctx, &c, 0)
			found, a = err == nil && !o.fallback && o.answer.OK, o.answer
		}
		ok = ok && found
		if i == 0 {
			status, expires = a.Decision.Status, a.Expires
		}
	}
	return ok, status, expires
}

// leaseRuns runs op for the sides of a lease that another member owns, by
// this node's ring, in one call for each member owning two or more of them
// (node.RunCall; the order of a lease's settles, renewals and releases
// does not matter), and marks in ran the sides it got answers for. The
// others, and those of a run that failed, LeaseCall asks one by one.
func (r *Router) leaseRuns(ctx context.Context, sides []LeaseSide, op node.Op, usage limiter.Usage, ran *[MaxSides]bool, answers *[MaxSides]node.Answer) {
	rg := r.cluster.Ring()
	if rg == nil || len(sides) < 2 {
		return
	}
	var owners [MaxSides]string
	for i, s := range sides {
		if m, ok := rg.Owner(s.Key); ok && !s.Fallback && m.Name != r.cluster.Name() {
			owners[i] = m.Name
		}
	}
	var calls [MaxSides]node.Call
	var at [MaxSides]int
	for i := range sides {
		if owners[i] == "" {
			continue
		}
		n := 0
		for j := i; j < len(sides); j++ {
			if owners[j] == owners[i] {
				calls[n] = node.Call{Op: op, Key: sides[j].Key, Lease: sides[j].ID, Usage: usage}
				at[n] = j
				n++
			}
		}
		for k := range n {
			owners[at[k]] = "" // asked now: what the run does not answer is asked alone
		}
		if n < 2 {
			continue
		}
		c := node.RunCall(calls[:n])
		o, err := r.decide(ctx, &c, 0)
		if err != nil || o.fallback {
			continue
		}
		got, _, err := node.RunAnswers(o.answer)
		if err != nil || len(got) > n {
			continue
		}
		for k, a := range got {
			ran[at[k]], answers[at[k]] = true, a
		}
	}
}
