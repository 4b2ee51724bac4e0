package limiter

import "math"

// A Budget's leases: stored, dropped, expired, and the requests each
// counts.

// expire drops every lease whose slot has expired at t. It scans the leases
// only when the earliest expiry has passed, so its cost is paid by the
// leases it frees (plus one scan each time the earliest lease was settled).
func (b *Budget) expire(t int64) {
	if len(b.leases) == 0 || t < b.minExp {
		return
	}
	b.rescan(t)
}

// rescan deletes the leases expired at t and recomputes minExp and maxExp
// exactly.
func (b *Budget) rescan(t int64) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for id, l := range b.leases {
		if t >= l.expiry {
			delete(b.leases, id)
			delete(b.hits, id)
			b.endSpend(id, reservedCost) // an expired lease's reservation is spent
			b.endFlow(id, l.bucket, 0, 0)
			continue
		}
		lo, hi = min(lo, l.expiry), max(hi, l.expiry)
	}
	b.minExp, b.maxExp, b.maxStale = lo, hi, false
}

// putLease stores lease id, keeping minExp and maxExp bounds.
func (b *Budget) putLease(id uint64, l lease) {
	if b.leases == nil {
		b.leases = make(map[uint64]lease)
	}
	if len(b.leases) == 0 {
		b.minExp, b.maxExp, b.maxStale = l.expiry, l.expiry, false
	} else {
		b.minExp = min(b.minExp, l.expiry)
		if l.expiry >= b.maxExp {
			b.maxExp, b.maxStale = l.expiry, false
		}
	}
	b.leases[id] = l
}

// dropLease frees lease id's slot.
func (b *Budget) dropLease(id uint64, l lease) {
	delete(b.leases, id)
	b.forgetHits(id)
	if l.expiry >= b.maxExp {
		b.maxStale = true
	}
}

// leaseHits is how many requests live lease id counts.
func (b *Budget) leaseHits(id uint64) int64 {
	if n, ok := b.hits[id]; ok {
		return n
	}
	return 1
}

// forgetHits drops what b.hits holds for id, a lease that is gone. The
// map stays, like leases, for the next admission of several requests.
// (rescan deletes from it directly, the runtime's delete being a no-op on
// an empty map: the call would make slotReset too costly to inline.)
func (b *Budget) forgetHits(id uint64) {
	if len(b.hits) > 0 {
		delete(b.hits, id)
	}
}
