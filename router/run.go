package router

// Runs: consecutive keys of a chain that one other member owns, decided
// there in one call (node.RunCall) instead of one round trip each.

import (
	"context"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// runLen is how many of the keys at order (ss's indexes, in the order an
// attempt reserves them) from the first on make a run: owned, by this
// node's ring, by one member other than this node. 1 or less means no
// run. A first key that waits (wait_ms) is never part of a run.
func (r *Router) runLen(ss *sideSet, order []int, waits bool) int {
	rg := r.cluster.Ring()
	if rg == nil || waits || len(order) < 2 {
		return 0
	}
	owner, ok := rg.Owner(ss.s[order[0]].Key)
	if !ok || owner.Name == r.cluster.Name() {
		return 0
	}
	m := 1
	for m < len(order) {
		o, ok := rg.Owner(ss.s[order[m]].Key)
		if !ok || o.Name != owner.Name {
			break
		}
		m++
	}
	return m
}

// decideRun asks the owner of ss's keys at order to reserve req at each,
// in that order, in one call, as reserveAll would one by one (without a
// wait; the first key's estimate for the others when the run starts the
// attempt, else req.Reserve). It returns the outcomes of the keys the
// owner decided, in order: every one admitted but possibly the last.
// Fewer than asked means the run stopped there (a refusal, or a key that
// failed there: reserveAll then asks that key alone, with the fallback
// when its owner cannot be reached); none means the run could not be
// asked (its owner unreachable: reserveAll asks each key alone, and each
// falls back). An error is decide's for an owner alive but slow, or the
// client gone: nothing of the run is known to be reserved, and nothing is
// asked again.
func (r *Router) decideRun(ctx context.Context, ss *sideSet, order []int, req limiter.Request, tokens int64) ([]outcome, error) {
	var calls [MaxSides]node.Call
	for k, i := range order {
		calls[k] = node.Call{Op: node.OpAcquire, Key: ss.s[i].Key, Req: ss.reqFor(i, req), Limits: ss.sent[i]}
		calls[k].Req.Wait = 0
	}
	c := node.RunCall(calls[:len(order)])
	o, err := r.decide(ctx, &c, tokens)
	if err != nil || o.fallback {
		return nil, err
	}
	answers, _, err := node.RunAnswers(o.answer)
	if err != nil || len(answers) > len(order) {
		return nil, nil
	}
	end := r.cfg.Now()
	outs := make([]outcome, len(answers))
	for k, a := range answers {
		if a.Decision.Reason == limiter.TableFull {
			return outs[:k], nil // asked alone, it answers the TableFullError
		}
		outs[k] = outcome{answer: a}
		if a.Owner != r.cluster.Name() {
			r.degraded.Report(calls[k].Key, a.Decision.Status, end)
		}
	}
	return outs, nil
}
