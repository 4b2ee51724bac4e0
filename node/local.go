package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/allot"
	"github.com/tokenring/tokenring/node/internal/shrink"
	"github.com/tokenring/tokenring/node/peer"
)

// local executes Calls against the keys this node holds. It owns the limiter
// table and the blocking the limiter leaves to its caller: waiters parked on
// channels and a timer per key with waiters.
type local struct {
	name    string
	table   *limiter.Table
	now     func() time.Time
	changed func(key string) // told of every key whose state an operation may have changed; may be nil
	// guard, if set, admits a background change (a timer's wake, a
	// withdrawn waiter) to key only while this node decides for it,
	// holding its partition's gate until unlock.
	guard func(key string) (unlock func(), ok bool)
	// sweepEvery is the table's sweep interval: the retry-after of a call
	// refused because the table is full (the next sweep may free room).
	sweepEvery time.Duration

	mu      sync.Mutex                // guards waiters, timers and closed
	waiters map[waiterID]chan waiting // one per queued ticket, buffered 1
	timers  map[string]*time.Timer    // one per key with waiters
	closed  bool
	// waitersSize and timersSize let the two maps shrink (internal/shrink)
	// after a burst of waiting keys.
	waitersSize, timersSize shrink.HighWater
	// overdrawn counts the tokens settles charged here past their key's
	// token limit (limiter.Budget.SettleOverdrawn).
	overdrawn atomic.Int64
}

type waiterID struct {
	key    string
	ticket uint64
}

// waiting is what a queued acquire receives: its decision, or word that
// its key left this node (moved), so the call follows the key.
type waiting struct {
	d     limiter.Decision
	moved bool
}

// errMoved is await's error for a waiter whose key was handed to another
// node: the caller sends the call after its key.
var errMoved = errors.New("key moved while queued")

func newLocal(name string, table *limiter.Table, now func() time.Time) *local {
	return &local{
		name:    name,
		table:   table,
		now:     now,
		waiters: make(map[waiterID]chan waiting),
		timers:  make(map[string]*time.Timer),
	}
}

// do executes c here. An acquire that queues blocks until it is granted, its
// deadline passes (a refusal), its key moves away (errMoved) or ctx ends
// (the waiter is withdrawn and ctx's error returned).
func (l *local) do(ctx context.Context, c *Call) (Answer, error) {
	a, ch, err := l.start(c)
	if ch == nil || err != nil {
		return a, err
	}
	return l.await(ctx, c.Key, a, ch)
}

// start executes c here without blocking; a queued acquire comes back with
// the channel to await. The caller holds the key's partition gate.
func (l *local) start(c *Call) (Answer, chan waiting, error) {
	a, ch, err := l.decide(c)
	// Mark after the operation: a replication round that drained the mark
	// before the change was made would copy the state without it. Refusals
	// and misses change nothing worth copying.
	if l.changed != nil && err == nil && (a.Decision.Allowed || a.Decision.Queued || a.OK) {
		l.changed(c.Key)
	}
	return a, ch, err
}

// decide executes c on the table; start wraps it.
func (l *local) decide(c *Call) (Answer, chan waiting, error) {
	now := l.now()
	a := Answer{Owner: l.name}
	var next time.Time
	var wake bool
	var ch chan waiting
	switch c.Op {
	case OpAcquire:
		err := l.table.Do(c.Key, now, func(b *limiter.Budget) {
			if c.Limits != nil {
				b.SetSentLimits(*c.Limits) // the newest request's, as it is decided
			}
			a.Decision = b.Acquire(now, c.Req)
			if a.Decision.Queued {
				ch = make(chan waiting, 1)
				l.mu.Lock()
				l.waiters[waiterID{c.Key, a.Decision.Ticket}] = ch
				l.waitersSize.Grew(len(l.waiters))
				l.mu.Unlock()
				next, wake = b.NextWake(now)
			}
		})
		if err != nil {
			a.Decision = l.tableFull()
			return a, nil, nil
		}
		if ch != nil {
			l.schedule(c.Key, next, wake)
		}
		return a, ch, nil
	case OpSettle, OpRelease, OpCancel:
		l.changeLocked(c.Key, func(now time.Time, b *limiter.Budget) bool {
			switch c.Op {
			case OpSettle:
				var over int64
				if a.OK, over = b.SettleOverdrawn(now, c.Lease, c.Usage); over > 0 {
					l.overdrawn.Add(over)
				}
			case OpRelease:
				a.OK = b.Release(now, c.Lease)
			default:
				a.OK = b.Cancel(now, c.Lease)
			}
			a.Decision.Status = b.Status(now)
			return a.OK
		})
		return a, nil, nil
	case OpRenew:
		l.table.Peek(c.Key, func(b *limiter.Budget) {
			a.Expires, a.OK = b.Renew(now, c.Lease)
			a.Decision.Status = b.Status(now)
		})
		return a, nil, nil
	case peer.OpAllot, peer.OpReturn:
		a, err := l.slices(c, now)
		return a, nil, err
	case OpStatus:
		if err := l.table.Do(c.Key, now, func(b *limiter.Budget) { a.Decision.Status = b.Status(now) }); err != nil {
			a.Decision = l.tableFull()
		}
		return a, nil, nil
	case OpCharge:
		// A debt: counted in the key's window (created if the key is new
		// here), or dropped if its time has left the window. Either way it
		// is settled: OK acknowledges it, and marks the key changed so
		// that replication (sync mode: before this answer) copies it. It
		// holds counted units: MaxKeys never refuses it.
		l.table.DoUncapped(c.Key, now, func(b *limiter.Budget) {
			b.Charge(now, c.Charge.At, c.Charge.Requests, c.Charge.Tokens)
			a.Decision.Status = b.Status(now)
		})
		a.OK = true
		return a, nil, nil
	}
	return a, nil, fmt.Errorf("call %s on %q: unknown op", c.Op, c.Key)
}

// tableFull is the refusal of a call for a new key at a table holding
// MaxKeys keys (limiter.ErrTableFull): Reason limiter.TableFull, retry
// after the next sweep, which may drop idle keys.
func (l *local) tableFull() limiter.Decision {
	return limiter.Decision{Reason: limiter.TableFull, RetryAfter: max(l.sweepEvery, time.Second)}
}

// await blocks a queued acquire until its grant arrives or ctx ends.
func (l *local) await(ctx context.Context, key string, a Answer, ch chan waiting) (Answer, error) {
	ticket := a.Decision.Ticket
	select {
	case w := <-ch:
		if w.moved {
			return a, fmt.Errorf("wait on %q: %w", key, errMoved)
		}
		a.Decision = w.d
		return a, nil
	case <-ctx.Done():
	}
	withdrawn := false
	l.change(key, func(now time.Time, b *limiter.Budget) bool {
		withdrawn = b.CancelWait(now, ticket)
		return withdrawn // the withdrawn waiter may have been the head blocking others
	})
	if !withdrawn {
		// The grant was already taken from the queue and is on its way:
		// receive it and roll back an admission nobody will use.
		if w := <-ch; !w.moved && w.d.Allowed {
			l.change(key, func(now time.Time, b *limiter.Budget) bool { return b.Cancel(now, w.d.Lease) })
		}
	}
	l.mu.Lock()
	delete(l.waiters, waiterID{key, ticket})
	l.waiters = shrink.Map(&l.waitersSize, l.waiters)
	l.mu.Unlock()
	return a, fmt.Errorf("wait on %q: %w", key, ctx.Err())
}

// deliver hands grants to their waiters. Channels are buffered, so it never blocks.
func (l *local) deliver(key string, grants []limiter.Grant) {
	if len(grants) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range grants {
		id := waiterID{key, g.Ticket}
		if ch, ok := l.waiters[id]; ok {
			delete(l.waiters, id)
			ch <- waiting{d: g.Decision}
		}
	}
	l.waiters = shrink.Map(&l.waitersSize, l.waiters)
}

// moveAll tells every waiter parked for key that the key left this node
// (the caller drained them from its queue first): each call follows it to
// the new owner.
func (l *local) moveAll(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, ch := range l.waiters {
		if id.key == key {
			delete(l.waiters, id)
			ch <- waiting{moved: true}
		}
	}
	if t := l.timers[key]; t != nil {
		t.Stop()
		delete(l.timers, key)
	}
	l.waiters = shrink.Map(&l.waitersSize, l.waiters)
	l.timers = shrink.Map(&l.timersSize, l.timers)
}

// schedule arms key's timer for the limiter's next wake-up, or stops it.
func (l *local) schedule(key string, at time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.timers[key]
	if !ok || l.closed {
		if t != nil {
			t.Stop()
			delete(l.timers, key)
			l.timers = shrink.Map(&l.timersSize, l.timers)
		}
		return
	}
	d := at.Sub(l.now())
	if d < 0 {
		d = 0
	}
	if t != nil {
		t.Reset(d)
		return
	}
	l.timers[key] = time.AfterFunc(d, func() { l.wake(key) })
	l.timersSize.Grew(len(l.timers))
}

// change is changeLocked for background work (timers, withdrawn waiters):
// it takes the key's partition gate first, and does nothing when this node
// no longer decides for the key.
func (l *local) change(key string, fn func(now time.Time, b *limiter.Budget) bool) {
	if l.guard != nil {
		unlock, ok := l.guard(key)
		if !ok {
			return
		}
		defer unlock()
	}
	l.changeLocked(key, fn)
}

// changeLocked runs fn on key's budget, if the key is held here. When fn
// reports that capacity may have been freed, the queue is woken: its grants
// are delivered and the key's timer re-armed. The caller holds the key's
// partition gate.
func (l *local) changeLocked(key string, fn func(now time.Time, b *limiter.Budget) bool) {
	now := l.now()
	var grants []limiter.Grant
	var next time.Time
	var freed, wake bool
	l.table.Peek(key, func(b *limiter.Budget) {
		if freed = fn(now, b); freed {
			grants = b.Wake(now, nil)
			next, wake = b.NextWake(now)
		}
	})
	if freed {
		if l.changed != nil {
			l.changed(key) // grants admitted waiters
		}
		l.deliver(key, grants)
		l.schedule(key, next, wake)
	}
}

// wake runs the limiter's Wake for key: the key's timer fired.
func (l *local) wake(key string) {
	l.change(key, func(time.Time, *limiter.Budget) bool { return true })
}

// waiting reports how many requests are queued on this node.
func (l *local) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters)
}

// close stops every timer. Queued waiters are refused by their own deadlines
// or contexts.
func (l *local) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for k, t := range l.timers {
		t.Stop()
		delete(l.timers, k)
	}
}

// slices runs OpAllot (admissions made in advance for a forwarder to hand
// out, allot.Allot) and OpReturn (those it did not hand out, cancelled).
func (l *local) slices(c *Call, now time.Time) (Answer, error) {
	a := Answer{Owner: l.name}
	if c.Op == peer.OpAllot {
		if err := l.table.Do(c.Key, now, func(b *limiter.Budget) { a = allot.Allot(b, now, c) }); err != nil {
			a.Decision = l.tableFull()
		}
		a.Owner = l.name
		return a, nil
	}
	_, ids, err := allot.DecodeGrant(c.State)
	if err != nil {
		return a, fmt.Errorf("call %s on %q: %w", c.Op, c.Key, err)
	}
	var cancelled []uint64
	l.changeLocked(c.Key, func(now time.Time, b *limiter.Budget) bool {
		for _, id := range ids {
			if b.Cancel(now, id) {
				cancelled = append(cancelled, id)
			}
		}
		a.Decision.Status = b.Status(now)
		return len(cancelled) > 0
	})
	a.OK, a.State = true, allot.AppendGrant(nil, 0, cancelled) // the ones it found
	return a, nil
}
