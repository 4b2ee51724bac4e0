package node

// Refills: a hot key's next slice asked for as its owner's bucket ends.
//
// Each key's slices end with its owner's bucket, and every key's buckets
// end together. Asked for only at the key's next forward, the next slice
// would cost every hot key a forward at the start of every bucket, and all
// of them would ask at once then. So a slice granted sets its key's
// refill, the slice's deadline plus the round trip of the ask that
// brought it: the owner measured what its bucket had left between the
// ask's sending and its answer, so by then the bucket has ended whatever
// either clock reads. One goroutine a node (refilling) sleeps until the
// earliest refill, gives back what the ended slices did not hand out,
// and asks for the next slice of each key still hot.

import "time"

// refill is what refills found due for one key: the admissions of its
// slices that ended, to give back, and whether the next slice should be
// asked for, of the owner at addr.
type refill struct {
	key, addr string
	expired   []uint64
	ask       bool
}

// refills returns the keys whose refill is at or before now, and the
// earliest refill after now (zero: none). It clears the refills it
// returns; a key still hot (stillHot) and wanting more (wantsMore) is
// marked asking, and its ask is the caller's to make or end.
func (al *allotments) refills(now time.Time) (due []refill, next time.Time) {
	al.wakeAt.Store(0) // grants made while this looks nudge it again
	for i := range al.shards {
		sh := &al.shards[i]
		sh.mu.Lock()
		for key, k := range sh.keys {
			switch {
			case k.refill.IsZero():
			case now.Before(k.refill):
				if next.IsZero() || k.refill.Before(next) {
					next = k.refill
				}
			default:
				k.refill = time.Time{}
				r := refill{key: key, addr: k.addr, expired: k.dropExpired(now, "")}
				r.ask = al.stillHot(k, now) && k.wantsMore(now)
				if r.ask || len(r.expired) > 0 {
					due = append(due, r)
				}
			}
		}
		sh.mu.Unlock()
	}
	if !next.IsZero() {
		al.wakeAt.Store(next.UnixNano())
	}
	return due, next
}

// refilling asks for hot keys' next slices as their owners' buckets end
// (allotments.refills), sleeping until the earliest is due.
func (n *Node) refilling() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.allot.nudge:
		case <-t.C:
		}
		next := n.refillSlices()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(0, next.Sub(n.cfg.Now()))
		}
		t.Reset(wait)
	}
}

// refillSlices gives back the admissions of the slices that ended with
// their bucket and asks for the next of the keys still hot; it returns
// when the next refill is due (zero: none is).
func (n *Node) refillSlices() time.Time {
	now := n.cfg.Now()
	due, next := n.allot.refills(now)
	for _, r := range due {
		if len(r.expired) > 0 {
			n.background(func() { n.cancelAdmissions(r.key, r.expired, time.Time{}) })
		}
		switch {
		case !r.ask:
		case n.leaving.Load() || !n.peers.Up(r.addr):
			n.allot.granted(r.key, r.addr, now, now, 0, Answer{}, ErrClosed) // ends the ask
		default:
			n.background(func() { n.askSlice(r.key, r.addr) })
		}
	}
	return next
}
