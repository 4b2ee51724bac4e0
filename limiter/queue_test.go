package limiter

import (
	"testing"
	"time"
)

func mustQueue(t *testing.T, b *Budget, now time.Time, r Request) uint64 {
	t.Helper()
	d := b.Acquire(now, r)
	if !d.Queued || d.Allowed || d.Ticket == 0 {
		t.Fatalf("not queued: %+v", d)
	}
	return d.Ticket
}

func wantNextWake(t *testing.T, b *Budget, now, want time.Time) {
	t.Helper()
	got, ok := b.NextWake(now)
	if !ok || !got.Equal(want) {
		t.Fatalf("NextWake(%v) = %v, %v; want %v", now.Sub(t0), got.Sub(t0), ok, want.Sub(t0))
	}
}

func wantGrants(t *testing.T, got []Grant, want ...Grant) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d grants %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Ticket != w.Ticket || g.Decision.Allowed != w.Decision.Allowed || g.Decision.Reason != w.Decision.Reason ||
			g.Decision.RetryAfter != w.Decision.RetryAfter || (w.Decision.Allowed && g.Decision.Lease == 0) {
			t.Fatalf("grant %d: got %+v, want %+v", i, g, w)
		}
	}
}

func allowed(ticket uint64) Grant { return Grant{Ticket: ticket, Decision: Decision{Allowed: true}} }

func refused(ticket uint64, d Dimension, retry time.Duration) Grant {
	return Grant{Ticket: ticket, Decision: Decision{Reason: d, RetryAfter: retry}}
}

func TestQueueWindowSlides(t *testing.T) {
	b := NewBudget(Limits{Requests: 1, Window: 10 * sec}, pol10, t0)
	b.Acquire(t0, Request{Reserve: 1})
	tk := mustQueue(t, b, at(sec), Request{Reserve: 1, Wait: 20 * sec})
	wantNextWake(t, b, at(sec), at(11*sec)) // t0's bucket leaves
	wantGrants(t, b.Wake(at(11*sec-1), nil))
	wantGrants(t, b.Wake(at(11*sec), nil), allowed(tk))
	if _, ok := b.NextWake(at(11 * sec)); ok {
		t.Fatal("NextWake with an empty queue")
	}
}

func TestQueueSlotReleased(t *testing.T) {
	b := NewBudget(Limits{Concurrency: 1, Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	a := b.Acquire(t0, Request{Reserve: 1})
	tk := mustQueue(t, b, at(sec), Request{Reserve: 1, Wait: 60 * sec})
	wantNextWake(t, b, at(sec), at(30*sec)) // a's slot expires before the deadline
	wantGrants(t, b.Wake(at(2*sec), nil))
	b.Settle(at(2*sec), a.Lease, Usage{})
	wantNextWake(t, b, at(2*sec), at(2*sec))
	g := b.Wake(at(2*sec), nil)
	wantGrants(t, g, allowed(tk))
	if st := g[0].Decision.Status.Concurrency; st.Remaining != 0 || st.Reset != 30*sec {
		t.Fatalf("grant status %+v", st)
	}
	// The slot expiring admits a waiter too.
	tk = mustQueue(t, b, at(3*sec), Request{Reserve: 1, Wait: 60 * sec})
	wantNextWake(t, b, at(3*sec), at(32*sec))
	wantGrants(t, b.Wake(at(32*sec), nil), allowed(tk))
}

func TestQueueTokensCredited(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Window: 10 * sec}, pol10, t0)
	a := b.Acquire(t0, Request{Reserve: 800})
	tk := mustQueue(t, b, at(sec), Request{Reserve: 500, Wait: 5 * sec})
	wantNextWake(t, b, at(sec), at(6*sec)) // the deadline comes before 11s
	b.Settle(at(2*sec), a.Lease, Usage{PromptTokens: 200, CompletionTokens: 100})
	wantGrants(t, b.Wake(at(2*sec), nil), allowed(tk))
	if st := b.Status(at(2 * sec)); st.Tokens.Remaining != 200 {
		t.Fatalf("tokens %+v", st.Tokens)
	}
}

func TestQueueDeadline(t *testing.T) {
	b := NewBudget(Limits{Requests: 1, Window: 10 * sec}, pol10, t0)
	b.Acquire(t0, Request{Reserve: 1})
	x := mustQueue(t, b, at(sec), Request{Reserve: 1, Wait: 5 * sec})
	y := mustQueue(t, b, at(2*sec), Request{Reserve: 1, Wait: 3 * sec, Priority: Batch})
	wantNextWake(t, b, at(2*sec), at(5*sec))
	// y (not the head) goes first. It could only follow x: x fits at 11s,
	// is charged to [11s,12s), which leaves at 22s.
	wantGrants(t, b.Wake(at(5*sec), nil), refused(y, Requests, 17*sec))
	wantNextWake(t, b, at(5*sec), at(6*sec))
	wantGrants(t, b.Wake(at(6*sec-1), nil))
	wantGrants(t, b.Wake(at(6*sec), nil), refused(x, Requests, 5*sec))
	if b.Waiters() != 0 {
		t.Fatal("waiters left")
	}
}

func TestQueueNoBarging(t *testing.T) {
	b := NewBudget(Limits{Requests: 1, Window: 10 * sec}, pol10, t0)
	b.Acquire(t0, Request{Reserve: 1})
	x := mustQueue(t, b, at(sec), Request{Reserve: 1, Wait: 20 * sec})
	// While x waits, a newcomer is refused with the head's dimension and
	// told it fits only after x: x fits at 11s, is charged to [11s,12s),
	// which leaves the window at 22s.
	d := b.Acquire(at(5*sec), Request{Reserve: 1})
	if d.Allowed || d.Reason != Requests || d.RetryAfter != 17*sec {
		t.Fatalf("newcomer: %+v", d)
	}
	// At 11s x fits, but nobody called Wake yet: a newcomer is still refused.
	d = b.Acquire(at(11*sec), Request{Reserve: 1})
	if d.Allowed || d.Reason != Requests || d.RetryAfter != 11*sec {
		t.Fatalf("newcomer: %+v", d)
	}
	wantGrants(t, b.Wake(at(11*sec), nil), allowed(x))
}

func TestQueueFull(t *testing.T) {
	b := NewBudget(Limits{Requests: 1, Tokens: 100, Window: 10 * sec}, pol10, t0) // QueueLen 2
	b.Acquire(t0, Request{Reserve: 10})
	mustQueue(t, b, t0, Request{Reserve: 10, Wait: time.Minute})
	mustQueue(t, b, t0, Request{Reserve: 10, Wait: time.Minute})
	d := b.Acquire(at(sec), Request{Reserve: 10, Wait: time.Minute})
	if d.Allowed || d.Queued || d.Reason != QueueFull || d.RetryAfter != 21*sec {
		t.Fatalf("third waiter: %+v", d)
	}
	d = b.Acquire(at(sec), Request{Reserve: 10})
	if d.Allowed || d.Queued || d.Reason != Requests || d.RetryAfter != 21*sec {
		t.Fatalf("no wait: %+v", d)
	}
	// A request that can never fit is refused, not queued.
	d = b.Acquire(at(sec), Request{Reserve: 101, Wait: time.Minute})
	if d.Queued || d.Reason != Tokens || d.RetryAfter != 10*sec {
		t.Fatalf("never fits: %+v", d)
	}
}

func TestQueueOrderAndAging(t *testing.T) {
	p := &Policy{Buckets: 10, QueueLen: 10, Aging: 5 * sec}
	b := NewBudget(Limits{Concurrency: 1, Window: 10 * sec, LeaseTTL: time.Hour}, p, t0)
	l := b.Acquire(t0, Request{Reserve: 1}).Lease
	b1 := mustQueue(t, b, at(0), Request{Reserve: 1, Priority: Batch, Wait: time.Hour})
	i1 := mustQueue(t, b, at(1*sec), Request{Reserve: 1, Wait: time.Hour})
	b2 := mustQueue(t, b, at(2*sec), Request{Reserve: 1, Priority: Batch, Wait: time.Hour})
	i2 := mustQueue(t, b, at(5*sec), Request{Reserve: 1, Wait: time.Hour}) // ties with b1: interactive first
	i3 := mustQueue(t, b, at(6*sec), Request{Reserve: 1, Wait: time.Hour}) // more than Aging after b1, not b2
	i4 := mustQueue(t, b, at(8*sec), Request{Reserve: 1, Wait: time.Hour}) // more than Aging after b2
	i5 := mustQueue(t, b, at(9*sec), Request{Reserve: 1, Wait: time.Hour})
	if !b.CancelWait(at(9*sec), i5) || b.CancelWait(at(9*sec), i5) {
		t.Fatal("CancelWait")
	}
	var order []uint64
	for range 6 {
		b.Settle(at(10*sec), l, Usage{})
		g := b.Wake(at(10*sec), nil)
		if len(g) != 1 || !g[0].Decision.Allowed {
			t.Fatalf("grants %+v", g)
		}
		order = append(order, g[0].Ticket)
		l = g[0].Decision.Lease
	}
	want := []uint64{i1, i2, b1, i3, b2, i4}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}

func TestQueueHeadOfLine(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Window: 10 * sec}, &Policy{Buckets: 10, QueueLen: 10}, t0)
	b.Acquire(t0, Request{Reserve: 600})
	big := mustQueue(t, b, at(sec), Request{Reserve: 900, Wait: time.Minute})
	small := mustQueue(t, b, at(sec), Request{Reserve: 100, Wait: time.Minute})
	// small would fit, but big is the head.
	wantGrants(t, b.Wake(at(2*sec), nil))
	wantNextWake(t, b, at(2*sec), at(11*sec))
	g := b.Wake(at(11*sec), nil)
	wantGrants(t, g, allowed(big), allowed(small))
	// Lowering the token limit below a waiter's reservation refuses it at
	// the head instead of blocking the queue until its deadline.
	b2 := NewBudget(Limits{Tokens: 1000, Window: 10 * sec}, &Policy{Buckets: 10, QueueLen: 10}, t0)
	b2.Acquire(t0, Request{Reserve: 600})
	big = mustQueue(t, b2, at(sec), Request{Reserve: 900, Wait: time.Minute})
	small = mustQueue(t, b2, at(sec), Request{Reserve: 100, Wait: time.Minute})
	b2.SetLimits(Limits{Tokens: 800, Window: 10 * sec})
	wantNextWake(t, b2, at(2*sec), at(2*sec))
	wantGrants(t, b2.Wake(at(2*sec), nil), refused(big, Tokens, 10*sec), allowed(small))
}

func TestDrainWaiters(t *testing.T) {
	b := NewBudget(Limits{Requests: 1, Window: 10 * sec}, pol10, t0)
	b.Acquire(t0, Request{Reserve: 1})
	x := mustQueue(t, b, at(sec), Request{Reserve: 1, Wait: time.Minute})
	y := mustQueue(t, b, at(sec), Request{Reserve: 1, Wait: time.Minute})
	wantGrants(t, b.DrainWaiters(at(sec), nil), refused(x, Requests, 10*sec), refused(y, Requests, 10*sec))
	if b.Waiters() != 0 || b.CancelWait(at(sec), x) {
		t.Fatal("waiters left")
	}
}

func TestCancelWaitUnblocksQueue(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Window: 10 * sec}, &Policy{Buckets: 10, QueueLen: 10}, t0)
	b.Acquire(t0, Request{Reserve: 600})
	big := mustQueue(t, b, at(sec), Request{Reserve: 900, Wait: time.Minute})
	small := mustQueue(t, b, at(sec), Request{Reserve: 100, Wait: time.Minute})
	wantNextWake(t, b, at(sec), at(11*sec))
	if !b.CancelWait(at(2*sec), big) {
		t.Fatal("CancelWait")
	}
	wantNextWake(t, b, at(2*sec), at(2*sec))
	wantGrants(t, b.Wake(at(2*sec), nil), allowed(small))
	if b.q != nil {
		t.Fatal("empty queue kept")
	}
	// A waiter whose Wait overflows the clock waits "forever".
	x := mustQueue(t, b, at(3*sec), Request{Reserve: 500, Wait: 1<<63 - 1})
	wantNextWake(t, b, at(3*sec), at(11*sec))
	wantGrants(t, b.Wake(at(11*sec), nil), allowed(x))
}
