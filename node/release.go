package node

import (
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// ReleaseSink receives a key's status as this member last counted it, at
// now, just before the key's state leaves this member's table: frozen for
// a handoff to the key's new owner, or taken when this member fences
// itself. It is what this member's fallback starts from if the key's new
// owner cannot be reached, in place of a report from every local decision.
// It is called with the key's partition gate held, before any call for the
// key goes elsewhere, and must not call back into the Node.
type ReleaseSink func(key string, st limiter.Status, now time.Time)

// OnRelease sets where the statuses of keys leaving this member's table go
// (the router's fallback). Set it before Join.
func (n *Node) OnRelease(sink ReleaseSink) { n.releaseSink.Store(&sink) }

// takeOut stops deciding for key here, at now: its queued waiters are told
// to follow the key (local.moveAll), its status goes to the release sink,
// if any, and then its state leaves the table as a snapshot (in that
// order, so that a fallback here finds the key either in the table or
// released). false if the table does not hold the key (swept meanwhile:
// idle, nothing to hand on). Callers hold every partition gate the key
// may be decided under, so nothing changes its count meanwhile.
func (n *Node) takeOut(key string, now time.Time) ([]byte, bool) {
	var st limiter.Status
	held := n.table.Peek(key, func(b *limiter.Budget) {
		b.DrainWaiters(now, nil)
		st = b.Status(now)
	})
	n.local.moveAll(key)
	if s := n.releaseSink.Load(); s != nil && held {
		(*s)(key, st, now)
	}
	return n.table.Take(key)
}

// Held returns key's status if this member's table holds the key's state:
// what a fallback here may start from while this member holds the key but
// cannot decide for it (its mandate lapsed), exactly as counted. It only
// reads; false if the key is not here.
func (n *Node) Held(key string) (st limiter.Status, ok bool) {
	now := n.cfg.Now()
	ok = n.table.Peek(key, func(b *limiter.Budget) { st = b.Status(now) })
	return st, ok
}
