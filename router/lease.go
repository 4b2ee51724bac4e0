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
	ok = true
	for i, s := range l.Sides() {
		var found bool
		var a node.Answer
		switch {
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
