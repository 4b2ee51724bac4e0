package limiter

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// numShards is the number of independently locked parts of a Table.
const numShards = 256

// shard is one part of a Table, padded to its own cache line(s) so that
// neighbouring locks do not contend through false sharing.
type shard struct {
	mu sync.Mutex         // guards m and every Budget in m
	m  map[string]*Budget // allocated on first use
	_  [64 - 16]byte
}

// Table maps keys to Budgets. It is sharded: a key hashes (hash/maphash, with
// a seed per Table) to one of 256 shards, each a mutex and a map, so
// operations on different keys rarely contend: two keys of one shard wait for
// each other only while a function passed to Do or Peek runs.
//
// A Table is safe for concurrent use. Each Budget is only ever touched under
// its shard's lock, which is what makes the Budget's methods, not safe for
// concurrent use on their own, safe here. The functions passed to Do, Peek
// and Range must not call back into the same Table for a key of the same
// shard (Do and Peek run under the lock).
type Table struct {
	pol       Policy // shared by every Budget of the table
	limitsFor func(key string) Limits
	seed      maphash.Seed
	shards    [numShards]shard
}

// NewTable returns an empty Table whose Budgets share policy p and take their
// limits, when a key is first seen (Do) or restored (Put), from limitsFor.
// limitsFor may be called under a shard lock, concurrently for different
// keys: it must be fast, safe for concurrent use, and must not use the Table.
// A nil limitsFor gives every key zero Limits (unlimited, default window and
// TTL).
func NewTable(p Policy, limitsFor func(key string) Limits) *Table {
	if limitsFor == nil {
		limitsFor = func(string) Limits { return Limits{} }
	}
	return &Table{pol: p, limitsFor: limitsFor, seed: maphash.MakeSeed()}
}

func (t *Table) shard(key string) *shard {
	return &t.shards[maphash.String(t.seed, key)%numShards]
}

// Do runs fn with key's Budget, creating it (with limitsFor(key), an empty
// window at now) if the key is not in the table, under the key's shard lock.
// fn must not keep the Budget after it returns.
func (t *Table) Do(key string, now time.Time, fn func(b *Budget)) {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	if b == nil {
		b = NewBudget(t.limitsFor(key), &t.pol, now)
		if s.m == nil {
			s.m = make(map[string]*Budget)
		}
		s.m[strings.Clone(key)] = b // do not pin a caller's larger buffer
	}
	fn(b)
}

// Peek runs fn with key's Budget under the shard lock if the key is in the
// table, and reports whether it was.
func (t *Table) Peek(key string, fn func(b *Budget)) bool {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	if b == nil {
		return false
	}
	fn(b)
	return true
}

// Sweep brings every Budget to now, which reclaims expired slots, and drops
// the Budgets that are idle (nothing counted, no lease, no waiter; see
// Budget.Idle), returning how many it dropped. A key with waiters is never
// dropped. It locks one shard at a time.
func (t *Table) Sweep(now time.Time) (evicted int) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, b := range s.m {
			if b.Idle(now) {
				delete(s.m, k)
				evicted++
			}
		}
		s.mu.Unlock()
	}
	return evicted
}

// Take removes key from the table and returns a snapshot of its Budget (see
// Budget.AppendBinary), for handing the key to another node; false if the
// key is not in the table. Waiters still queued are dropped without a Grant:
// answer them first (Budget.DrainWaiters under Do) and stop admitting for
// the key.
func (t *Table) Take(key string) ([]byte, bool) {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	if b == nil {
		return nil, false
	}
	data, err := b.MarshalBinary()
	if err != nil {
		return nil, false // MarshalBinary never fails; keep the key if it did
	}
	delete(s.m, key)
	return data, true
}

// Put restores key's Budget from a snapshot (RestoreBudget with
// limitsFor(key) and the table's policy), replacing any Budget the key had
// (and dropping its waiters without a Grant). On error the table is
// unchanged.
func (t *Table) Put(key string, data []byte) error {
	b, err := RestoreBudget(data, t.limitsFor(key), &t.pol)
	if err != nil {
		return err
	}
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[string]*Budget)
	}
	if _, ok := s.m[key]; ok {
		s.m[key] = b
	} else {
		s.m[strings.Clone(key)] = b
	}
	return nil
}

// Range calls fn for the keys in the table until fn returns false. fn is
// called without any lock held, so it may use the Table; a key added or
// removed during the iteration may or may not be seen. Each shard's keys are
// copied before fn sees them.
func (t *Table) Range(fn func(key string) bool) {
	var keys []string
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		keys = keys[:0]
		for k := range s.m {
			keys = append(keys, k)
		}
		s.mu.Unlock()
		for _, k := range keys {
			if !fn(k) {
				return
			}
		}
	}
}

// Len returns the number of keys in the table.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
