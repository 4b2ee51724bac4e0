package limiter

import (
	"math"
	"slices"
	"time"
)

// waiter is a queued request.
type waiter struct {
	ticket   uint64
	tok      int64     // T_est, fixed when it was queued
	hits     int64     // requests it counts (Request.Hits, ≥ 1)
	lease    uint64    // the lease id it asked for (Request.Lease); 0: drawn
	enq      int64     // unix ns when it was queued
	deadline int64     // unix ns; refused at and after this time
	dim      Dimension // what blocked it when it was queued; never None
	cost     int64     // picodollars it reserves of a spend limit, fixed when it was queued
	price    Price     // Request.Price
	flow     string    // Request.Flow, of a fair key; "" otherwise
	weight   int64     // Request.Weight
	tag      float64   // its place in its class: arrival order, or its fair queuing tag (fair.go)
}

// need is what admitting w takes.
func (w *waiter) need() need {
	n := admission(w.hits, w.tok)
	n.cost = w.cost
	return n
}

// repeats reports whether w names the id of a live lease: it is answered
// with that lease (Budget.repeat) when it leaves the queue, as its Acquire
// would have been, charging nothing.
func (b *Budget) repeats(w *waiter) (lease, bool) {
	if w.lease == 0 {
		return lease{}, false
	}
	l, ok := b.leases[w.lease]
	return l, ok
}

// fifo is one priority class: waiters in the order of their tags (their
// arrival, or their fair queuing tags at a fair key; arrival among equal
// tags), w[h:] live.
type fifo struct {
	w []waiter
	h int
}

func (f *fifo) len() int { return len(f.w) - f.h }

func (f *fifo) front() *waiter {
	if f.h == len(f.w) {
		return nil
	}
	return &f.w[f.h]
}

func (f *fifo) push(w waiter) {
	if f.h > 0 && len(f.w) == cap(f.w) {
		// Reuse the space of popped waiters before growing.
		n := copy(f.w, f.w[f.h:])
		f.w, f.h = f.w[:n], 0
	}
	i := len(f.w)
	for i > f.h && f.w[i-1].tag > w.tag { // a fair tag below the last: its place
		i--
	}
	f.w = slices.Insert(f.w, i, w)
}

func (f *fifo) pop() {
	f.w[f.h] = waiter{}
	f.h++
	if f.h == len(f.w) {
		f.w, f.h = f.w[:0], 0
	}
}

// take removes the live waiter at index i of f.w: pop for the front.
func (f *fifo) take(i int) {
	if i == f.h {
		f.pop()
		return
	}
	f.remove(i)
}

// remove deletes the live waiter at index i of f.w, keeping the order.
func (f *fifo) remove(i int) {
	copy(f.w[i:], f.w[i+1:])
	f.w[len(f.w)-1] = waiter{}
	f.w = f.w[:len(f.w)-1]
	if f.h == len(f.w) {
		f.w, f.h = f.w[:0], 0
	}
}

// waitQueue holds a key's waiters in two FIFOs, interactive and batch. The
// head is the front with the smaller effective time, where a batch waiter's
// effective time is its arrival plus Policy.Aging (interactive wins a tie):
// interactive goes first, FIFO within a class, and a batch waiter is never
// overtaken by an interactive one that arrived more than Aging after it.
// Choosing the head is O(1).
type waitQueue struct {
	cls     [2]fifo // by Priority: Interactive, Batch
	minDL   int64   // ≤ every waiter's deadline
	dlStale bool    // minDL may be below the true minimum
}

// len is the number of waiters; a nil queue is empty.
func (q *waitQueue) len() int {
	if q == nil {
		return 0
	}
	return q.cls[0].len() + q.cls[1].len()
}

// head returns the waiter to admit next and its class; q must not be empty.
func (q *waitQueue) head(aging int64) (int, *waiter) {
	i, b := q.cls[Interactive].front(), q.cls[Batch].front()
	switch {
	case i == nil:
		return int(Batch), b
	case b == nil:
		return int(Interactive), i
	case b.enq+aging < i.enq:
		return int(Batch), b
	}
	return int(Interactive), i
}

// minDeadline is the earliest deadline of a waiter; q must not be empty.
func (q *waitQueue) minDeadline() int64 {
	if q.dlStale {
		q.minDL = math.MaxInt64
		for c := range q.cls {
			f := &q.cls[c]
			for i := f.h; i < len(f.w); i++ {
				q.minDL = min(q.minDL, f.w[i].deadline)
			}
		}
		q.dlStale = false
	}
	return q.minDL
}

// removed notes that a waiter with deadline dl left the queue.
func (q *waitQueue) removed(dl int64) {
	if dl <= q.minDL {
		q.dlStale = true
	}
}

// enqueue queues r (needing n, blocked by dim) at t.
func (b *Budget) enqueue(t int64, r Request, n need, dim Dimension) Decision {
	if b.q == nil {
		b.q = new(waitQueue)
	}
	c := Batch
	if r.Priority == Interactive {
		c = Interactive
	}
	dl := t + int64(r.Wait)
	if dl < t { // overflow: wait "forever"
		dl = math.MaxInt64
	}
	if b.q.len() == 0 {
		b.q.minDL, b.q.dlStale = dl, false
	} else {
		b.q.minDL = min(b.q.minDL, dl)
	}
	b.seq++
	b.q.cls[c].push(waiter{ticket: b.seq, tok: n.tok, hits: n.req, lease: r.Lease, enq: t, deadline: dl, dim: dim, cost: n.cost, price: r.Price,
		flow: r.Flow, weight: r.Weight, tag: b.queueTag(t, r, n)})
	return Decision{Queued: true, Ticket: b.seq, Status: b.status(t)}
}

// behindQueue answers a request needing n that cannot be admitted before the
// queue head: Reason is the blocking dimension of the head, and the wait is
// the time until the request fits after the head has been admitted as soon
// as it fits, if nothing else happens. No queued request can be admitted
// sooner, so retrying earlier is pointless.
func (b *Budget) behindQueue(t int64, n need) (Dimension, int64) {
	_, h := b.q.head(b.pol.aging())
	hn := h.need()
	if d := b.neverFits(hn); d != None {
		// The head will be refused at the next Wake; it delays nobody.
		own, _ := b.fitAfter(t, n)
		return d, own
	}
	if _, ok := b.repeats(h); ok {
		// The head will be answered with its lease at the next Wake,
		// taking nothing; it delays nobody either.
		own, _ := b.fitAfter(t, n)
		if d := b.blocking(n); d != None {
			return d, own
		}
		return h.dim, own
	}
	hw, _ := b.fitAfter(t, hn)
	wait := b.fitBehind(t, hn, hw, n)
	reason := b.blocking(hn)
	if reason == None {
		// The head fits already and only waits for a Wake.
		if reason = b.blocking(hn.plus(n)); reason == None {
			reason = h.dim
		}
	}
	if reason == None { // not reached: every waiter's dim is set
		reason = Requests
	}
	return reason, wait
}

// answer is the refusal of queued waiter w at t: its own blocking dimension
// and fit time if it is the head (or can never fit), else as behind the head.
// A waiter that names a live lease's id is answered with that lease instead.
func (b *Budget) answer(t int64, w *waiter, isHead bool) Decision {
	if l, ok := b.repeats(w); ok {
		return b.repeat(t, w.lease, l)
	}
	n := w.need()
	if d := b.neverFits(n); d != None {
		return b.refuse(t, d, int64(b.lim.Window))
	}
	if isHead {
		d := b.blocking(n)
		if d == None {
			d = w.dim // it fits; only a Wake was missing
		}
		wait, _ := b.fitAfter(t, n)
		return b.refuse(t, d, wait)
	}
	d, wait := b.behindQueue(t, n)
	return b.refuse(t, d, wait)
}

// Wake brings the key to now and hands out what changed for waiters,
// appending one Grant per waiter that left the queue to dst and returning
// it. Expired slots are freed; then, in queue order, the head is admitted
// if it fits, or refused if its deadline has come (or if it can never fit,
// after SetLimits lowered a limit), until the head neither fits nor has
// expired (head-of-line: a later waiter is never admitted while the head
// does not fit); then every other waiter whose deadline has come is
// refused. A refusal carries the dimension that blocks the waiter and an
// honest RetryAfter, as for Acquire. A waiter that named a lease id
// (Request.Lease) a live lease holds when it leaves the queue (an earlier
// waiter with the same id was admitted) is answered as its Acquire would
// have been then: Allowed with that lease, charging nothing; as the head,
// it leaves at once. At a fair key (Limits.Fair) the head is the first
// waiter in queue order whose flow is within its share; the others wait on
// (fair.go).
//
// Call Wake at the time NextWake names and after anything that frees
// capacity. It is cheap when nothing is queued.
func (b *Budget) Wake(now time.Time, dst []Grant) []Grant {
	t := now.UnixNano()
	b.tick(t)
	if b.q.len() == 0 {
		return dst
	}
	for b.q.len() > 0 {
		c, i := b.nextWaiter(t)
		if i < 0 {
			break // a fair key's waiters all past their flows' shares
		}
		w := &b.q.cls[c].w[i]
		g := Grant{Ticket: w.ticket}
		n := w.need()
		never := b.neverFits(n) != None
		_, again := b.repeats(w)
		switch {
		case !again && !never && b.blocking(n) == None:
			b.unqueuedFlow(w, true)
			g.Decision = b.admit(t, n, w.lease, w.price, b.flowOf(t, &Request{Flow: w.flow, Weight: w.weight}))
		case again || never || t >= w.deadline:
			g.Decision = b.answer(t, w, true)
			b.unqueuedFlow(w, false)
		default:
			return b.expireWaiters(t, dst)
		}
		b.q.removed(w.deadline)
		b.q.cls[c].take(i)
		dst = append(dst, g)
	}
	if b.q.len() == 0 {
		b.q = nil // empty: give its memory back
		return dst
	}
	return b.expireWaiters(t, dst)
}

// nextWaiter is the class and index of the waiter Wake takes next: the
// queue's head, or at a fair key fairHead's; -1 if none may go.
func (b *Budget) nextWaiter(t int64) (int, int) {
	if b.fr != nil {
		return b.fairHead(t)
	}
	c, _ := b.q.head(b.pol.aging())
	return c, b.q.cls[c].h
}

// expireWaiters refuses every waiter whose deadline is at or before t. The
// head must not be one of them.
func (b *Budget) expireWaiters(t int64, dst []Grant) []Grant {
	if t < b.q.minDeadline() {
		return dst
	}
	for c := range b.q.cls {
		f := &b.q.cls[c]
		for i := f.h; i < len(f.w); {
			w := &f.w[i]
			if w.deadline > t {
				i++
				continue
			}
			dst = append(dst, Grant{Ticket: w.ticket, Decision: b.answer(t, w, false)})
			b.unqueuedFlow(w, false)
			b.q.removed(w.deadline)
			f.remove(i)
		}
	}
	return dst
}

// NextWake returns the earliest time at or after now at which Wake could
// change something for a waiter if nothing else happens: a waiter's deadline,
// or the time the queue head fits as the window slides or slots expire
// (now if it fits already). It returns false when nothing is queued. A
// Settle, Release or Cancel can make the head fit earlier: call Wake after
// those too.
func (b *Budget) NextWake(now time.Time) (time.Time, bool) {
	if b.q.len() == 0 {
		return time.Time{}, false
	}
	t := now.UnixNano()
	b.tick(t)
	next := b.q.minDeadline()
	_, h := b.q.head(b.pol.aging())
	if _, again := b.repeats(h); again || b.neverFits(h.need()) != None {
		next = t
	} else if wait, _ := b.fitAfter(t, h.need()); t+wait < next {
		next = t + wait
	}
	if next <= t {
		return now, true
	}
	return now.Add(time.Duration(next - t)), true
}

// CancelWait removes the waiter holding ticket (its caller gave up) and
// reports whether it was queued. No Grant is produced for it. Call Wake
// afterwards: the waiters behind it may fit now.
func (b *Budget) CancelWait(now time.Time, ticket uint64) bool {
	if b.q.len() == 0 {
		return false
	}
	for c := range b.q.cls {
		f := &b.q.cls[c]
		for i := f.h; i < len(f.w); i++ {
			if f.w[i].ticket == ticket {
				b.unqueuedFlow(&f.w[i], false)
				b.q.removed(f.w[i].deadline)
				f.remove(i)
				if b.q.len() == 0 {
					b.q = nil
				}
				return true
			}
		}
	}
	return false
}

// Waiters returns the number of queued waiters.
func (b *Budget) Waiters() int { return b.q.len() }

// DrainWaiters refuses every queued waiter at now, in queue order, as if its
// deadline had come (a waiter naming a live lease gets that lease, as from
// Wake), appending the Grants to dst. Use it before Table.Take
// hands the key to another node: waiters are connections at this node and
// are not part of a snapshot.
func (b *Budget) DrainWaiters(now time.Time, dst []Grant) []Grant {
	t := now.UnixNano()
	b.tick(t)
	aging := b.pol.aging()
	for b.q.len() > 0 {
		c, w := b.q.head(aging)
		g := Grant{Ticket: w.ticket, Decision: b.answer(t, w, true)}
		b.q.removed(w.deadline)
		b.q.cls[c].pop()
		dst = append(dst, g)
	}
	b.q = nil
	return dst
}
