package router

// Rollbacks that find their key's owner out of reach, sent again.

import (
	"context"
	"sync"
	"time"

	"github.com/tokenring/tokenring/node"
)

// maxRedeliveries bounds the rollbacks waiting to be sent again at once:
// beyond it a rollback is dropped and logged, its reservation left to
// expire with the window (its slot with the lease TTL), as before.
const maxRedeliveries = 10_000

// redeliveries sends again, every DebtInterval, the rollbacks (a chain's
// cancels, a lease's releases) whose key's owner could not be reached: the
// owner crashed, or the key's partition was on its way. A reservation the
// owner made (and, with sync replication, copied) outlives it at whoever
// restores the key: left there, it would be a charge at one level of a
// chain that refused at another. Each rollback is sent until an owner takes
// it or the key's window and lease TTL have passed (after which the
// reservation counts nothing anyway). A cancel or a release is idempotent
// at the owner: a lease id is given back once, whatever the repeats.
// Close stops them. Safe for concurrent use.
type redeliveries struct {
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending int
}

func newRedeliveries() *redeliveries {
	ctx, stop := context.WithCancel(context.Background())
	return &redeliveries{ctx: ctx, stop: stop}
}

// close stops every redelivery and waits for them.
func (d *redeliveries) close() {
	d.stop()
	d.wg.Wait()
}

// undo rolls back (or releases) one side of an admission; when the key's
// owner is out of reach, it is sent again later (redeliveries).
func (r *Router) undo(key string, o outcome, op node.Op) {
	if o.fallback {
		r.degraded.Release(key, o.answer.Decision.Lease)
		return
	}
	c := node.Call{Op: op, Key: key, Lease: o.answer.Decision.Lease}
	got, err := r.decide(context.Background(), &c, 0)
	switch {
	case err == nil && !got.fallback:
		return // the owner took it
	case err == nil || slowOwner(err):
		r.redeliver(c)
	default:
		r.log.Warn("rollback failed; the slot expires by its TTL", "key", key, "err", err)
	}
}

// slowOwner reports whether err is an owner that was alive but did not
// answer in time: it may or may not have taken the call, and sending it
// again is harmless.
func slowOwner(err error) bool {
	_, slow := err.(*OwnerTimeoutError)
	return slow
}

// redeliver sends c again every DebtInterval until an owner takes it (an
// answer that is not the fallback's) or its key's window and lease TTL
// have passed.
func (r *Router) redeliver(c node.Call) {
	d := r.redeliveries
	d.mu.Lock()
	if d.pending >= maxRedeliveries {
		d.mu.Unlock()
		r.log.Warn("rollback dropped: too many waiting for their owners; the slot expires by its TTL", "key", c.Key, "waiting", maxRedeliveries)
		return
	}
	d.pending++
	d.mu.Unlock()
	lim := r.cfg.Limits(c.Key)
	horizon := r.cfg.Now().Add(lim.Window + lim.LeaseTTL)
	d.wg.Go(func() {
		defer func() {
			d.mu.Lock()
			d.pending--
			d.mu.Unlock()
		}()
		t := time.NewTicker(r.cfg.DebtInterval)
		defer t.Stop()
		for tries := 1; ; tries++ {
			select {
			case <-d.ctx.Done():
				return
			case <-t.C:
			}
			if r.cfg.Now().After(horizon) {
				r.log.Warn("rollback not delivered before its reservation expired", "op", c.Op.String(), "key", c.Key, "tries", tries)
				return
			}
			if got, err := r.decide(d.ctx, &c, 0); err == nil && !got.fallback {
				r.log.Info("rollback delivered to the key's owner after it was out of reach", "op", c.Op.String(), "key", c.Key, "owner", got.answer.Owner, "tries", tries)
				return
			}
		}
	})
}
