package router

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tokenring/tokenring/limiter"
)

// degraded is the strict local limiter used while a key's owner cannot be
// reached: it admits at most this node's share of each limit (limit ÷ live
// members, rounded down). Each share is a golang.org/x/time/rate bucket with
// burst ⌈share/2⌉ refilled at (share−burst) per window, so in any interval of
// one window it admits at most burst + (share−burst) = share units. Slots are
// counted per node and expire after the lease TTL like the owner's.
//
// Safe for concurrent use.
type degraded struct {
	now func() time.Time

	mu     sync.Mutex // guards keys and nextID
	keys   map[string]*share
	nextID uint64
}

// share is one key's local allowance.
type share struct {
	members  int
	requests *rate.Limiter // nil: unlimited
	tokens   *rate.Limiter // nil: unlimited
	slots    int64         // -1: unlimited
	held     map[uint64]time.Time
	ttl      time.Duration
}

func newDegraded(now func() time.Time) *degraded {
	return &degraded{now: now, keys: make(map[string]*share)}
}

func shareLimiter(limit int64, members int, window time.Duration) *rate.Limiter {
	if limit <= 0 {
		return nil
	}
	s := limit / int64(members)
	burst := (s + 1) / 2
	return rate.NewLimiter(rate.Limit(float64(s-burst)/window.Seconds()), int(burst))
}

// maxShares bounds the keys the degraded limiter remembers; past it, shares
// holding no slot are dropped (their buckets refill from full, which only
// happens in an outage touching more than maxShares tenants).
const maxShares = 100_000

func (d *degraded) shareFor(key string, l limiter.Limits, members int) *share {
	s := d.keys[key]
	if s == nil && len(d.keys) >= maxShares {
		for k, old := range d.keys {
			if len(old.held) == 0 {
				delete(d.keys, k)
			}
		}
	}
	if s != nil && s.members == members {
		return s
	}
	window := l.Window
	if window <= 0 {
		window = limiter.DefaultWindow
	}
	ttl := l.LeaseTTL
	if ttl <= 0 {
		ttl = limiter.DefaultLeaseTTL
	}
	ns := &share{
		members:  members,
		requests: shareLimiter(l.Requests, members, window),
		tokens:   shareLimiter(l.Tokens, members, window),
		slots:    -1,
		held:     make(map[uint64]time.Time),
		ttl:      ttl,
	}
	if l.Concurrency > 0 {
		ns.slots = l.Concurrency / int64(members)
	}
	if s != nil { // membership changed: keep the slots held
		ns.held = s.held
	}
	d.keys[key] = ns
	return ns
}

// acquire admits one request of n tokens on key's local share, returning a
// local slot id, or the refusing dimension and when to retry.
func (d *degraded) acquire(key string, l limiter.Limits, members int, n int64) (id uint64, reason limiter.Dimension, retry time.Duration) {
	if members < 1 {
		members = 1
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.shareFor(key, l, members)
	for sid, exp := range s.held {
		if !now.Before(exp) {
			delete(s.held, sid)
		}
	}
	if s.slots >= 0 && int64(len(s.held)) >= s.slots {
		retry = s.ttl
		for _, exp := range s.held {
			retry = min(retry, exp.Sub(now))
		}
		return 0, limiter.Concurrency, retry
	}
	var rr, tr *rate.Reservation
	if s.requests != nil {
		if rr = s.requests.ReserveN(now, 1); !rr.OK() || rr.DelayFrom(now) > 0 {
			retry = delayOr(rr, now, l.Window)
			rr.CancelAt(now)
			return 0, limiter.Requests, retry
		}
	}
	if s.tokens != nil && n > 0 {
		if tr = s.tokens.ReserveN(now, int(min(n, math.MaxInt32))); !tr.OK() || tr.DelayFrom(now) > 0 {
			retry = delayOr(tr, now, l.Window)
			tr.CancelAt(now)
			if rr != nil {
				rr.CancelAt(now)
			}
			return 0, limiter.Tokens, retry
		}
	}
	d.nextID++
	s.held[d.nextID] = now.Add(s.ttl)
	return d.nextID, limiter.None, 0
}

func delayOr(r *rate.Reservation, now time.Time, window time.Duration) time.Duration {
	if r.OK() {
		if d := r.DelayFrom(now); d != rate.InfDuration {
			return d
		}
	}
	if window <= 0 {
		window = limiter.DefaultWindow
	}
	return window
}

// release frees a local slot; unknown ids change nothing.
func (d *degraded) release(key string, id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.keys[key]
	if s == nil {
		return false
	}
	if _, ok := s.held[id]; !ok {
		return false
	}
	delete(s.held, id)
	return true
}
