package node

import (
	"context"
	"fmt"

	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
)

// Runs: consecutive keys of one request that the router believes one
// member owns, sent as one call (peer.OpRun, node/peer/run.go). A run
// changes how many round trips a chain costs, never what is decided: each
// of its calls is executed by Do, routed by its own key, exactly as if it
// had been forwarded alone, in the run's order.

// RunCall is the call that executes calls (1 to peer.MaxRun acquires,
// settles, releases, cancels, renewals or statuses) as one run at the
// member holding the first one's key. Its answer's State holds theirs
// (RunAnswers).
func RunCall(calls []Call) Call {
	return Call{Op: peer.OpRun, Key: calls[0].Key, State: peer.AppendRun(nil, calls)}
}

// RunAnswers decodes the answer to a RunCall: one answer for each call
// executed, in order. The run stops at the first acquire refused, or
// before the first call that failed, whose error text is failed.
func RunAnswers(a Answer) (answers []Answer, failed string, err error) {
	return peer.DecodeRunAnswers(a.State)
}

// run executes the run c here: forwarded whole to the member every one of
// its keys is routed to, when there is one (and no acquire of it could be
// served from a slice held here); else its calls one after the other
// through Do, stopping at the first acquire refused or the first error.
// Acquires after the first that ask no reservation of their own reserve
// what the first reserved.
func (n *Node) run(ctx context.Context, c *Call) (Answer, error) {
	calls, err := peer.DecodeRun(c.State)
	if err != nil {
		return Answer{}, fmt.Errorf("run %q at %s: %w", c.Key, n.cfg.Name, err)
	}
	if addr, ok := n.runRoute(calls, c.Hops); ok {
		return n.forwardRun(ctx, c, calls, addr)
	}
	answers := make([]Answer, 0, len(calls))
	var failed string
	var reserve int64
	for i := range calls {
		sub := calls[i]
		sub.Hops = c.Hops
		if sub.Op == OpAcquire && i > 0 && sub.Req.Reserve == 0 {
			sub.Req.Reserve = reserve
		}
		a, err := n.Do(ctx, sub)
		if err != nil {
			failed = err.Error()
			break
		}
		answers = append(answers, a)
		if sub.Op == OpAcquire {
			if !a.Decision.Allowed {
				break
			}
			if i == 0 {
				reserve = a.Decision.Reserved
			}
		}
	}
	return Answer{Owner: n.cfg.Name, OK: true, State: peer.AppendRunAnswers(nil, answers, failed)}, nil
}

// runRoute returns the member every call of a run would be forwarded to
// from here, if there is one: each key's partition forwarded to the same
// member, no acquire served from a slice held here, and a hop left.
func (n *Node) runRoute(calls []Call, hops uint8) (addr string, ok bool) {
	t := n.tr.Load()
	if t == nil || int(hops) >= n.cfg.MaxHops || n.fenced.Load() {
		return "", false
	}
	r := n.ring.Load()
	for i := range calls {
		h := t.gates[r.Partition(calls[i].Key)].hop.Load()
		if h.mode != custody.RouteForward || (i > 0 && h.addr != addr) {
			return "", false
		}
		if calls[i].Op == OpAcquire && n.holder != nil && n.holder.Sliced(calls[i].Key) {
			return "", false
		}
		addr = h.addr
		calls[i].Handed = h.handed
	}
	return addr, true
}

// forwardRun sends the run c, whose calls all go to addr, there in one
// call, and counts its acquires as forwarded for the hot-key watch (a key
// grown hot is asked a slice for, and leaves runs while it holds one),
// when the run came from this member's router.
func (n *Node) forwardRun(ctx context.Context, c *Call, calls []Call, addr string) (Answer, error) {
	fwd := Call{Op: peer.OpRun, Key: c.Key, Hops: c.Hops + 1, State: peer.AppendRun(nil, calls)}
	a, err := n.forward(ctx, addr, &fwd)
	if err != nil || n.holder == nil || c.Hops != 0 {
		return a, err
	}
	now := n.cfg.Now()
	for i := range calls {
		if calls[i].Op == OpAcquire && n.holder.Forwarded(&calls[i], now) {
			key := calls[i].Key
			n.background(func() { n.askSlice(key, addr) })
		}
	}
	return a, nil
}

// runInline reports whether every call of the run c may be executed on the
// peer connection's reader (inline): all decided here at once.
func (n *Node) runInline(c *Call) bool {
	calls, err := peer.DecodeRun(c.State)
	if err != nil {
		return true // refused at once
	}
	for i := range calls {
		if !n.inline(&calls[i]) {
			return false
		}
	}
	return true
}
