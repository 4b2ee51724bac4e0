package allot

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

// Refill is what refills found due for one key: the admissions of its
// slices that ended, to give back, and whether the next slice should be
// asked for, of the owner at addr.
type Refill struct {
	Key, Addr string
	Expired   []uint64 // admissions of slices that ended, to give back
	Ask       bool     // the caller asks the owner at Addr for the next slice, or ends the ask (Holder.Granted)
}

// Refills returns the keys whose refill is at or before now, and the
// earliest refill after now (zero: none). It clears the refills it
// returns; a key still hot (stillHot) and wanting more (wantsMore) is
// marked asking, and its ask is the caller's to make or end.
func (al *Holder) Refills(now time.Time) (due []Refill, next time.Time) {
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
				r := Refill{Key: key, Addr: k.addr, Expired: k.dropExpired(now, "")}
				r.Ask = al.stillHot(k, now) && k.wantsMore(now)
				if r.Ask || len(r.Expired) > 0 {
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
