package node

// Renewals: a hot key's next slice asked for as its owner's bucket ends.
//
// Each key's slices end with its owner's bucket, and every key's buckets
// end together. Asked for only at the key's next forward, the next slice
// would cost every hot key a forward at the start of every bucket, and all
// of them would ask at once then. So a slice granted sets its key's
// renewal, the slice's deadline plus the round trip of the ask that
// brought it: the owner measured what its bucket had left between the
// ask's sending and its answer, so by then the bucket has ended whatever
// either clock reads. One goroutine a node (renewing) sleeps until the
// earliest renewal, gives back what the ended slices did not hand out,
// and asks for the next slice of each key still hot.

import "time"

// renewal is what renewals found due for one key: the admissions of its
// slices that ended, to give back, and whether the next slice should be
// asked for, of the owner at addr.
type renewal struct {
	key, addr string
	expired   []uint64
	ask       bool
}

// renewals returns the keys whose renewal is at or before now, and the
// earliest renewal after now (zero: none). It clears the renewals it
// returns; a key still hot (stillHot) and wanting more (wantsMore) is
// marked asking, and its ask is the caller's to make or end.
func (al *allotments) renewals(now time.Time) (due []renewal, next time.Time) {
	al.wakeAt.Store(0) // grants made while this looks nudge it again
	for i := range al.shards {
		sh := &al.shards[i]
		sh.mu.Lock()
		for key, k := range sh.keys {
			switch {
			case k.renew.IsZero():
			case now.Before(k.renew):
				if next.IsZero() || k.renew.Before(next) {
					next = k.renew
				}
			default:
				k.renew = time.Time{}
				r := renewal{key: key, addr: k.addr, expired: k.dropExpired(now, "")}
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

// renewing asks for hot keys' next slices as their owners' buckets end
// (allotments.renewals), sleeping until the earliest is due.
func (n *Node) renewing() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.allot.nudge:
		case <-t.C:
		}
		next := n.renewSlices()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(0, next.Sub(n.cfg.Now()))
		}
		t.Reset(wait)
	}
}

// renewSlices gives back the admissions of the slices that ended with
// their bucket and asks for the next of the keys still hot; it returns
// when the next renewal is due (zero: none is).
func (n *Node) renewSlices() time.Time {
	now := n.cfg.Now()
	due, next := n.allot.renewals(now)
	for _, r := range due {
		if len(r.expired) > 0 {
			n.background(func() { n.cancelAdmissions(r.key, r.expired, time.Time{}) })
		}
		switch {
		case !r.ask:
		case n.leaving.Load() || !n.peerUp(r.addr):
			n.allot.granted(r.key, r.addr, now, now, 0, Answer{}, ErrClosed) // ends the ask
		default:
			n.background(func() { n.askSlice(r.key, r.addr) })
		}
	}
	return next
}

// peerUp reports whether this node has a connection to the peer at addr
// up; unlike peer, it makes no client for an address it has none for.
func (n *Node) peerUp(addr string) bool {
	n.mu.Lock()
	p := n.peers[addr]
	n.mu.Unlock()
	return p != nil && p.up()
}
