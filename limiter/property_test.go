package limiter

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The property tests drive a Budget with random operation sequences on a fake
// clock and check it against a model that knows nothing of rings, only of
// admissions: when each was admitted, into which bucket, how many requests
// it counts (Request.Hits), what it is charged now and what it holds; and
// of lease ids: a caller may choose one (Request.Lease), and naming a live
// one is a repeat that admits nothing.

// madm is one admission in the model.
type madm struct {
	id        uint64
	at        int64 // unix ns of admission
	bucket    int64 // floor(at / width)
	hits      int64 // requests it counts (≥ 1)
	reserved  int64
	charge    int64 // tokens it is charged now (reserved, then settled actual)
	cancelled bool
	open      bool  // holds a slot (not settled, released, cancelled)
	expiry    int64 // slot expiry, unix ns
}

// mwaiter is one queued request in the model.
type mwaiter struct {
	ticket uint64
	class  Priority
	seq    int // arrival order
	enq    int64
	dl     int64
	tok    int64
	hits   int64  // requests it counts (≥ 1)
	lease  uint64 // the lease id it chose; 0: drawn
}

// extraCharge is a debit charged to a later bucket than its admission's.
type extraCharge struct{ bucket, tok int64 }

type harness struct {
	t      *rapid.T
	b      *Budget
	lim    Limits
	pol    *Policy
	debits bool // usage may exceed the reservation

	now     int64
	width   int64
	nb      int64
	aging   int64
	ewma    float64
	adms    []*madm
	byID    map[uint64]*madm // the latest admission of each lease id (only it may be open)
	counted map[uint64]bool  // the lease ids the Budget drew (not chosen)
	extras  []extraCharge
	queue   []*mwaiter // in arrival order
	qseq    int
	issued  []uint64 // every lease id and ticket seen, for picking stale ones
	tickets []uint64 // every ticket handed out
	repeats int      // acquires and grants answered as repeats of a live lease
	// outcome counts every ticket's final answers (grant or CancelWait).
	outcome map[uint64]int
}

func newHarness(t *rapid.T, debits bool) *harness {
	window := time.Duration(rapid.Int64Range(1000, 20000).Draw(t, "window_ms")) * ms
	lim := Limits{
		Window:   window,
		LeaseTTL: time.Duration(rapid.Int64Range(500, 3*int64(window/ms)).Draw(t, "ttl_ms")) * ms,
	}
	if rapid.Bool().Draw(t, "limit_requests") {
		lim.Requests = rapid.Int64Range(1, 6).Draw(t, "requests")
	}
	if rapid.Bool().Draw(t, "limit_tokens") {
		lim.Tokens = rapid.Int64Range(50, 1500).Draw(t, "tokens")
	}
	if rapid.Bool().Draw(t, "limit_concurrency") {
		lim.Concurrency = rapid.Int64Range(1, 4).Draw(t, "concurrency")
	}
	pol := &Policy{
		Buckets:          rapid.IntRange(1, 12).Draw(t, "buckets"),
		DefaultMaxTokens: rapid.Int64Range(1, 300).Draw(t, "default_max_tokens"),
		QueueLen:         rapid.IntRange(1, 4).Draw(t, "queue_len"),
		Aging:            time.Duration(rapid.Int64Range(1, int64(window/ms)).Draw(t, "aging_ms")) * ms,
	}
	start := t0.UnixNano() + rapid.Int64Range(0, int64(window)).Draw(t, "start_offset")
	h := &harness{
		t: t, lim: lim, pol: pol, debits: debits,
		now:     start,
		width:   bucketWidth(int64(window), pol.Buckets),
		nb:      int64(pol.Buckets),
		aging:   int64(pol.Aging),
		ewma:    -1,
		byID:    map[uint64]*madm{},
		counted: map[uint64]bool{},
		outcome: map[uint64]int{},
	}
	h.b = NewBudget(lim, pol, time.Unix(0, start))
	return h
}

func (h *harness) nowT() time.Time { return time.Unix(0, h.now) }

func (h *harness) head() int64 { return floorDiv(h.now, h.width) }

func (h *harness) liveBucket(k int64) bool { return k <= h.head() && k >= h.head()-h.nb }

// liveSums are the model's window contents and slots in use at h.now.
func (h *harness) liveSums() (req, tok, slots int64) {
	for _, a := range h.adms {
		if !a.cancelled && h.liveBucket(a.bucket) {
			req += a.hits
			tok += a.charge
		}
		if a.open && h.now < a.expiry {
			slots++
		}
	}
	for _, e := range h.extras {
		if h.liveBucket(e.bucket) {
			tok += e.tok
		}
	}
	return
}

// blocking is the model's first dimension without room for an admission
// of hits requests and tok tokens.
func (h *harness) blocking(tok, hits int64) Dimension {
	req, sum, slots := h.liveSums()
	switch {
	case h.lim.Requests > 0 && req+hits > h.lim.Requests:
		return Requests
	case h.lim.Tokens > 0 && sum+tok > h.lim.Tokens:
		return Tokens
	case h.lim.Concurrency > 0 && slots+1 > h.lim.Concurrency:
		return Concurrency
	}
	return None
}

// neverFits is the dimension whose limit an admission of hits requests and
// tok tokens exceeds on its own, requests first; None if it can fit.
func (h *harness) neverFits(tok, hits int64) Dimension {
	switch {
	case h.lim.Requests > 0 && hits > h.lim.Requests:
		return Requests
	case h.lim.Tokens > 0 && tok > h.lim.Tokens:
		return Tokens
	}
	return None
}

// modelHits is the number of requests Request.Hits h counts.
func modelHits(h int64) int64 { return max(h, 1) }

func (h *harness) estimate(r Request) int64 {
	if r.Reserve > 0 {
		return r.Reserve
	}
	c := r.MaxTokens
	if c <= 0 {
		c = h.pol.DefaultMaxTokens
	}
	if h.ewma >= 0 {
		c = min(c, int64(math.Ceil(1.5*h.ewma)))
	}
	return max(r.PromptTokens, 0) + c
}

// expire closes the model's leases whose slot expired at h.now.
func (h *harness) expire() {
	for _, a := range h.adms {
		if a.open && h.now >= a.expiry {
			a.open = false
		}
	}
}

// admitted records an admission of hits requests and tok tokens, under the
// chosen lease id (0: drawn), at h.now and checks the window invariant for
// the interval of length Window ending now: since charges only shrink
// later (without debits), checking each admission's interval when it is
// made covers every interval.
func (h *harness) admitted(d Decision, tok, hits int64, chosen uint64) {
	t := h.t
	if d.Reserved != tok {
		t.Fatalf("reserved %d, model estimate %d", d.Reserved, tok)
	}
	if d.Lease == 0 || h.openLease(d.Lease) != nil {
		t.Fatalf("lease id %d zero or held by a live lease", d.Lease)
	}
	if chosen != 0 && d.Lease != chosen {
		t.Fatalf("lease id %d, chosen %d", d.Lease, chosen)
	}
	if chosen == 0 {
		h.counted[d.Lease] = true
	}
	a := &madm{id: d.Lease, at: h.now, bucket: h.head(), hits: hits, reserved: tok, charge: tok, open: true,
		expiry: h.now + int64(h.lim.LeaseTTL)}
	h.adms = append(h.adms, a)
	h.byID[a.id] = a
	h.issued = append(h.issued, a.id)
	h.checkWindowInvariant(h.now)
}

// openLease is the model's live lease with id at h.now, or nil.
func (h *harness) openLease(id uint64) *madm {
	if a := h.byID[id]; a != nil && a.open && h.now < a.expiry {
		return a
	}
	return nil
}

// repeated checks d, the answer to an acquire (or a waiter) naming the id
// of live lease a: it is that lease, and nothing was charged (check
// compares the windows after every step).
func (h *harness) repeated(d Decision, a *madm) {
	if !d.Allowed || d.Queued || d.Lease != a.id || d.Reserved != a.reserved {
		h.t.Fatalf("repeat of lease %d (reserved %d): %+v", a.id, a.reserved, d)
	}
	h.repeats++
}

// checkWindowInvariant checks the interval (end−Window, end].
func (h *harness) checkWindowInvariant(end int64) {
	if h.debits {
		return
	}
	var req, tok int64
	for _, a := range h.adms {
		if !a.cancelled && a.at > end-int64(h.lim.Window) && a.at <= end {
			req += a.hits
			tok += a.charge
		}
	}
	if h.lim.Requests > 0 && req > h.lim.Requests {
		h.t.Fatalf("%d requests admitted in a window ending at %d, limit %d", req, end, h.lim.Requests)
	}
	if h.lim.Tokens > 0 && tok > h.lim.Tokens {
		h.t.Fatalf("%d tokens charged in a window ending at %d, limit %d", tok, end, h.lim.Tokens)
	}
}

// modelHead is the waiter the model expects to be admitted next.
func (h *harness) modelHead() *mwaiter {
	var fi, fb *mwaiter
	for _, w := range h.queue {
		if w.class == Interactive && fi == nil {
			fi = w
		}
		if w.class == Batch && fb == nil {
			fb = w
		}
	}
	switch {
	case fi == nil:
		return fb
	case fb == nil:
		return fi
	case fb.enq+h.aging < fi.enq:
		return fb
	}
	return fi
}

func (h *harness) removeWaiter(ticket uint64) *mwaiter {
	for i, w := range h.queue {
		if w.ticket == ticket {
			h.queue = append(h.queue[:i], h.queue[i+1:]...)
			return w
		}
	}
	return nil
}

// checkRetry verifies on a copy that a refused request (empty queue) fits
// exactly RetryAfter later and not a nanosecond earlier.
func (h *harness) checkRetry(r Request, d Decision) {
	t := h.t
	if d.RetryAfter <= 0 {
		t.Fatalf("refusal with RetryAfter %v", d.RetryAfter)
	}
	data, _ := h.b.MarshalBinary()
	c, err := RestoreBudget(data, h.lim, h.pol)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if e := c.Acquire(h.nowT().Add(d.RetryAfter-1), r); e.Allowed {
		t.Fatalf("admitted 1ns before RetryAfter %v", d.RetryAfter)
	}
	if e := c.Acquire(h.nowT().Add(d.RetryAfter), r); !e.Allowed {
		t.Fatalf("refused at RetryAfter %v: %+v", d.RetryAfter, e)
	}
}

func (h *harness) acquire() {
	t := h.t
	r := Request{
		PromptTokens: rapid.Int64Range(0, 300).Draw(t, "prompt"),
		MaxTokens:    rapid.Int64Range(0, 300).Draw(t, "max_tokens"),
		Priority:     rapid.SampledFrom([]Priority{Interactive, Batch}).Draw(t, "priority"),
	}
	if rapid.IntRange(0, 3).Draw(t, "explicit_reserve") == 0 {
		r.Reserve = rapid.Int64Range(1, 600).Draw(t, "reserve")
	}
	if rapid.Bool().Draw(t, "wait") {
		r.Wait = time.Duration(rapid.Int64Range(1, 2*int64(h.lim.Window)).Draw(t, "wait_ns"))
	}
	if rapid.IntRange(0, 2).Draw(t, "several_hits") == 0 {
		r.Hits = rapid.Int64Range(-1, 7).Draw(t, "hits")
	}
	r.Lease = h.chooseLease()
	h.expire()
	if a := h.openLease(r.Lease); r.Lease != 0 && a != nil {
		h.repeated(h.b.Acquire(h.nowT(), r), a)
		return
	}
	tok, hits := h.estimate(r), modelHits(r.Hits)
	want := h.blocking(tok, hits)
	d := h.b.Acquire(h.nowT(), r)
	switch {
	case h.neverFits(tok, hits) != None:
		if d.Allowed || d.Queued || d.Reason != h.neverFits(tok, hits) || d.RetryAfter != h.lim.Window {
			t.Fatalf("never-fitting request (%d hits, %d tokens): %+v", hits, tok, d)
		}
	case len(h.queue) > 0:
		if d.Allowed {
			t.Fatalf("admitted ahead of %d waiters", len(h.queue))
		}
		switch {
		case r.Wait > 0 && len(h.queue) < h.pol.QueueLen:
			if !d.Queued {
				t.Fatalf("not queued behind waiters: %+v", d)
			}
		case r.Wait > 0:
			if d.Reason != QueueFull {
				t.Fatalf("queue full: %+v", d)
			}
		default:
			if d.Queued || d.Reason == None || d.Reason == QueueFull || d.RetryAfter < 0 {
				t.Fatalf("refusal behind waiters: %+v", d)
			}
		}
	case want == None:
		if !d.Allowed {
			t.Fatalf("refused %+v although the model has room for %d tokens", d, tok)
		}
	case r.Wait > 0:
		if !d.Queued {
			t.Fatalf("not queued: %+v", d)
		}
	default:
		if d.Allowed || d.Queued || d.Reason != want {
			t.Fatalf("refusal %+v, model says %v", d, want)
		}
		h.checkRetry(r, d)
	}
	if d.Allowed {
		h.admitted(d, tok, hits, r.Lease)
	}
	if d.Queued {
		if h.counted[d.Ticket] {
			t.Fatalf("ticket %d reuses a drawn lease id", d.Ticket)
		}
		h.qseq++
		h.queue = append(h.queue, &mwaiter{ticket: d.Ticket, class: r.Priority, seq: h.qseq, enq: h.now,
			dl: h.now + int64(r.Wait), tok: tok, hits: hits, lease: r.Lease})
		h.issued = append(h.issued, d.Ticket)
		h.tickets = append(h.tickets, d.Ticket)
	}
}

// chooseLease returns the lease id an acquire names: mostly 0 (the Budget
// draws one), else an open lease's (a repeat), any id seen (a closed
// lease's id taken again, a ticket's), a small id the sequence may draw
// later, or a large one.
func (h *harness) chooseLease() uint64 {
	t := h.t
	var open []uint64
	for _, a := range h.adms {
		if h.openLease(a.id) == a {
			open = append(open, a.id)
		}
	}
	switch rapid.IntRange(0, 7).Draw(t, "lease_kind") {
	case 0:
		if len(open) > 0 {
			return rapid.SampledFrom(open).Draw(t, "repeat_lease")
		}
	case 1:
		if len(h.issued) > 0 {
			return rapid.SampledFrom(h.issued).Draw(t, "seen_lease")
		}
	case 2:
		return rapid.Uint64Range(1, 40).Draw(t, "small_lease")
	case 3:
		return rapid.Uint64Range(math.MaxUint64-3, math.MaxUint64).Draw(t, "large_lease")
	}
	return 0
}

// pickLease returns an open lease most of the time, else any id seen or a
// random one.
func (h *harness) pickLease() uint64 {
	t := h.t
	var open []uint64
	for _, a := range h.adms {
		if a.open {
			open = append(open, a.id)
		}
	}
	if len(open) > 0 && rapid.IntRange(0, 4).Draw(t, "pick_open") > 0 {
		return rapid.SampledFrom(open).Draw(t, "open_lease")
	}
	if len(h.issued) > 0 && rapid.Bool().Draw(t, "pick_issued") {
		return rapid.SampledFrom(h.issued).Draw(t, "issued")
	}
	return rapid.Uint64Range(0, 1000).Draw(t, "random_lease")
}

// leaseOpen reports whether the model holds lease id open at h.now.
func (h *harness) leaseOpen(id uint64) *madm {
	h.expire()
	if a := h.byID[id]; a != nil && a.open {
		return a
	}
	return nil
}

func (h *harness) settle() {
	t := h.t
	id := h.pickLease()
	a := h.leaseOpen(id)
	var actual int64
	if a != nil && !h.debits {
		actual = rapid.Int64Range(0, a.reserved).Draw(t, "actual")
	} else {
		actual = rapid.Int64Range(0, 700).Draw(t, "actual")
	}
	completion := rapid.Int64Range(0, actual).Draw(t, "completion")
	ok := h.b.Settle(h.nowT(), id, Usage{PromptTokens: actual - completion, CompletionTokens: completion})
	if ok != (a != nil) {
		t.Fatalf("settle(%d) = %v, model open %v", id, ok, a != nil)
	}
	if a == nil {
		return
	}
	delta := actual - a.reserved
	switch {
	case h.liveBucket(a.bucket):
		a.charge += delta
	case delta > 0:
		h.extras = append(h.extras, extraCharge{h.head(), delta})
	default:
		a.charge = actual // credit dropped, but the request used only this
	}
	a.open = false
	switch {
	case completion == 0 && a.reserved <= actual: // no completion reserved nor made: the average stays
	case h.ewma < 0:
		h.ewma = float64(completion)
	default:
		h.ewma += ewmaAlpha * (float64(completion) - h.ewma)
	}
}

func (h *harness) release() {
	id := h.pickLease()
	a := h.leaseOpen(id)
	if ok := h.b.Release(h.nowT(), id); ok != (a != nil) {
		h.t.Fatalf("release(%d) = %v, model open %v", id, ok, a != nil)
	}
	if a != nil {
		a.open = false
	}
}

func (h *harness) cancel() {
	id := h.pickLease()
	a := h.leaseOpen(id)
	if ok := h.b.Cancel(h.nowT(), id); ok != (a != nil) {
		h.t.Fatalf("cancel(%d) = %v, model open %v", id, ok, a != nil)
	}
	if a != nil {
		a.open = false
		a.cancelled = true
	}
}

func (h *harness) renew() {
	id := h.pickLease()
	a := h.leaseOpen(id)
	exp, ok := h.b.Renew(h.nowT(), id)
	if ok != (a != nil) {
		h.t.Fatalf("renew(%d) = %v, model open %v", id, ok, a != nil)
	}
	if a != nil {
		a.expiry = max(a.expiry, h.now+int64(h.lim.LeaseTTL))
		if exp.UnixNano() != a.expiry {
			h.t.Fatalf("renew(%d) expiry %d, want %d", id, exp.UnixNano(), a.expiry)
		}
	}
}

func (h *harness) advance() {
	t := h.t
	switch rapid.IntRange(0, 4).Draw(t, "advance_kind") {
	case 4: // exactly Aging: interactive and batch waiters tie
		h.now += h.aging
	case 0: // within a bucket or so
		h.now += rapid.Int64Range(0, h.width).Draw(t, "dt")
	case 1: // onto a bucket boundary
		h.now = (h.head() + rapid.Int64Range(1, h.nb+1).Draw(t, "buckets_ahead")) * h.width
	case 2: // to the next slot expiry, or just before it
		var next int64 = math.MaxInt64
		for _, a := range h.adms {
			if a.open && a.expiry > h.now {
				next = min(next, a.expiry)
			}
		}
		if next != math.MaxInt64 {
			h.now = next - rapid.Int64Range(0, 1).Draw(t, "before")
		}
	default:
		h.now += rapid.Int64Range(0, 2*int64(h.lim.Window)).Draw(t, "dt_long")
	}
}

// wake calls Wake and checks every grant against the model: queue order,
// room for admissions, deadlines for refusals; afterwards the head must not
// fit and no deadline may have passed.
func (h *harness) wake() {
	h.processGrants(h.b.Wake(h.nowT(), nil))
}

func (h *harness) processGrants(gs []Grant) {
	t := h.t
	h.expire()
	for _, g := range gs {
		var w *mwaiter
		for _, q := range h.queue {
			if q.ticket == g.Ticket {
				w = q
			}
		}
		if w == nil {
			t.Fatalf("grant for unknown ticket %d", g.Ticket)
		}
		h.outcome[g.Ticket]++
		d := g.Decision
		if a := h.openLease(w.lease); w.lease != 0 && a != nil {
			// Its id is live (an earlier waiter's, admitted): answered
			// with that lease as it leaves, at its turn or its deadline.
			h.repeated(d, a)
			h.removeWaiter(w.ticket)
			continue
		}
		if d.Allowed {
			h.checkOrder(w)
			if dim := h.blocking(w.tok, w.hits); dim != None || h.neverFits(w.tok, w.hits) != None {
				t.Fatalf("waiter %d admitted without room (%v)", w.ticket, dim)
			}
			h.removeWaiter(w.ticket)
			h.admitted(d, w.tok, w.hits, w.lease)
		} else {
			if h.now < w.dl && h.neverFits(w.tok, w.hits) == None {
				t.Fatalf("waiter %d refused before its deadline: %+v", w.ticket, d)
			}
			if d.Reason == None || d.Reason == QueueFull || d.RetryAfter < 0 {
				t.Fatalf("waiter %d refused with %+v", w.ticket, d)
			}
			h.removeWaiter(w.ticket)
		}
	}
	if hw := h.modelHead(); hw != nil {
		if h.blocking(hw.tok, hw.hits) == None || h.neverFits(hw.tok, hw.hits) != None {
			t.Fatalf("head %d fits at %d but was not admitted", hw.ticket, h.now)
		}
		if hw.lease != 0 && h.openLease(hw.lease) != nil {
			t.Fatalf("head %d names live lease %d but was not answered", hw.ticket, hw.lease)
		}
	}
	for _, w := range h.queue {
		if w.dl <= h.now {
			t.Fatalf("waiter %d still queued after its deadline", w.ticket)
		}
	}
}

// checkOrder checks that admitting x now respects the queue order.
func (h *harness) checkOrder(x *mwaiter) {
	for _, y := range h.queue {
		switch {
		case y == x:
		case y.class == x.class && y.seq < x.seq:
			h.t.Fatalf("waiter %d admitted before %d of its class", x.ticket, y.ticket)
		case x.class == Batch && y.class == Interactive && x.enq+h.aging >= y.enq:
			h.t.Fatalf("batch %d (at %d) admitted before interactive %d (at %d)", x.ticket, x.enq, y.ticket, y.enq)
		case x.class == Interactive && y.class == Batch && x.enq > y.enq+h.aging:
			h.t.Fatalf("interactive %d (at %d) overtook batch %d (at %d) by more than aging", x.ticket, x.enq, y.ticket, y.enq)
		}
	}
}

// toNextWake moves the clock to NextWake, checking that Wake changes
// nothing just before it and something at it.
func (h *harness) toNextWake() {
	t := h.t
	next, ok := h.b.NextWake(h.nowT())
	if ok != (len(h.queue) > 0) {
		t.Fatalf("NextWake ok=%v with %d waiters", ok, len(h.queue))
	}
	if !ok {
		return
	}
	n := next.UnixNano()
	if n < h.now {
		t.Fatalf("NextWake in the past")
	}
	if n > h.now {
		h.now = n - 1
		if gs := h.b.Wake(h.nowT(), nil); len(gs) != 0 {
			t.Fatalf("Wake before NextWake changed something: %+v", gs)
		}
		h.processGrants(nil)
		h.now = n
	}
	gs := h.b.Wake(h.nowT(), nil)
	if len(gs) == 0 {
		t.Fatalf("Wake at NextWake changed nothing")
	}
	h.processGrants(gs)
}

func (h *harness) cancelWait() {
	t := h.t
	var ticket uint64
	if len(h.queue) > 0 && rapid.Bool().Draw(t, "pick_waiter") {
		ticket = rapid.SampledFrom(h.queue).Draw(t, "waiter").ticket
	} else {
		ticket = rapid.Uint64Range(0, 1000).Draw(t, "random_ticket")
	}
	w := h.removeWaiter(ticket)
	if ok := h.b.CancelWait(h.nowT(), ticket); ok != (w != nil) {
		t.Fatalf("CancelWait(%d) = %v, model queued %v", ticket, ok, w != nil)
	}
	if w != nil {
		h.outcome[ticket]++
	}
}

// check compares the Budget's internals with the model after every step:
// window contents bucket by bucket (settle conserves tokens), slots in use.
func (h *harness) check() {
	t := h.t
	st := h.b.Status(h.nowT()) // brings the Budget to now
	h.expire()
	b := h.b
	checkInternals(t, b)
	if b.head != h.head() || b.last != h.now || int64(b.nb) != h.nb || b.width != h.width {
		t.Fatalf("geometry: head %d nb %d width %d, model %d %d %d", b.head, b.nb, b.width, h.head(), h.nb, h.width)
	}
	for k := h.head() - h.nb; k <= h.head(); k++ {
		var req, tok int64
		for _, a := range h.adms {
			if !a.cancelled && a.bucket == k {
				req += a.hits
				tok += a.charge
			}
		}
		for _, e := range h.extras {
			if e.bucket == k {
				tok += e.tok
			}
		}
		i := ringIndex(k, b.ring())
		if b.cnt[i] != req || b.cnt[b.ring()+i] != tok {
			t.Fatalf("bucket %d: requests %d tokens %d, model %d %d", k, b.cnt[i], b.cnt[b.ring()+i], req, tok)
		}
	}
	req, tok, slots := h.liveSums()
	if b.sumReq != req || b.sumTok != tok {
		t.Fatalf("sums %d %d, model %d %d", b.sumReq, b.sumTok, req, tok)
	}
	if int64(len(b.leases)) != slots {
		t.Fatalf("%d slots in use, model %d", len(b.leases), slots)
	}
	if h.lim.Concurrency > 0 && slots > h.lim.Concurrency {
		t.Fatalf("%d slots in use, limit %d", slots, h.lim.Concurrency)
	}
	if h.lim.Concurrency > 0 && st.Concurrency.Remaining != h.lim.Concurrency-slots {
		t.Fatalf("status %+v with %d slots in use", st.Concurrency, slots)
	}
	if b.Waiters() != len(h.queue) {
		t.Fatalf("%d waiters, model %d", b.Waiters(), len(h.queue))
	}
}

// finish lets every deadline pass and checks that every waiter got exactly
// one outcome and every slot came back.
func (h *harness) finish() {
	t := h.t
	h.now += 3*int64(h.lim.Window) + 3*int64(h.lim.LeaseTTL)
	h.processGrants(h.b.Wake(h.nowT(), nil))
	if len(h.queue) != 0 {
		t.Fatalf("%d waiters left after every deadline", len(h.queue))
	}
	for _, tk := range h.tickets {
		if h.outcome[tk] != 1 {
			t.Fatalf("ticket %d got %d outcomes", tk, h.outcome[tk])
		}
	}
	h.check()
	h.now += int64(h.lim.Window) + int64(h.lim.LeaseTTL) + h.width
	h.check()
	if !h.b.Idle(h.nowT()) {
		t.Fatalf("not idle long after the last operation: %+v", h.b.Status(h.nowT()))
	}
	for _, a := range h.adms {
		h.checkWindowInvariant(a.at)
	}
}

func (h *harness) actions() map[string]func() {
	return map[string]func(){
		"acquire":    h.acquire,
		"settle":     h.settle,
		"release":    h.release,
		"cancel":     h.cancel,
		"renew":      h.renew,
		"advance":    h.advance,
		"wake":       h.wake,
		"nextwake":   h.toNextWake,
		"cancelwait": h.cancelWait,
	}
}

// weighted action names: acquire and advance most often.
var actionNames = []string{
	"acquire", "acquire", "acquire", "acquire",
	"settle", "settle", "release", "cancel", "renew",
	"advance", "advance", "advance",
	"wake", "nextwake", "cancelwait",
}

func (h *harness) run(steps int) {
	acts := h.actions()
	for range steps {
		acts[rapid.SampledFrom(actionNames).Draw(h.t, "action")]()
		h.check()
	}
}

// TestPropertyWindowInvariant: with usage never above the reservation, in
// every interval of length Window the final charges of the admissions in
// it never exceed the token limit and their number the request limit; and
// every property checked by the harness (conservation, slots, queue order,
// exact RetryAfter, NextWake) holds.
func TestPropertyWindowInvariant(t *testing.T) {
	var repeats, several, cancelled int
	rapid.Check(t, func(t *rapid.T) {
		h := newHarness(t, false)
		h.run(rapid.IntRange(10, 250).Draw(t, "steps"))
		h.finish()
		repeats += h.repeats
		for _, a := range h.adms {
			if a.hits > 1 {
				several++
				if a.cancelled {
					cancelled++
				}
			}
		}
	})
	// The runs must have met what Hits and chosen ids change.
	if repeats == 0 || several == 0 || cancelled == 0 {
		t.Fatalf("%d repeats, %d admissions of several requests (%d cancelled): the runs missed a case", repeats, several, cancelled)
	}
}

// TestPropertyConservation: with debits (usage above the reservation) too,
// the window holds exactly the current charges of the admissions whose
// bucket is still counted, plus debits moved to a later bucket.
func TestPropertyConservation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := newHarness(t, true)
		h.run(rapid.IntRange(10, 250).Draw(t, "steps"))
		h.finish()
	})
}

// TestPropertySnapshotRoundTrip: a Budget restored from a snapshot behaves
// exactly like the original under the same subsequent operations.
func TestPropertySnapshotRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := newHarness(t, rapid.Bool().Draw(t, "debits"))
		h.run(rapid.IntRange(0, 60).Draw(t, "steps_before"))
		// Waiters are not part of a snapshot: answer them first.
		for _, g := range h.b.DrainWaiters(h.nowT(), nil) {
			if g.Decision.Allowed || h.removeWaiter(g.Ticket) == nil {
				t.Fatalf("drained %+v", g)
			}
		}
		if len(h.queue) != 0 || h.b.Waiters() != 0 {
			t.Fatalf("waiters left after DrainWaiters")
		}
		data, err := h.b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		c, err := RestoreBudget(data, h.lim, h.pol)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if again, _ := c.MarshalBinary(); string(again) != string(data) {
			t.Fatalf("snapshot of the restored budget differs:\n%x\n%x", data, again)
		}
		// Replay the same random operations on both, comparing every answer.
		pair := &twin{t: t, a: h.b, b: c, now: h.now, window: int64(h.lim.Window)}
		for range rapid.IntRange(0, 80).Draw(t, "steps_after") {
			pair.step()
		}
		da, _ := pair.a.MarshalBinary()
		db, _ := pair.b.MarshalBinary()
		if string(da) != string(db) {
			t.Fatalf("final snapshots differ")
		}
	})
}

// twin runs identical operations on two Budgets and compares the answers.
type twin struct {
	t      *rapid.T
	a, b   *Budget
	now    int64
	window int64
	ids    []uint64
}

func (p *twin) step() {
	t := p.t
	now := time.Unix(0, p.now)
	id := func() uint64 {
		if len(p.ids) > 0 && rapid.Bool().Draw(t, "known") {
			return rapid.SampledFrom(p.ids).Draw(t, "id")
		}
		return rapid.Uint64Range(0, 200).Draw(t, "id")
	}
	same := func(what string, x, y any) {
		if x != y {
			t.Fatalf("%s: original %+v, restored %+v", what, x, y)
		}
	}
	switch rapid.IntRange(0, 9).Draw(t, "op") {
	case 0, 1:
		r := Request{
			PromptTokens: rapid.Int64Range(0, 300).Draw(t, "prompt"),
			MaxTokens:    rapid.Int64Range(0, 300).Draw(t, "max_tokens"),
			Priority:     rapid.SampledFrom([]Priority{Interactive, Batch}).Draw(t, "priority"),
			Wait:         time.Duration(rapid.Int64Range(0, p.window).Draw(t, "wait")),
			Hits:         rapid.Int64Range(-1, 4).Draw(t, "hits"),
		}
		if rapid.Bool().Draw(t, "choose_lease") {
			r.Lease = id()
		}
		da, db := p.a.Acquire(now, r), p.b.Acquire(now, r)
		same("acquire", da, db)
		p.ids = append(p.ids, da.Lease, da.Ticket)
	case 2:
		i := id()
		u := Usage{PromptTokens: rapid.Int64Range(0, 300).Draw(t, "p"), CompletionTokens: rapid.Int64Range(0, 300).Draw(t, "c")}
		same("settle", p.a.Settle(now, i, u), p.b.Settle(now, i, u))
	case 3:
		i := id()
		same("release", p.a.Release(now, i), p.b.Release(now, i))
	case 4:
		i := id()
		same("cancel", p.a.Cancel(now, i), p.b.Cancel(now, i))
	case 5:
		i := id()
		ea, oka := p.a.Renew(now, i)
		eb, okb := p.b.Renew(now, i)
		same("renew", oka, okb)
		same("renew expiry", ea.UnixNano(), eb.UnixNano())
	case 6:
		ga, gb := p.a.Wake(now, nil), p.b.Wake(now, nil)
		same("wake grants", len(ga), len(gb))
		for i := range ga {
			same("grant", ga[i], gb[i])
		}
		na, oka := p.a.NextWake(now)
		nb, okb := p.b.NextWake(now)
		same("next wake", oka, okb)
		same("next wake time", na.UnixNano(), nb.UnixNano())
	case 7:
		i := id()
		same("cancel wait", p.a.CancelWait(now, i), p.b.CancelWait(now, i))
	default:
		p.now += rapid.Int64Range(0, p.window).Draw(t, "dt")
	}
	same("status", p.a.Status(now), p.b.Status(now))
	same("idle", p.a.Idle(now), p.b.Idle(now))
}

// TestPropertySetLimits changes the window length and bucket count at
// random between operations: re-bucketing must stay conservative, so every
// admission still respects the limits over the window in force when it is
// made, and the internals stay consistent.
func TestPropertySetLimits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pol := &Policy{Buckets: rapid.IntRange(1, 12).Draw(t, "buckets")}
		window := func() time.Duration {
			return time.Duration(rapid.Int64Range(1000, 20000).Draw(t, "window_ms")) * ms
		}
		lim := Limits{Requests: rapid.Int64Range(1, 6).Draw(t, "requests"),
			Tokens: rapid.Int64Range(50, 1000).Draw(t, "tokens"), Window: window(), LeaseTTL: time.Hour}
		now := t0.UnixNano()
		b := NewBudget(lim, pol, time.Unix(0, now))
		type adm struct {
			at, charge int64
			lease      uint64
			cancelled  bool
		}
		var adms []*adm
		// windows in force: from each time on (a growing window cannot
		// count what the shorter one already forgot, so an admission at s
		// binds one at t over the shortest window in force between them).
		type change struct{ at, window int64 }
		changes := []change{{math.MinInt64, int64(lim.Window)}}
		minWindow := func(s, t int64) int64 {
			w := int64(math.MaxInt64)
			for i, c := range changes {
				next := int64(math.MaxInt64)
				if i+1 < len(changes) {
					next = changes[i+1].at
				}
				if next > s && c.at <= t { // in force at some time in [s, t]
					w = min(w, c.window)
				}
			}
			return w
		}
		for range rapid.IntRange(10, 200).Draw(t, "steps") {
			tn := time.Unix(0, now)
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0, 1:
				reserve := rapid.Int64Range(1, 300).Draw(t, "reserve")
				d := b.Acquire(tn, Request{Reserve: reserve})
				if !d.Allowed {
					// A refusal names the limit in force that is reached.
					if d.Reason == Requests && d.Status.Requests.Limit == lim.Requests && d.Status.Requests.Remaining < 1 ||
						d.Reason == Tokens && d.Status.Tokens.Limit == lim.Tokens && d.Status.Tokens.Remaining < reserve {
						break
					}
					t.Fatalf("refused %d tokens with reason %v, status %+v (limits %d, %d)", reserve, d.Reason, d.Status, lim.Requests, lim.Tokens)
				}
				adms = append(adms, &adm{at: now, charge: d.Reserved, lease: d.Lease})
				var req, tok int64
				for _, a := range adms {
					if !a.cancelled && a.at > now-minWindow(a.at, now) {
						req++
						tok += a.charge
					}
				}
				if req > lim.Requests || tok > lim.Tokens {
					t.Fatalf("%d requests, %d tokens within the window (limits %d, %d)", req, tok, lim.Requests, lim.Tokens)
				}
			case 2:
				if len(adms) > 0 {
					a := rapid.SampledFrom(adms).Draw(t, "adm")
					if rapid.Bool().Draw(t, "cancel") {
						if b.Cancel(tn, a.lease) {
							a.cancelled = true
						}
					} else {
						actual := rapid.Int64Range(0, a.charge).Draw(t, "actual")
						if b.Settle(tn, a.lease, Usage{CompletionTokens: actual}) {
							a.charge = actual
						}
					}
				}
			case 3:
				pol.Buckets = rapid.IntRange(1, 12).Draw(t, "buckets")
				lim.Window = window()
				lim.Requests = rapid.Int64Range(1, 6).Draw(t, "new_requests")
				lim.Tokens = rapid.Int64Range(50, 1000).Draw(t, "new_tokens")
				b.SetLimits(lim)
				changes = append(changes, change{now, int64(lim.Window)})
			case 4:
				// Once every window has passed, the limits in force admit
				// exactly lim.Requests requests and refuse the next one.
				now += 2*20000*int64(ms) + 1 // longer than any window drawn
				tn = time.Unix(0, now)
				for i := range lim.Requests + 1 {
					d := b.Acquire(tn, Request{Reserve: 1})
					if i == lim.Requests {
						if d.Allowed || d.Reason != Requests {
							t.Fatalf("request %d admitted past the limit %d: %+v", i+1, lim.Requests, d)
						}
						break
					}
					if !d.Allowed {
						t.Fatalf("request %d of %d refused once every window passed: %+v", i+1, lim.Requests, d)
					}
					adms = append(adms, &adm{at: now, charge: d.Reserved, lease: d.Lease})
				}
			default:
				now += rapid.Int64Range(0, int64(lim.Window)).Draw(t, "dt")
			}
			b.Status(time.Unix(0, now))
			checkInternals(t, b)
		}
		// A snapshot under the final geometry restores under any other.
		data, _ := b.MarshalBinary()
		lim.Window = window()
		c, err := RestoreBudget(data, lim, &Policy{Buckets: rapid.IntRange(1, 12).Draw(t, "buckets")})
		if err != nil {
			t.Fatal(err)
		}
		checkInternals(t, c)
		if c.sumReq < b.sumReq && lim.Window >= b.lim.Window {
			t.Fatalf("a longer window lost requests: %d < %d", c.sumReq, b.sumReq)
		}
	})
}
