package node

// Giving allotted admissions back: what a holder did not hand out before
// its slice ended goes back to the key's owner (peer.OpReturn), and what could
// not go back yet is owed until it can (allot.go).

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/tokenring/tokenring/node/peer"
)

// cancelAdmissions gives admissions of key that were allotted but not
// handed out back to its owner, in OpReturns of at most peer.MaxAllot. Those
// that cannot be given back now (the owner crashed, and the ring still
// names it) are owed (since: when they first could not be; zero: now):
// the sweep gives them back later to whoever owns the key then (their
// leases moved there with its state, if replication had copied them), until
// allotReturnHorizon has passed.
func (n *Node) cancelAdmissions(key string, ids []uint64, since time.Time) {
	for chunk := range slices.Chunk(ids, peer.MaxAllot) {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TransferWait)
		a, err := n.Do(ctx, Call{Op: peer.OpReturn, Key: key, State: appendGrant(nil, 0, chunk)})
		cancel()
		if err != nil {
			now := n.cfg.Now()
			if since.IsZero() {
				since = now
			}
			if errors.Is(err, ErrClosed) || now.Sub(since) >= allotReturnHorizon {
				n.log.Warn("allotted admissions not given back: charged until their bucket leaves the window", "key", key, "admissions", len(chunk), "err", err)
				continue
			}
			n.allot.owe(key, chunk, since, now.Add(allotRetry))
			continue
		}
		if _, cancelled, err := decodeGrant(a.State); err == nil && len(cancelled) > 0 {
			n.counts.allotReturned.Add(int64(len(cancelled)))
			n.allot.gaveBack(key, cancelled, n.cfg.Now())
		}
	}
}

// allotReturnHorizon is how long admissions that could not be given back
// are tried again: past it, their bucket has left a minute's window and
// their leases' default TTL has run out, so giving them back changes
// nothing. allotRetry is the least time between two tries.
//
// allotRecall is how long admissions given back are remembered, to be
// given back again when the ring moves: an owner that crashes loses what
// changed since its last replication round, returns included, so its
// backup's copy still counts admissions its holders gave back; given back
// again to the key's new owner (which decides only once it has that copy),
// they are cancelled there too. Giving back is idempotent: a lease id is
// cancelled at most once, and one never handed out names no caller's
// lease. The recall covers the time a crash takes to move the ring
// (gossip's failure detection) and a replication round.
const (
	allotReturnHorizon = 2 * time.Minute
	allotRetry         = 250 * time.Millisecond
	allotRecall        = 30 * time.Second
)

// returns is what a holder gave back lately, and what it owes: admissions
// it could not give back yet. Safe for concurrent use.
type returns struct {
	mu       sync.Mutex
	owed     map[string]*owed           // admissions not given back yet, by key
	returned map[string][]returnedBatch // admissions given back in the last allotRecall, by key
}

func newReturns() returns {
	return returns{owed: map[string]*owed{}, returned: map[string][]returnedBatch{}}
}

// gaveBack remembers that ids of key were given back at now.
func (r *returns) gaveBack(key string, ids []uint64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.returned[key] = append(r.returned[key], returnedBatch{at: now, ids: ids})
}

// recall makes every admission given back in the last allotRecall owed
// again, due at now: the ring has moved.
func (r *returns) recall(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, batches := range r.returned {
		var ids []uint64
		for _, b := range batches {
			if now.Sub(b.at) < allotRecall {
				ids = append(ids, b.ids...)
			}
		}
		if len(ids) == 0 {
			continue
		}
		o := r.owed[key]
		if o == nil {
			o = &owed{since: now}
			r.owed[key] = o
		}
		o.ids, o.next = append(o.ids, ids...), now
	}
	clear(r.returned)
}

// forget drops what was given back allotRecall or more before now.
func (r *returns) forget(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, batches := range r.returned {
		i := 0
		for i < len(batches) && now.Sub(batches[i].at) >= allotRecall {
			i++
		}
		if i == len(batches) {
			delete(r.returned, key)
		} else if i > 0 {
			r.returned[key] = slices.Clone(batches[i:])
		}
	}
}

// owed is admissions of one key that could not be given back yet.
type owed struct {
	ids   []uint64
	since time.Time // when they first could not be given back
	next  time.Time // the earliest next try
}

// owe keeps ids of key to be given back from next on.
func (r *returns) owe(key string, ids []uint64, since, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.owed[key]
	if o == nil {
		o = &owed{since: since}
		r.owed[key] = o
	}
	o.ids = append(o.ids, ids...)
	if since.Before(o.since) {
		o.since = since
	}
	o.next = next
}

// due removes and returns the owed admissions whose next try is at or
// before now, by key.
func (r *returns) due(now time.Time) map[string]owed {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]owed{}
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
