package limiter

import (
	"math"
	"time"
)

// ewmaAlpha is the weight of the newest completion in a key's running
// average of completion tokens.
const ewmaAlpha = 0.2

// defaultPolicy is what a nil *Policy means. It is never modified.
var defaultPolicy Policy

func (p *Policy) buckets() int {
	if p == nil || p.Buckets <= 0 {
		return DefaultBuckets
	}
	return min(p.Buckets, maxBuckets)
}

func (p *Policy) defaultMaxTokens() int64 {
	if p == nil || p.DefaultMaxTokens <= 0 {
		return DefaultMaxTokens
	}
	return p.DefaultMaxTokens
}

func (p *Policy) queueLen() int {
	if p == nil || p.QueueLen <= 0 {
		return DefaultQueueLen
	}
	return p.QueueLen
}

func (p *Policy) aging() int64 {
	if p == nil || p.Aging <= 0 {
		return int64(DefaultAging)
	}
	return int64(p.Aging)
}

// maxDuration caps Limits.Window and Limits.LeaseTTL.
const maxDuration = 366 * 24 * time.Hour

// normalize fills the zero fields of l with the defaults, turns negative
// limits into 0 (unlimited) and caps the durations.
func (l Limits) normalize() Limits {
	l.Requests = max(l.Requests, 0)
	l.Tokens = max(l.Tokens, 0)
	l.Concurrency = max(l.Concurrency, 0)
	if l.Window <= 0 {
		l.Window = DefaultWindow
	}
	if l.LeaseTTL <= 0 {
		l.LeaseTTL = DefaultLeaseTTL
	}
	l.Window = min(l.Window, maxDuration)
	l.LeaseTTL = min(l.LeaseTTL, maxDuration)
	if l.Reserve != ReserveMaxTokens {
		l.Reserve = ReserveEstimate
	}
	l.Spend = min(max(l.Spend, 0), MaxSpend)
	return l
}

// lease is one admission that has not been settled, released or cancelled,
// and whose slot has not expired. Every lease holds one concurrency slot,
// whatever the number of requests it counts (Budget.hits). Kept at 24
// bytes: the hits of the rare lease that counts more than one request live
// in a map of their own rather than in every lease.
type lease struct {
	bucket   int64 // absolute bucket of the reservation, or gone
	reserved int64 // tokens charged at admission (T_est)
	expiry   int64 // unix ns; the slot is free at and after this time
}

// Budget is one key's limiter state: a sliding window of admitted requests, a
// sliding window of tokens with two-phase reservations, concurrency slots
// held by leases with a TTL, and a priority wait queue.
//
// Units: requests and tokens are counted over Limits.Window in
// Policy.Buckets time buckets of width ceil(Window/Buckets) each, a bucket
// being counted until its end plus Window (so Buckets+1 buckets count at any
// time); memory is constant per key. Every admission charges its requests
// (1, or Request.Hits) and T_est tokens to the current bucket and takes one
// slot until it is settled, released, cancelled or its lease expires
// (Limits.LeaseTTL after admission or the last Renew).
//
// Invariants: in any interval of length Window the requests admitted, and the
// tokens they are finally charged (when no usage exceeded its reservation),
// never exceed the limits; slots in use never exceed Limits.Concurrency (a
// SetLimits that lowers it revokes nothing: new admissions wait until enough
// slots are free); while waiters are queued no new request is admitted ahead
// of them.
//
// Time is always a parameter, a wall-clock time (its UnixNano is used, so
// years 1678 to 2262), comparable across the nodes a key moves between. A
// Budget never moves backwards: a time earlier than one already seen is
// treated as that latest time for the windows.
//
// Waiters are only admitted by Wake: after anything that frees capacity
// (Settle, Release, Cancel, CancelWait, SetLimits, or the time NextWake
// names), call Wake to hand out the grants.
//
// Tickets, and lease ids when Policy.IDs is nil, come from one sequence
// that snapshots carry, so they are unique within the key, across handoffs
// too; 0 is never used. With Policy.IDs set, lease ids are drawn from it
// instead: unique among the key's live leases, never 0. A lease id a caller
// chooses (Request.Lease) is unique among the live leases too: a drawn or
// counted id skips every live one, and an Acquire naming a live id admits
// nothing (Acquire). Only live leases are known: once a lease is settled,
// released, cancelled or expired, its id (chosen or not) may name a new
// one.
//
// Create one with NewBudget or RestoreBudget; the zero value is not usable.
// A Budget is not safe for concurrent use; the Table serialises access.
type Budget struct {
	pol    *Policy // shared by every Budget of a table; never nil
	lim    Limits  // normalised
	width  int64   // bucket width, ns
	last   int64   // the latest time seen, unix ns
	head   int64   // absolute index of the newest bucket: floor(last/width)
	cnt    []int64 // requests ring then tokens ring, 2(N+1) counters
	sumReq int64   // sum of the requests ring
	sumTok int64   // sum of the tokens ring
	ewma   float64 // running average of settled completion tokens; < 0: no history
	seq    uint64  // last ticket (or counted lease id, Policy.IDs nil) handed out

	leases   map[uint64]lease // allocated on first admission
	hits     map[uint64]int64 // requests of each live lease counting more than one (≥ 2); allocated on the first such admission
	minExp   int64            // ≤ every lease's expiry (exact after a scan)
	maxExp   int64            // ≥ every lease's expiry
	maxStale bool             // maxExp may be above the true maximum
	sent     bool             // lim's numbers were sent by a request (SetSentLimits)
	// nb: buckets per window (N ≤ maxBuckets); the ring holds N+1 (ring).
	// A uint16 in maxStale's padding, so that hits costs a key no memory.
	nb uint16
	// limitsGen: the Table's limits generation lim was taken at (Table.LimitsChanged).
	limitsGen uint32 // with sent and nb, in maxStale's padding

	q  *waitQueue // nil while nothing is queued
	sp *spending  // nil until the first admission under a spend limit
	fr *fairness  // a fair key's flows (Limits.Fair); nil until a flow asks
}

// NewBudget returns the state of one key with limits l, whose window starts
// empty at now. p holds settings shared by every Budget of a table and must
// not be modified while Budgets use it; nil means the defaults. Zero fields of
// l and *p take the defaults in this package.
func NewBudget(l Limits, p *Policy, now time.Time) *Budget {
	if p == nil {
		p = &defaultPolicy
	}
	l = l.normalize()
	nb := p.buckets()
	b := &Budget{
		pol:   p,
		lim:   l,
		nb:    uint16(nb),
		width: bucketWidth(int64(l.Window), nb),
		cnt:   make([]int64, 2*(nb+1)),
		ewma:  -1,
	}
	b.last = now.UnixNano()
	b.head = floorDiv(b.last, b.width)
	return b
}

// BucketEnd returns the end of the bucket admissions are charged to now:
// the one the latest time seen falls in. Every admission until then is
// charged to it, and leaves the window with it.
func (b *Budget) BucketEnd() time.Time {
	return time.Unix(0, (b.head+1)*b.width)
}

// Limits returns the key's limits, with the defaults filled in.
func (b *Budget) Limits() Limits { return b.lim }

// SetLimits changes the key's limits. What is already counted stays counted:
// a smaller window forgets only what lies before it, a different bucket width
// moves each bucket's units no earlier in time. Leases keep their expiry and
// queued waiters keep their place; call Wake afterwards, since raised limits
// may admit them.
//
// A different spend Period whose period now is not the current one's
// starts at once: what was spent is forgotten.
func (b *Budget) SetLimits(l Limits) {
	l = l.normalize()
	nb := b.pol.buckets()
	b.rebucket(bucketWidth(int64(l.Window), nb), nb)
	samePeriod := l.Period.same(b.lim.Period)
	b.lim = l
	if s := b.sp; s != nil && !samePeriod {
		if start, end := l.Period.bounds(b.last); start != s.start || end != s.end {
			s.start, s.end, s.spent = start, end, 0
		}
	}
}

// tick brings the Budget to time t: it slides the window, frees expired slots.
func (b *Budget) tick(t int64) {
	b.advance(t)
	b.expire(t)
	if b.sp != nil {
		b.rollPeriod()
	}
}

// estimate is T_est for r. With Reserve set: Reserve, or at least the
// prompt plus the request's own max_tokens under ReserveMaxTokens (a
// chain's key following a first key that estimated). Otherwise the prompt
// plus max_tokens (or the policy default), the smaller of that and 1.5×
// this key's average completion under ReserveEstimate once the key has
// history.
func (b *Budget) estimate(r Request) int64 {
	whole := b.lim.Reserve == ReserveMaxTokens
	if r.Reserve > 0 {
		if whole {
			return clampUnits(max(r.Reserve, clampUnits(r.PromptTokens)+clampUnits(r.MaxTokens)))
		}
		return clampUnits(r.Reserve)
	}
	c := r.MaxTokens
	if c <= 0 {
		c = b.pol.defaultMaxTokens()
	}
	c = clampUnits(c)
	if b.ewma >= 0 && !whole {
		c = min(c, int64(math.Ceil(DefaultCompletionFactor*b.ewma)))
	}
	return clampUnits(clampUnits(r.PromptTokens) + c)
}

// Acquire asks to admit request r at now.
//
// The request reserves T_est tokens: r.Reserve if > 0, else r.PromptTokens
// plus the smaller of max_tokens (r.MaxTokens, or Policy.DefaultMaxTokens if
// 0) and ceil(1.5 × the key's running average of settled completion tokens),
// or plus max_tokens while the key has no settled completion yet. A key
// whose Limits.Reserve is ReserveMaxTokens reserves r.PromptTokens plus
// max_tokens whatever its history, and at least r.PromptTokens +
// r.MaxTokens when r.Reserve is set (ReserveMode). The
// request counts H = r.Hits requests (1 if r.Hits ≤ 0). It is admitted if
// the request window has room for H more, the token window for T_est
// more, a concurrency slot is free, and no waiter is queued (no barging).
// Admission charges both windows in the current bucket and returns a lease
// holding one slot until now+LeaseTTL; settle, release, cancel or renew it
// by Decision.Lease, which is r.Lease if that is not 0 and a fresh id
// otherwise.
//
// Otherwise, if r.Wait > 0 and the queue has room, the request is queued
// until now+r.Wait and the Decision says Queued with a Ticket; its outcome is
// a later Grant from Wake (a waiter needs what it would need now: H
// requests, T_est tokens, a slot). If not, it is refused: Reason is the first
// dimension without room (requests, tokens, concurrency), or the blocking
// dimension of the queue head while waiters are queued, or QueueFull; and
// RetryAfter is the exact time until the request would fit if nothing else
// happened. A request that exceeds a limit on its own (H above the request
// limit, T_est above the token limit) can never fit: it is refused at once
// with that Reason (Requests first) and RetryAfter = Window.
//
// A repeat is answered before anything else: if r.Lease is not 0 and a
// live lease (not settled, released, cancelled or expired at now) holds
// that id, nothing is admitted or charged, and the Decision is Allowed with
// that lease, its Reserved tokens and the key's Status, whatever the rest
// of r; so a caller that chooses its lease id can repeat an Acquire and be
// charged once (until the lease ends: then the id admits anew). An id the
// Budget draws never equals a live chosen one; a chosen id that equals a
// live drawn one is taken for a repeat of that lease, so chosen ids must
// be unguessable and spread like the drawn ones: one derived from a 64-bit
// hash meets one of n live random ids (Policy.IDs) with chance n·2^-64,
// and counted ids (Policy.IDs nil) are small numbers.
func (b *Budget) Acquire(now time.Time, r Request) Decision {
	t := now.UnixNano()
	b.tick(t)
	if r.Lease != 0 {
		if l, ok := b.leases[r.Lease]; ok {
			return b.repeat(t, r.Lease, l)
		}
	}
	tok := b.estimate(r)
	n := admission(hitsOf(r), tok)
	if b.lim.Spend > 0 {
		n.cost = r.Price.reserveCost(r.PromptTokens, tok, b.lim.Reserve)
	}
	f := b.flowOf(t, &r)
	d := b.decide(t, r, n, f)
	if f != nil && !d.Allowed && !d.Queued {
		b.refusedFlow(f, n)
	}
	return d
}

// decide is Acquire's decision on r, needing n, of flow f (nil: none), at
// t (after tick), once it is not a repeat.
func (b *Budget) decide(t int64, r Request, n need, f *flow) Decision {
	if d := b.neverFits(n); d != None {
		return b.refuse(t, d, int64(b.lim.Window))
	}
	if f != nil {
		return b.decideFair(t, r, n, f)
	}
	if b.q.len() > 0 {
		reason, wait := b.behindQueue(t, n)
		if r.Wait > 0 && b.q.len() < b.pol.queueLen() {
			return b.enqueue(t, r, n, reason)
		}
		if r.Wait > 0 {
			reason = QueueFull
		}
		return b.refuse(t, reason, wait)
	}
	if d := b.blocking(n); d != None {
		if r.Wait > 0 {
			return b.enqueue(t, r, n, d)
		}
		wait, _ := b.fitAfter(t, n)
		return b.refuse(t, d, wait)
	}
	return b.admit(t, n, r.Lease, r.Price, nil)
}

// admit charges an admission needing n at t (after tick) and creates its
// lease: id, which no live lease holds, or a fresh id if id is 0. Under a
// spend limit the lease holds n.cost, to settle at price p; of a flow f
// (not nil), it counts for f.
func (b *Budget) admit(t int64, n need, id uint64, p Price, f *flow) Decision {
	k := b.head
	b.addReq(k, n.req)
	b.addTok(k, n.tok)
	if id == 0 {
		id = b.newLeaseID()
	}
	b.putLease(id, lease{bucket: k, reserved: n.tok, expiry: t + int64(b.lim.LeaseTTL)})
	if n.req != 1 {
		if b.hits == nil {
			b.hits = make(map[uint64]int64)
		}
		b.hits[id] = n.req
	}
	if b.lim.Spend > 0 {
		b.holdSpend(t, id, n.cost, p)
	}
	b.admittedFlow(f, id, n)
	return Decision{Allowed: true, Lease: id, Reserved: n.tok, Status: b.status(t)}
}

// repeat is the answer at t to an Acquire naming live lease id, l.
func (b *Budget) repeat(t int64, id uint64, l lease) Decision {
	return Decision{Allowed: true, Lease: id, Reserved: l.reserved, Status: b.status(t)}
}

// refuse is a refusal at t.
func (b *Budget) refuse(t int64, reason Dimension, wait int64) Decision {
	return Decision{Reason: reason, RetryAfter: time.Duration(wait), Status: b.status(t)}
}

// Settle completes lease with the usage the provider reported, at now.
// The difference between the actual tokens (prompt+completion) and the
// reservation is applied to the bucket the reservation was charged to: a
// credit gives capacity back, a debit charges the excess. If that bucket has
// left the window, a credit is dropped (nothing is counted there any more)
// and a debit is charged to the current bucket. The completion tokens update
// the key's average completion, unless the request reserved no completion
// and had none (an embedding: Request.Reserve of its prompt alone). The slot is freed. Under a spend limit
// the lease's reserved cost is freed and the usage's cost at the lease's
// Price is spent in its place, in the current period, whether or not the
// limit has room for it (the request was made): what is spent then shows
// as the spend's Overdraft.
//
// Settle returns false and changes nothing if the lease is unknown, already
// settled, released or cancelled, or expired (its slot was freed; the
// reservation stays charged as reserved). Settle is idempotent.
//
// A debit is charged whether or not the window has room for it: the
// tokens were used. One that takes the token window past its limit shows
// as the tokens' Overdraft (Status); SettleOverdrawn says how much of it
// each settle caused.
func (b *Budget) Settle(now time.Time, id uint64, u Usage) bool {
	ok, _ := b.SettleOverdrawn(now, id, u)
	return ok
}

// SettleOverdrawn is Settle, and also returns how many of the tokens the
// settle charged went past the token limit: by how much it raised the
// tokens' Overdraft (0 for a credit, within the limit, or unlimited).
// Summed over a key's settles, it is the tokens its requests used beyond
// what the limit allowed, as a node's metric counts them.
func (b *Budget) SettleOverdrawn(now time.Time, id uint64, u Usage) (ok bool, overdrawn int64) {
	t := now.UnixNano()
	b.tick(t)
	l, ok := b.leases[id]
	if !ok {
		return false, 0
	}
	completion := clampUnits(u.CompletionTokens)
	delta := clampUnits(clampUnits(u.PromptTokens)+completion) - l.reserved
	over := b.tokensOver()
	switch {
	case b.live(l.bucket):
		b.addTok(l.bucket, delta)
	case delta > 0:
		b.addTok(b.head, delta)
	}
	overdrawn = max(b.tokensOver()-over, 0)
	b.endSpend(id, func(sl spendLease) int64 { return sl.price.Cost(u) })
	b.endFlow(id, l.bucket, 0, delta)
	switch {
	case completion == 0 && l.reserved <= clampUnits(u.PromptTokens):
		// It reserved no completion and had none (an embedding): it
		// says nothing of how long the key's completions run.
	case b.ewma < 0:
		b.ewma = float64(completion)
	default:
		b.ewma += ewmaAlpha * (float64(completion) - b.ewma)
	}
	b.dropLease(id, l)
	return true, overdrawn
}

// tokensOver is how far the token window counts past its limit: 0 within
// it, and when unlimited.
func (b *Budget) tokensOver() int64 {
	if l := b.lim.Tokens; l > 0 {
		return max(b.sumTok-l, 0)
	}
	return 0
}

// Release frees lease's slot at now and keeps its tokens charged as
// reserved, its reserved cost spent: the request completed but no usage
// was reported. It returns
// false and changes nothing if the lease is unknown, finished or expired.
func (b *Budget) Release(now time.Time, id uint64) bool {
	b.tick(now.UnixNano())
	l, ok := b.leases[id]
	if !ok {
		return false
	}
	b.endSpend(id, reservedCost)
	b.endFlow(id, l.bucket, 0, 0)
	b.dropLease(id, l)
	return true
}

// Cancel rolls an admission back completely at now: its requests (all of
// its Request.Hits) and its reserved tokens are removed from the bucket
// they were charged to (if that bucket is still in the window) and its slot
// is freed, and its reserved cost too, as if it had never been admitted. Use it when another key (a
// pool) refused after this one admitted. It returns false and changes
// nothing if the lease is unknown, finished or expired.
func (b *Budget) Cancel(now time.Time, id uint64) bool {
	b.tick(now.UnixNano())
	l, ok := b.leases[id]
	if !ok {
		return false
	}
	if b.live(l.bucket) {
		b.addReq(l.bucket, -b.leaseHits(id))
		b.addTok(l.bucket, -l.reserved)
	}
	b.endFlow(id, l.bucket, -b.leaseHits(id), -l.reserved)
	b.endSpend(id, noCost)
	b.dropLease(id, l)
	return true
}

// Renew extends lease's slot to now+LeaseTTL (never shortening it) and
// returns the new expiry. It returns false if the lease is unknown, finished
// or already expired at now.
func (b *Budget) Renew(now time.Time, id uint64) (time.Time, bool) {
	t := now.UnixNano()
	b.tick(t)
	l, ok := b.leases[id]
	if !ok {
		return time.Time{}, false
	}
	exp := t + int64(b.lim.LeaseTTL)
	if exp <= l.expiry {
		return time.Unix(0, l.expiry), true
	}
	l.expiry = exp
	b.leases[id] = l
	if exp >= b.maxExp {
		b.maxExp, b.maxStale = exp, false
	}
	return now.Add(b.lim.LeaseTTL), true
}

// Status returns the key's three dimensions at now. Limit 0 means unlimited,
// and then Remaining and Overdraft are 0 too. Overdraft is how far what is
// counted (requests and tokens in the window, slots in use) is past the
// limit, Remaining 0 then. Reset is the time until the dimension is
// completely free if nothing else is admitted: the newest counted bucket
// leaves the window, the last slot expires.
func (b *Budget) Status(now time.Time) Status {
	t := now.UnixNano()
	b.tick(t)
	return b.status(t)
}

func (b *Budget) status(t int64) Status {
	return Status{
		Requests:    dimStatus(b.lim.Requests, b.sumReq, b.resetWindow(t, 0)),
		Tokens:      dimStatus(b.lim.Tokens, b.sumTok, b.resetWindow(t, b.ring())),
		Concurrency: dimStatus(b.lim.Concurrency, int64(len(b.leases)), b.slotReset(t)),
		Spend:       b.spendStatus(t),
	}
}

func dimStatus(limit, used, reset int64) DimStatus {
	d := DimStatus{Limit: limit, Reset: time.Duration(reset)}
	if limit > 0 {
		d.Remaining = max(limit-used, 0)
		d.Overdraft = max(used-limit, 0)
	}
	return d
}

// slotReset is the time after t until the last slot in use expires.
func (b *Budget) slotReset(t int64) int64 {
	if len(b.leases) == 0 {
		return 0
	}
	if b.maxStale {
		b.rescan(t)
	}
	return max(0, b.maxExp-t)
}

// Idle reports whether the key holds nothing at now: no units counted in
// either window, no lease, no waiter, nothing spent in the period. An idle Budget is equivalent to a new
// one, and a Table may drop it.
func (b *Budget) Idle(now time.Time) bool {
	b.tick(now.UnixNano())
	return b.sumReq == 0 && b.sumTok == 0 && len(b.leases) == 0 && b.q.len() == 0 && b.spendUsed() == 0
}

// Charge counts units admitted elsewhere at at — fallback admissions that
// another node made while this key's owner was unreachable (a debt) — at
// now: requests and tokens are added to the bucket of at, so they leave the
// window exactly when admissions made at at would. An at later than the
// newest bucket (a clock ahead of ours) is charged to the newest bucket. A
// charge whose bucket has already left the window is dropped: those units
// would no longer be counted anyway. Charged units count toward the limits
// exactly like admissions (they hold no slot), and may take the window past
// its limit: Status then reports Remaining 0, never less, and the excess as
// Overdraft. Negative amounts
// count as 0. Charge reports whether anything was counted.
func (b *Budget) Charge(now, at time.Time, requests, tokens int64) bool {
	b.tick(now.UnixNano())
	requests, tokens = clampUnits(requests), clampUnits(tokens)
	if requests == 0 && tokens == 0 {
		return false
	}
	k := min(floorDiv(at.UnixNano(), b.width), b.head)
	if !b.live(k) {
		return false
	}
	b.addReq(k, requests)
	b.addTok(k, tokens)
	return true
}

// Since calls fn, oldest first, for every bucket b's windows still count
// that holds more than base (an earlier snapshot of the same key) held in
// it: at is the bucket's start, requests and tokens what b counts there
// beyond base. It is what was admitted (or charged) after base was taken,
// for a base that another member restored from: b's history since they
// diverged. A bucket that holds less than base (a settle that credited
// tokens) contributes nothing, so the result never undercounts; a base of a
// different bucket width counts as empty. base may be nil.
func (b *Budget) Since(base *Budget, fn func(at time.Time, requests, tokens int64)) {
	m := b.ring()
	for k := b.head - int64(b.nb); k <= b.head; k++ {
		req, tok := b.cnt[ringIndex(k, m)], b.cnt[m+ringIndex(k, m)]
		if base != nil && base.width == b.width && base.live(k) {
			bm := base.ring()
			req -= base.cnt[ringIndex(k, bm)]
			tok -= base.cnt[bm+ringIndex(k, bm)]
		}
		if req > 0 || tok > 0 {
			fn(time.Unix(0, k*b.width), max(req, 0), max(tok, 0))
		}
	}
}
