package limiter

import (
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// numShards is the number of independently locked parts of a Table.
const numShards = 256

// shard is one part of a Table, padded to its own cache line(s) so that
// neighbouring locks do not contend through false sharing.
type shard struct {
	mu  sync.Mutex         // guards m, hwm and every Budget in m
	m   map[string]*Budget // allocated on first use
	hwm int                // the most keys m has held since it was (re)built
	_   [64 - 24]byte
}

// Go maps never shrink: a map that once held a million keys keeps their
// buckets after they are deleted. Sweep therefore rebuilds a shard's map
// once it holds fewer than a quarter of its high-water mark (hwm), if that
// mark reached shrinkMinHWM; the rebuilt map is sized for what remains.
const shrinkMinHWM = 32

// evictScan bounds the keys of its shard a Do for a new key examines
// looking for an idle one to evict when the table is full.
const evictScan = 8

// ErrTableFull is wrapped by the error Do returns when a new key arrives at
// a table holding MaxKeys keys and no idle key could be evicted to make
// room: the key's request is not decided. Its text (with the wrapping
// "(max_keys N)") is what a client may be shown.
var ErrTableFull = errors.New("too many keys held")

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
//
// The table holds at most MaxKeys keys created by Do (SetMaxKeys); keys
// restored by Put always enter, since they hold counted units that must not
// be forgotten, and count toward the cap. Memory is about the bytes per key
// of a full table times the keys held; Sweep returns it as keys go idle.
type Table struct {
	pol       Policy // shared by every Budget of the table
	limitsFor func(key string) Limits
	seed      maphash.Seed
	maxKeys   atomic.Int64          // 0: unlimited
	fullErr   atomic.Pointer[error] // Do's error at the cap, made by SetMaxKeys
	skew      atomic.Int64          // max clock skew for Put, ns
	keys      atomic.Int64          // keys held, across shards
	limitsGen atomic.Uint32         // bumped by LimitsChanged
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
	t := &Table{pol: p, limitsFor: limitsFor, seed: maphash.MakeSeed()}
	t.skew.Store(int64(DefaultMaxClockSkew))
	return t
}

// SetMaxKeys caps the keys Do creates at n; 0 (or negative) means
// unlimited, the default. Lowering the cap below the keys held evicts
// nothing: new keys are refused (or take an idle key's place) until enough
// keys have gone.
func (t *Table) SetMaxKeys(n int) {
	n = max(n, 0)
	err := fmt.Errorf("%w (max_keys %d)", ErrTableFull, n)
	t.fullErr.Store(&err)
	t.maxKeys.Store(int64(n))
}

// SetMaxClockSkew sets how far ahead of Put's now a restored state's times
// may lie (see Budget.CheckClock); 0 or negative means
// DefaultMaxClockSkew.
func (t *Table) SetMaxClockSkew(d time.Duration) {
	if d <= 0 {
		d = DefaultMaxClockSkew
	}
	t.skew.Store(int64(d))
}

// reserveKey counts one more key unless the table is at its cap.
func (t *Table) reserveKey() bool {
	limit := t.maxKeys.Load()
	for {
		n := t.keys.Load()
		if limit > 0 && n >= limit {
			return false
		}
		if t.keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// insert stores b as key's new Budget in s (locked), which must not hold
// key; the key must already be counted.
func (s *shard) insert(key string, b *Budget) {
	if s.m == nil {
		s.m = make(map[string]*Budget)
	}
	s.m[strings.Clone(key)] = b // do not pin a caller's larger buffer
	s.hwm = max(s.hwm, len(s.m))
}

// evictIdle drops one idle key among the first evictScan keys of s
// (locked), reporting whether it found one.
func (s *shard) evictIdle(now time.Time) bool {
	n := 0
	for k, b := range s.m {
		if b.Idle(now) {
			delete(s.m, k)
			return true
		}
		if n++; n == evictScan {
			break
		}
	}
	return false
}

// shrink rebuilds s.m (s locked) if it fell below a quarter of its
// high-water mark, so that the memory of deleted keys returns.
func (s *shard) shrink() {
	if s.hwm < shrinkMinHWM || len(s.m) >= s.hwm/4 {
		return
	}
	if len(s.m) == 0 {
		s.m, s.hwm = nil, 0
		return
	}
	m := make(map[string]*Budget, len(s.m))
	for k, b := range s.m {
		m[k] = b
	}
	s.m, s.hwm = m, len(m)
}

func (t *Table) shard(key string) *shard {
	return &t.shards[maphash.String(t.seed, key)%numShards]
}

// Do runs fn with key's Budget, creating it (with limitsFor(key), an empty
// window at now) if the key is not in the table, under the key's shard lock.
// fn must not keep the Budget after it returns.
//
// A new key arriving at a table that holds MaxKeys keys takes the place of
// an idle key of its shard (Budget.Idle: nothing counted, no lease, no
// waiter; at most evictScan examined) if there is one; otherwise fn is not
// called and Do returns an error wrapping ErrTableFull. A key holding
// counted units is never evicted: forgetting it would admit past its
// limits.
func (t *Table) Do(key string, now time.Time, fn func(b *Budget)) error {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	if b == nil {
		if !t.reserveKey() && !s.evictIdle(now) {
			return *t.fullErr.Load() // set: only a cap refuses
		} // an evicted key's count passes to the new one
		b = t.newBudget(key, now)
		s.insert(key, b)
	}
	t.refresh(key, b)
	fn(b)
	return nil
}

// LimitsChanged tells the table that limitsFor may now give other limits
// (a config reload): every Budget takes limitsFor(key) again the next time
// Do, DoUncapped or Peek reaches it, keeping what its window counted; one
// whose limits a request sent (Budget.SetSentLimits) keeps those numbers
// and takes the rest (its ReserveMode). A lowered limit then refuses until
// the window drains below it; a raised one admits at once. It costs nothing
// until then: one atomic load a call.
func (t *Table) LimitsChanged() { t.limitsGen.Add(1) }

// newBudget is key's Budget for a key first seen at now.
func (t *Table) newBudget(key string, now time.Time) *Budget {
	g := t.limitsGen.Load() // before limitsFor: a change after it is seen next time
	b := NewBudget(t.limitsFor(key), &t.pol, now)
	b.limitsGen = g
	return b
}

// refresh gives b, key's Budget, limitsFor(key) if the limits changed since
// b last took them. Called under key's shard lock.
func (t *Table) refresh(key string, b *Budget) {
	g := t.limitsGen.Load()
	if b.limitsGen == g {
		return
	}
	l := t.limitsFor(key).normalize()
	if b.sent { // a request's numbers hold until a request sends others
		l.Requests, l.Tokens, l.Concurrency = b.lim.Requests, b.lim.Tokens, b.lim.Concurrency
	}
	if l != b.lim {
		b.SetLimits(l)
	}
	b.limitsGen = g
}

// DoUncapped is Do without the MaxKeys cap: a new key always enters (and
// counts toward the cap). It is for operations that bring counted units to
// a key — a debt charged (Budget.Charge) — which must not be forgotten any
// more than a restored state (Put) may be.
func (t *Table) DoUncapped(key string, now time.Time, fn func(b *Budget)) {
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	if b == nil {
		t.keys.Add(1)
		b = t.newBudget(key, now)
		s.insert(key, b)
	}
	t.refresh(key, b)
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
	t.refresh(key, b)
	fn(b)
	return true
}

// Sweep brings every Budget to now, which frees expired slots, and drops
// the Budgets that are idle (nothing counted, no lease, no waiter; see
// Budget.Idle), returning how many it dropped: a key is dropped at the
// first Sweep after its windows emptied and its last lease ended. A key
// with waiters is never dropped. A shard left holding under a quarter of its
// high-water mark gets a fresh map, so that memory returns. It locks one
// shard at a time.
func (t *Table) Sweep(now time.Time) (evicted int) {
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n := 0
		for k, b := range s.m {
			if b.Idle(now) {
				delete(s.m, k)
				n++
			}
		}
		if n > 0 {
			s.shrink()
		}
		s.mu.Unlock()
		t.keys.Add(int64(-n))
		evicted += n
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
	t.keys.Add(-1)
	return data, true
}

// Put restores key's Budget from a snapshot (RestoreBudget with
// limitsFor(key) and the table's policy), replacing any Budget the key had
// (and dropping its waiters without a Grant). A snapshot dated beyond now
// plus the table's clock-skew bound (SetMaxClockSkew; see
// Budget.CheckClock) is rejected with an error wrapping ErrFutureState. On
// error the table is unchanged. Put is never refused by MaxKeys: the state
// holds counted units, so it enters (and counts toward the cap) even when
// the table is full.
func (t *Table) Put(key string, data []byte, now time.Time) error {
	g := t.limitsGen.Load()
	b, err := RestoreBudget(data, t.limitsFor(key), &t.pol)
	if err != nil {
		return err
	}
	b.limitsGen = g
	if err := b.CheckClock(now, time.Duration(t.skew.Load())); err != nil {
		return err
	}
	s := t.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; ok {
		s.m[key] = b
		return nil
	}
	t.keys.Add(1)
	s.insert(key, b)
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
func (t *Table) Len() int { return int(t.keys.Load()) }
