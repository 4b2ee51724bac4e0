package fallback

import (
	"math"
	"strings"
	"sync"
	"time"
)

// stateShard is one part of a State's entries: a map and a list, under
// one mutex. The list approximates recency as CLOCK does: a hit only marks
// its entry used (no list work: hits are every decision's), and an entry
// reaching the tail marked used moves to the front unmarked, a second
// chance. Invariant: every entry of m is in the list exactly once and the
// list holds nothing else; hwm ≥ len(m).
type stateShard struct {
	mu   sync.Mutex
	m    map[string]*keyState
	list keyState // sentinel of the circular recency list: list.next is the most recent
	hwm  int      // the most entries m held since it was (re)built
}

const (
	// lookup and uncapped are get's caps besides a shard's size: find only,
	// and create whatever the size (debts already admitted).
	lookup   = 0
	uncapped = math.MaxInt
	// evictScan bounds the least recently used entries a new key at a full
	// shard examines for one it may replace.
	evictScan = 8
	// staleScan is how many least recently used entries each get examines
	// to drop those gone stale (the amortised sweep).
	staleScan = 2
	// shrinkMinHWM is the high-water mark from which a shard's map is
	// rebuilt once below a quarter of it (Go maps never shrink).
	shrinkMinHWM = 64
	// FullRetry is the retry-after of an acquire refused because
	// its key is new and the fallback holds MaxFallbackKeys entries.
	FullRetry = time.Second
)

func (s *stateShard) init() {
	s.m = make(map[string]*keyState)
	s.list.next, s.list.prev = &s.list, &s.list
}

func (s *stateShard) unlink(e *keyState) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (s *stateShard) pushFront(e *keyState) {
	e.prev, e.next = &s.list, s.list.next
	s.list.next.prev = e
	s.list.next = e
}

// get returns key's entry, marked used. A key without an entry gets a new
// one if the shard holds fewer than limit entries, or can make room by
// evicting an entry that holds nothing (evict); otherwise get returns nil.
// limit lookup (0) never creates, uncapped always does. A miss first runs
// the amortised sweep (dropStale): the keys a shard gains pay for the
// entries it drops. The caller holds s.mu.
func (s *stateShard) get(key string, now time.Time, limit int) *keyState {
	if e := s.m[key]; e != nil {
		e.used = true
		return e
	}
	s.dropStale(now)
	if limit == lookup || (len(s.m) >= limit && !s.evict(now)) {
		return nil
	}
	e := &keyState{key: strings.Clone(key)} // do not pin a caller's larger buffer
	s.m[e.key] = e
	s.pushFront(e)
	s.hwm = max(s.hwm, len(s.m))
	return e
}

// holdsNothing reports whether e owes no debt and its local window counts
// nothing and holds no slot at now: forgetting it loses only its report.
func (e *keyState) holdsNothing(now time.Time) bool {
	return e.owedReq == 0 && e.owedTok == 0 && (e.local == nil || e.local.Idle(now))
}

// stale reports whether e can go without losing anything: it holds nothing
// and its reports no longer constrain the share.
func (e *keyState) stale(now time.Time) bool {
	return e.holdsNothing(now) && !e.req.fresh(now) && !e.tok.fresh(now)
}

// dropStale looks at up to staleScan entries at the list's tail: a stale
// one is dropped (used or not: stale means it holds nothing and its reports
// no longer count), any other is moved to the front, keeping its mark for
// evict, so that the next misses look at others.
func (s *stateShard) dropStale(now time.Time) {
	for range staleScan {
		e := s.list.prev
		if e == &s.list {
			break
		}
		s.unlink(e)
		if e.stale(now) {
			delete(s.m, e.key)
			continue
		}
		s.pushFront(e)
	}
	s.shrink()
}

// evict drops one entry among the evictScan at the list's tail that holds
// nothing (its report, if fresh, is forgotten: the share falls back to
// limit ÷ members, as for a key never reported), reporting whether it
// found one: the first not used since it last passed the tail, else the
// first of them. Entries it passes over move to the front unmarked.
func (s *stateShard) evict(now time.Time) bool {
	var spare *keyState // the first that holds nothing but was used
	for range evictScan {
		e := s.list.prev
		if e == &s.list || e == spare {
			break
		}
		if e.holdsNothing(now) && !e.used {
			s.unlink(e)
			delete(s.m, e.key)
			return true
		}
		if spare == nil && e.holdsNothing(now) {
			spare = e
		}
		s.unlink(e)
		e.used = false
		s.pushFront(e)
	}
	if spare == nil {
		return false
	}
	s.unlink(spare)
	delete(s.m, spare.key)
	return true
}

// shrink rebuilds s.m once it fell below a quarter of its high-water mark.
// Its cost is paid by the deletions since the last rebuild.
func (s *stateShard) shrink() {
	if s.hwm < shrinkMinHWM || len(s.m) >= s.hwm/4 {
		return
	}
	m := make(map[string]*keyState, len(s.m))
	for k, e := range s.m {
		m[k] = e
	}
	s.m, s.hwm = m, len(m)
}

// len counts the shard's entries. The caller holds s.mu.
func (s *stateShard) len() int { return len(s.m) }

// entries counts the entries across shards.
func (d *State) entries() int {
	n := 0
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		n += s.len()
		s.mu.Unlock()
	}
	return n
}
