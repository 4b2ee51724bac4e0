package fallback

import (
	"crypto/rand"
	"encoding/binary"
	"hash/maphash"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// State is this node's fallback state, one entry per key:
//
//   - the owner's last report: the remaining requests and tokens its
//     answers carried (Decision.Status), when, and until when what it
//     counted then stays in its window (the report's Reset);
//   - this node's own fallback window for the key (limit ÷ members: the
//     members the caller counts, router.Router.members);
//   - the debts: fallback admissions made here and not yet acknowledged by
//     an owner (Debts charges them).
//
// While a report is fresh (what the owner counted has not left its window
// yet), this node's degraded share is the reported remaining ÷ members,
// minus what its fallback admitted since the report (and the debts still
// unpaid when it came, which the report could not include). For a key never
// reported, or once everything the report counted has left the window, the
// share is the full limit ÷ members. Both hold together with the local
// window, so in any window this node never admits more than limit ÷ members
// on its own.
//
// The local window is a limiter.Budget with few buckets rather than an
// x/time/rate bucket: a token bucket refills continuously, which cannot
// express "at most the reported remaining, until the reported usage leaves
// the window", and its burst is only half the share. A Budget is a sliding
// window that never admits more than its limit in any interval of one
// window, it holds the concurrency share (slots with the lease TTL) and it
// computes honest retry-afters, all with the limiter's own arithmetic.
//
// Memory is bounded (fallbackstore.go): entries live in shards, each a map
// and a recency list; a new key at a full shard (NewState's maxKeys in all)
// takes the place of an entry that owes nothing and holds no local units,
// found among the least recently used few, or is not tracked (its acquire
// is refused). Each call also looks at the two least recently used entries
// and drops them once they owe nothing, hold nothing and their reports went
// stale, so idle entries leave at the pace of the traffic; a shard's map is
// rebuilt once it fell below a quarter of its high-water mark. Every
// operation locks one shard and does O(1) work (amortised): nothing scans
// every key per call.
//
// Safe for concurrent use.
type State struct {
	now      func() time.Time
	seed     maphash.Seed
	perShard int // entries a shard holds before a new key must evict one
	shards   [stateShards]stateShard
}

const (
	// stateShards is the number of independently locked parts of a State.
	stateShards = 64
	// DefaultMaxKeys is NewState's maxKeys default (router.Config.MaxFallbackKeys's).
	DefaultMaxKeys = 1_000_000
)

// localPolicy is the local windows' policy: 10 buckets (a 6 s bucket for a
// 60 s window, counted at most one bucket longer than the window) keeps an
// entry small. Its lease ids reach clients inside lease strings, so they
// are random (crypto/rand), like the owners'.
var localPolicy = limiter.Policy{Buckets: 10, IDs: randomID}

// randomID is a uniformly random uint64 from crypto/rand (which never
// fails).
func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// report is one dimension of an owner's report.
type report struct {
	limited   bool      // the owner limits this dimension
	remaining int64     // room left when reported
	until     time.Time // when what the owner counted has all left its window
}

// fresh reports whether r still constrains the share at now.
func (r report) fresh(now time.Time) bool { return r.limited && now.Before(r.until) }

// keyState is one key's fallback state. Guarded by its shard's mu.
type keyState struct {
	at       time.Time // of the last report; zero: never reported
	req, tok report
	// spentReq and spentTok are what this node's fallback admitted since
	// the last report, plus the debts unpaid when it came.
	spentReq, spentTok int64

	local   *limiter.Budget // this node's fallback window; nil until the first degraded acquire
	members int             // the local window's limits are limit ÷ members

	// owedReq and owedTok are the debts not yet acknowledged by an owner;
	// owedAt is the time of the latest of them.
	owedReq, owedTok int64
	owedAt           time.Time

	key        string    // the entry's key in its shard's map
	prev, next *keyState // the shard's list, newest (or latest given a second chance) first
	// used is set by every hit since the entry last passed the list's
	// tail: such an entry gets a second chance (CLOCK) rather than evicted.
	used bool
}

// NewState returns an empty degraded holding at most about maxKeys
// entries (DefaultMaxKeys if maxKeys ≤ 0).
func NewState(now func() time.Time, maxKeys int) *State {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	d := &State{now: now, seed: maphash.MakeSeed(), perShard: max(1, (maxKeys+stateShards-1)/stateShards)}
	for i := range d.shards {
		d.shards[i].init()
	}
	return d
}

func (d *State) shard(key string) *stateShard {
	return &d.shards[maphash.String(d.seed, key)%stateShards]
}

// Report records what key's owner answered at now: its remaining requests
// and tokens. A status without limits (unlimited key, or a call that found
// no state) teaches nothing.
func (d *State) Report(key string, st limiter.Status, now time.Time) {
	if st.Requests.Limit <= 0 && st.Tokens.Limit <= 0 {
		return
	}
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.get(key, now, d.perShard); e != nil { // a full shard forgoes the hint
		e.setReport(st, now)
	}
}

func (e *keyState) setReport(st limiter.Status, now time.Time) {
	e.at = now
	e.req = report{limited: st.Requests.Limit > 0, remaining: st.Requests.Remaining, until: now.Add(st.Requests.Reset)}
	e.tok = report{limited: st.Tokens.Limit > 0, remaining: st.Tokens.Remaining, until: now.Add(st.Tokens.Reset)}
	// Debts still unpaid are not in the report: they spend the share too.
	e.spentReq, e.spentTok = e.owedReq, e.owedTok
}

// share is limit ÷ members for a limited dimension; ok is false when the
// dimension is limited but this node's share of it is zero.
func share(limit, members int64) (s int64, ok bool) {
	if limit <= 0 {
		return 0, true // unlimited
	}
	s = limit / members
	return s, s > 0
}

// Acquire admits hits requests (at least 1, one slot: limiter.Request.Hits)
// of n tokens on key's degraded share, returning a local slot id, or the
// refusing dimension and when to retry. An admission is a debt of key
// (owed): the caller has it charged.
func (d *State) Acquire(key string, l limiter.Limits, members int, n, hits int64) (id uint64, reason limiter.Dimension, retry time.Duration) {
	m := int64(max(members, 1))
	n, hits = max(n, 0), max(hits, 1)
	now := d.now()
	window := l.Window
	if window <= 0 {
		window = limiter.DefaultWindow
	}
	sr, okr := share(l.Requests, m)
	st, okt := share(l.Tokens, m)
	sc, okc := share(l.Concurrency, m)
	switch {
	case !okr || (l.Requests > 0 && hits > sr):
		return 0, limiter.Requests, window
	case !okt || (l.Tokens > 0 && n > st):
		return 0, limiter.Tokens, window
	case !okc:
		return 0, limiter.Concurrency, window
	}
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(key, now, d.perShard)
	if e == nil {
		return 0, limiter.TableFull, FullRetry
	}
	// The owner's last report, while what it counted is in its window.
	if e.req.fresh(now) && e.req.remaining/m-e.spentReq < hits {
		return 0, limiter.Requests, max(time.Millisecond, e.req.until.Sub(now))
	}
	if e.tok.fresh(now) && e.tok.remaining/m-e.spentTok < max(n, 1) {
		return 0, limiter.Tokens, max(time.Millisecond, e.tok.until.Sub(now))
	}
	// This node's own window: limit ÷ members in any window.
	lim := limiter.Limits{Requests: sr, Tokens: st, Concurrency: sc, Window: l.Window, LeaseTTL: l.LeaseTTL}
	if e.local == nil {
		e.local = limiter.NewBudget(lim, &localPolicy, now)
		e.members = int(m)
	} else if e.members != int(m) || e.local.Limits().Window != window {
		e.local.SetLimits(lim)
		e.members = int(m)
	}
	// Reserve exactly n (at least 1: a Reserve of 0 would mean "estimate").
	dec := e.local.Acquire(now, limiter.Request{Reserve: max(n, 1), Hits: hits})
	if !dec.Allowed {
		return 0, dec.Reason, dec.RetryAfter
	}
	e.spend(hits, n, now)
	return dec.Lease, limiter.None, 0
}

// Owe records an admission of hits requests (at least 1) of n tokens for
// key made without a share (the open policy): a debt like any other. It
// returns false, recording nothing, if key is new and its shard is full:
// the admission could not be accounted for and must not be made.
func (d *State) Owe(key string, n, hits int64) bool {
	now := d.now()
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(key, now, d.perShard)
	if e == nil {
		return false
	}
	e.spend(max(hits, 1), max(n, 0), now)
	return true
}

// OweUnits records requests and tokens admitted for key at at by a member
// that could not have them counted at the key's owner: debts like fallback
// admissions, spending the share too. Admitted already, they are never
// refused by the bound (Debts bounds the keys owing instead).
func (d *State) OweUnits(key string, requests, tokens int64, at time.Time) {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(key, d.now(), uncapped)
	e.spend(max(requests, 0), max(tokens, 0), at)
}

// spend counts a fallback admission of requests requests and n tokens at
// now: it spends the share and is owed to the key's owner.
func (e *keyState) spend(requests, n int64, now time.Time) {
	e.spentReq += requests
	e.spentTok += n
	e.owedReq += requests
	e.owedTok += n
	if now.After(e.owedAt) {
		e.owedAt = now
	}
}

// Release frees a local slot; unknown ids change nothing.
func (d *State) Release(key string, id uint64) bool {
	now := d.now()
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(key, now, lookup)
	if e == nil || e.local == nil {
		return false
	}
	return e.local.Release(now, id)
}

// owed returns key's unpaid debts as one charge (at the time of the latest,
// so no unit leaves the owner's window earlier than it would have), after
// dropping them if even the latest is older than window: the owner would
// count none of them any more. ok is false when key owes nothing.
func (d *State) owed(key string, now time.Time, window time.Duration) (c Charge, expired int64, ok bool) {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(key, now, lookup)
	if e == nil || (e.owedReq == 0 && e.owedTok == 0) {
		return Charge{}, 0, false
	}
	if !now.Before(e.owedAt.Add(window)) {
		expired = e.owedReq
		e.owedReq, e.owedTok = 0, 0
		e.spentReq, e.spentTok = 0, 0 // the report's own usage has left the window too
		return Charge{}, expired, false
	}
	return Charge{Requests: e.owedReq, Tokens: e.owedTok, At: e.owedAt}, 0, true
}

// repaid removes the debts an owner acknowledged (c, as owed returned it;
// debts recorded since stay owed) and records the owner's status in its
// acknowledgement as a report.
func (d *State) repaid(key string, c Charge, st limiter.Status, now time.Time) {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.get(key, now, lookup)
	if e == nil {
		return // dropped since: it owed nothing any more
	}
	e.owedReq = max(0, e.owedReq-c.Requests)
	e.owedTok = max(0, e.owedTok-c.Tokens)
	if st.Requests.Limit > 0 || st.Tokens.Limit > 0 {
		e.setReport(st, now)
	}
}

// owes reports whether key has unpaid debts.
func (d *State) owes(key string) bool {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	return e != nil && (e.owedReq > 0 || e.owedTok > 0)
}

// Charge is the debt of one key sent to its owner in one charge (a
// node.OpCharge): requests and tokens admitted, the latest at At.
type Charge struct {
	Requests, Tokens int64
	At               time.Time
}

// Exhausted reports whether key's owner last reported no request left,
// and that report is still fresh at now.
func (d *State) Exhausted(key string, now time.Time) bool {
	s := d.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	return e != nil && e.req.fresh(now) && e.req.remaining <= 0
}
