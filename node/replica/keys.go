package replica

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/internal/shrink"
	"github.com/tokenring/tokenring/node/internal/wire"
)

// Dirty collects the keys changed since the last replication round,
// sharded so that marking a key rarely contends. It shares the idea of
// limiter.Table's shards, not its work: the table keeps a Budget per key
// under a lock held for each decision and evicts idle keys, while this set
// only collects names, on the hot path, and hands them all over at once
// (Drain) every round; a generic sharded map serving both would cost the
// hot path an interface or a type parameter for 40 lines saved.
type Dirty struct {
	seed   maphash.Seed
	shards [16]struct {
		mu sync.Mutex
		m  map[string]struct{}
	}
}

// NewDirty returns an empty set.
func NewDirty() *Dirty { return &Dirty{seed: maphash.MakeSeed()} }

// Mark adds key to the set.
func (d *Dirty) Mark(key string) {
	s := &d.shards[maphash.String(d.seed, key)%uint64(len(d.shards))]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]struct{})
	}
	s.m[key] = struct{}{}
	s.mu.Unlock()
}

// Len counts the marked keys.
func (d *Dirty) Len() int {
	n := 0
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// Drain returns the marked keys and clears the set.
func (d *Dirty) Drain() []string {
	var keys []string
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for k := range s.m {
			keys = append(keys, k)
		}
		s.m = nil
		s.mu.Unlock()
	}
	return keys
}

// Copy is a key's state and its time: when it arrived at a backup (a
// replica), or when it was taken (a checkpoint's snapshot).
type Copy struct {
	State []byte
	At    time.Time
	// Until is when a budget's spend in the copy ends with its period
	// (limiter.SnapshotKeepUntil): the copy outlives the horizon until
	// then. Zero for a key without spend.
	Until time.Time
}

// AppendCopy encodes a backup's copy of a key for OpReplica's answer: when
// it arrived (unix ns), then the key's snapshot.
func AppendCopy(b []byte, c Copy) []byte {
	b = binary.AppendVarint(b, c.At.UnixNano())
	return append(b, c.State...)
}

// DecodeCopy decodes what AppendCopy encoded.
func DecodeCopy(b []byte) (Copy, error) {
	at, n := binary.Varint(b)
	if n <= 0 {
		return Copy{}, fmt.Errorf("replica: %w", wire.ErrShort)
	}
	return Copy{State: b[n:], At: time.Unix(0, at)}, nil
}

// Store holds the replicas a node keeps as a backup, for other owners. Its
// map shrinks as replicas are taken or expire. Set Check and Log before
// use.
type Store struct {
	// Check, if set, vets a replica before it is kept: one it rejects (a
	// state dated in the future) is dropped and the key's previous
	// replica, if any, kept.
	Check func(key string, state []byte, now time.Time) error
	Log   *slog.Logger // nil: rejections are not logged

	mu   sync.Mutex // guards m and size
	m    map[string]Copy
	size shrink.HighWater
}

// Put keeps state as key's replica, received at now, unless Check rejects
// it (then it returns Check's error and keeps what it had), or the replica
// it holds is of a later state (limiter.SnapshotTime): copies of one key
// may arrive out of order — a round's snapshot, taken before an
// admission, after the synchronous copy that carries it — and the later
// state must not be overwritten by the earlier.
func (r *Store) Put(key string, state []byte, now time.Time) error {
	if r.Check != nil {
		if err := r.Check(key, state, now); err != nil {
			if r.Log != nil {
				r.Log.Warn("replica rejected", "key", key, "err", err)
			}
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]Copy)
	}
	if held, ok := r.m[key]; ok && later(held.State, state) {
		return nil
	}
	r.m[key] = Copy{State: state, At: now, Until: limiter.SnapshotKeepUntil(state)}
	r.size.Grew(len(r.m))
	return nil
}

// Take removes and returns key's replica.
func (r *Store) Take(key string) (Copy, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.m[key]
	if ok {
		delete(r.m, key)
		r.m = shrink.Map(&r.size, r.m)
	}
	return c, ok
}

// Expire drops replicas older than horizon: their windows and leases have
// run out anyway. A copy holding a budget's spend is kept until its period
// ends (Copy.Until).
func (r *Store) Expire(now time.Time, horizon time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range r.m {
		if now.Sub(c.At) > horizon && !now.Before(c.Until) {
			delete(r.m, k)
		}
	}
	r.m = shrink.Map(&r.size, r.m)
}

// Len counts the replicas held.
func (r *Store) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// Acked holds, for each key a node decides for, the newest state its
// backups acknowledged, and which of them did: what the other side of a
// split restores from, if one of them is there (node/fence.go).
type Acked struct {
	mu   sync.Mutex // guards m and size
	m    map[string]AckedCopy
	size shrink.HighWater
}

// AckedCopy is a key's state as the backups named in By acknowledged it.
type AckedCopy struct {
	State []byte
	By    []string
}

// Put records that backup by holds state as key's copy. A state other
// than the one recorded replaces it: copies go out in the order of the
// key's changes, and should an older acknowledgement arrive last, a fence
// only owes more (counted twice), never less.
func (a *Acked) Put(key, by string, state []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[string]AckedCopy)
	}
	c, ok := a.m[key]
	switch {
	case !ok || !bytes.Equal(c.State, state):
		c = AckedCopy{State: state, By: []string{by}}
	case !slices.Contains(c.By, by):
		c.By = append(c.By, by)
	}
	a.m[key] = c
	a.size.Grew(len(a.m))
}

// Get returns key's acknowledged copy.
func (a *Acked) Get(key string) (AckedCopy, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.m[key]
	return s, ok
}

// Clear forgets every key.
func (a *Acked) Clear() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m, a.size = nil, shrink.HighWater{}
}

// Keep drops the entries of keys for which present is false.
func (a *Acked) Keep(present func(key string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.m {
		if !present(k) {
			delete(a.m, k)
		}
	}
	a.m = shrink.Map(&a.size, a.m)
}

// later reports whether snapshot a is of a strictly later state than b
// (limiter.SnapshotTime); an unreadable snapshot is later than nothing.
func later(a, b []byte) bool {
	ta, errA := limiter.SnapshotTime(a)
	tb, errB := limiter.SnapshotTime(b)
	return errA == nil && errB == nil && ta.After(tb)
}
