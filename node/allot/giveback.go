package allot

// Giving allotted admissions back: what a holder did not hand out before
// its slice ended goes back to the key's owner (OpReturn), and what could
// not go back yet is owed until it can (node/allot.go does the calls).

import (
	"slices"
	"sync"
	"time"
)

// ReturnHorizon is how long admissions that could not be given back
// are tried again: past it, their bucket has left a minute's window and
// their leases' default TTL has run out, so giving them back changes
// nothing. ReturnRetry is the least time between two tries.
//
// recallFor is how long admissions given back are remembered, to be
// given back again when the ring moves: an owner that crashes loses what
// changed since its last replication round, returns included, so its
// backup's copy still counts admissions its holders gave back; given back
// again to the key's new owner (which decides only once it has that copy),
// they are cancelled there too. Giving back is idempotent: a lease id is
// cancelled at most once, and one never handed out names no caller's
// lease. The recall covers the time a crash takes to move the ring
// (gossip's failure detection) and a replication round.
const (
	ReturnHorizon = 2 * time.Minute
	ReturnRetry   = 250 * time.Millisecond
	recallFor     = 30 * time.Second
)

// returns is what a holder gave back lately, and what it owes: admissions
// it could not give back yet. Safe for concurrent use.
type returns struct {
	mu       sync.Mutex
	owed     map[string]*Owed           // admissions not given back yet, by key
	returned map[string][]returnedBatch // admissions given back in the last recallFor, by key
}

func newReturns() returns {
	return returns{owed: map[string]*Owed{}, returned: map[string][]returnedBatch{}}
}

// GaveBack remembers that ids of key were given back at now.
func (r *returns) GaveBack(key string, ids []uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.returned[key] = append(r.returned[key], returnedBatch{at: now, ids: ids})
}

// Recall makes every admission given back in the last recallFor owed
// again, due at now: the ring has moved.
func (r *returns) Recall(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, batches := range r.returned {
		var ids []uint64
		for _, b := range batches {
			if now.Sub(b.at) < recallFor {
				ids = append(ids, b.ids...)
			}
		}
		if len(ids) == 0 {
			continue
		}
		o := r.owed[key]
		if o == nil {
			o = &Owed{Since: now}
			r.owed[key] = o
		}
		o.IDs, o.next = append(o.IDs, ids...), now
	}
	clear(r.returned)
}

// Forget drops what was given back recallFor or more before now.
func (r *returns) Forget(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, batches := range r.returned {
		i := 0
		for i < len(batches) && now.Sub(batches[i].at) >= recallFor {
			i++
		}
		if i == len(batches) {
			delete(r.returned, key)
		} else if i > 0 {
			r.returned[key] = slices.Clone(batches[i:])
		}
	}
}

// Owed is admissions of one key that could not be given back yet.
type Owed struct {
	IDs   []uint64
	Since time.Time // when they first could not be given back
	next  time.Time // the earliest next try
}

// Owe keeps ids of key to be given back from next on.
func (r *returns) Owe(key string, ids []uint64, since, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.owed[key]
	if o == nil {
		o = &Owed{Since: since}
		r.owed[key] = o
	}
	o.IDs = append(o.IDs, ids...)
	if since.Before(o.Since) {
		o.Since = since
	}
	o.next = next
}

// Due removes and returns the owed admissions whose next try is at or
// before now, by key.
func (r *returns) Due(now time.Time) map[string]Owed {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Owed{}
	for key, o := range r.owed {
		if !now.Before(o.next) {
			out[key] = *o
			delete(r.owed, key)
		}
	}
	return out
}

// returnedBatch is admissions given back together, and when.
type returnedBatch struct {
	at  time.Time
	ids []uint64
}
