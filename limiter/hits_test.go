package limiter

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// Request.Hits and Request.Lease: an admission counting several requests,
// and a lease id the caller chooses (Envoy's hits_addend, and a lease named
// by the request-time and stream-done calls alike).

// An admission of N hits is checked and charged N in the request window:
// N fit exactly at the limit, one more does not, and RetryAfter is the
// exact time until N fit.
func TestHitsAtTheLimit(t *testing.T) {
	b := NewBudget(Limits{Requests: 10, Window: 10 * sec}, pol10, t0)
	hits := func(n int64) Request { return Request{Reserve: 1, Hits: n} }
	runSteps(t, b, []step{
		{0, hits(4), true, None, 0},                  // bucket [t0, t0+1s): 4, leaves at 11s
		{2 * sec, hits(3), true, None, 0},            // [t0+2s, t0+3s): 3, leaves at 13s
		{5 * sec, hits(4), false, Requests, 6 * sec}, // 3 left: the first 4 must go
		{5 * sec, hits(3), true, None, 0},            // exactly the limit; [t0+5s…): 3, leaves at 16s
		{5 * sec, hits(1), false, Requests, 6 * sec},
		{5 * sec, hits(0), false, Requests, 6 * sec},  // 0 counts 1
		{5 * sec, hits(-7), false, Requests, 6 * sec}, // as does a negative
		{5 * sec, hits(5), false, Requests, 8 * sec},  // 4 free at 11s, 7 at 13s
		{5 * sec, hits(10), false, Requests, 11 * sec},
		{5 * sec, hits(11), false, Requests, 10 * sec}, // more than the limit: never fits, Window
		{11*sec - 1, hits(4), false, Requests, 1},
		{11 * sec, hits(4), true, None, 0},
	})
	if st := b.Status(at(11 * sec)); st.Requests.Remaining != 0 {
		t.Fatalf("status %+v after 10 of 10", st.Requests)
	}
	// With limits on every dimension, the lease still takes one slot and
	// reserves its tokens once.
	c := NewBudget(Limits{Requests: 10, Tokens: 100, Concurrency: 2, Window: 10 * sec}, pol10, t0)
	d := c.Acquire(t0, Request{Reserve: 30, Hits: 6})
	if !d.Allowed || d.Reserved != 30 || d.Status.Requests.Remaining != 4 || d.Status.Tokens.Remaining != 70 || d.Status.Concurrency.Remaining != 1 {
		t.Fatalf("6 hits: %+v", d)
	}
	// A request that exceeds the request limit on its own is refused with
	// Requests even when its tokens never fit either.
	if d := c.Acquire(t0, Request{Reserve: 101, Hits: 11}); d.Allowed || d.Reason != Requests || d.RetryAfter != 10*sec {
		t.Fatalf("11 hits and 101 tokens: %+v", d)
	}
	if d := c.Acquire(t0, Request{Reserve: 101, Hits: 10}); d.Allowed || d.Reason != Tokens || d.RetryAfter != 10*sec {
		t.Fatalf("10 hits and 101 tokens: %+v", d)
	}
	// Without a request limit any number is admitted (capped at 2^48).
	u := NewBudget(Limits{Window: 10 * sec}, pol10, t0)
	if d := u.Acquire(t0, Request{Reserve: 1, Hits: 1 << 62}); !d.Allowed || u.sumReq != maxUnits {
		t.Fatalf("unlimited: %+v, %d counted", d, u.sumReq)
	}
	checkInternals(t, u)
}

// Cancel gives back every request an admission counted; Settle, Release
// and an expired slot give back none, and forget the lease's hits.
func TestHitsCancel(t *testing.T) {
	b := NewBudget(Limits{Requests: 10, Concurrency: 5, Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	d := b.Acquire(t0, Request{Reserve: 1, Hits: 7})
	one := b.Acquire(t0, Request{Reserve: 1})
	if !b.Cancel(at(sec), d.Lease) {
		t.Fatal("cancel")
	}
	if st := b.Status(at(sec)); st.Requests.Remaining != 9 || st.Concurrency.Remaining != 4 {
		t.Fatalf("after cancelling 7 hits: %+v", st)
	}
	if b.Cancel(at(sec), d.Lease) {
		t.Fatal("cancelled twice")
	}
	if b.Cancel(at(sec), one.Lease); b.sumReq != 0 {
		t.Fatalf("%d requests left", b.sumReq)
	}
	for i, end := range []func(id uint64){
		func(id uint64) { b.Settle(at(2*sec), id, Usage{CompletionTokens: 1}) },
		func(id uint64) { b.Release(at(2*sec), id) },
		func(uint64) { b.Status(at(40 * sec)) },
	} {
		b = NewBudget(Limits{Requests: 10, Window: time.Hour, LeaseTTL: 30 * sec}, pol10, t0)
		d := b.Acquire(t0, Request{Reserve: 1, Hits: 3})
		end(d.Lease)
		if b.sumReq != 3 || len(b.leases) != 0 || len(b.hits) != 0 {
			t.Fatalf("end %d: %d requests, %d leases, hits %v", i, b.sumReq, len(b.leases), b.hits)
		}
		checkInternals(t, b)
	}
}

// A waiter counts its hits: it is admitted once N fit, and is refused at
// once when N can never fit after the limit was lowered.
func TestHitsWaiter(t *testing.T) {
	b := NewBudget(Limits{Requests: 5, Window: 10 * sec}, pol10, t0)
	b.Acquire(t0, Request{Reserve: 1, Hits: 3})
	b.Acquire(at(2*sec), Request{Reserve: 1, Hits: 2})
	q := b.Acquire(at(3*sec), Request{Reserve: 1, Hits: 4, Wait: time.Minute})
	if !q.Queued {
		t.Fatalf("not queued: %+v", q)
	}
	// 3 free at 11s is not enough: 4 need the second bucket to leave, at 13s.
	if next, _ := b.NextWake(at(3 * sec)); !next.Equal(at(13 * sec)) {
		t.Fatalf("next wake %v", next.Sub(t0))
	}
	if gs := b.Wake(at(11*sec), nil); len(gs) != 0 {
		t.Fatalf("admitted with 3 of 4 free: %+v", gs)
	}
	gs := b.Wake(at(13*sec), nil)
	if len(gs) != 1 || !gs[0].Decision.Allowed || gs[0].Decision.Status.Requests.Remaining != 1 {
		t.Fatalf("grants %+v", gs)
	}
	q = b.Acquire(at(13*sec), Request{Reserve: 1, Hits: 5, Wait: time.Minute})
	b.SetLimits(Limits{Requests: 4, Window: 10 * sec})
	gs = b.Wake(at(13*sec), nil)
	if len(gs) != 1 || gs[0].Ticket != q.Ticket || gs[0].Decision.Reason != Requests || gs[0].Decision.RetryAfter != 10*sec {
		t.Fatalf("never-fitting waiter: %+v", gs)
	}
}

// A chosen lease id: the admission takes it; a second Acquire naming it
// while the lease lives admits nothing and answers that lease; once it is
// settled the id is free again. Settle, Renew and Cancel find it by that id.
func TestChosenLeaseID(t *testing.T) {
	const id = 0x9e3779b97f4a7c15
	b := NewBudget(Limits{Requests: 10, Tokens: 1000, Concurrency: 3, Window: 10 * sec}, pol10, t0)
	r := Request{Reserve: 100, Hits: 2, Lease: id}
	d := b.Acquire(t0, r)
	if !d.Allowed || d.Lease != id || d.Reserved != 100 {
		t.Fatalf("first: %+v", d)
	}
	// The repeat charges nothing, whatever it asks, even refused or queued
	// as a new request would be.
	for _, again := range []Request{r, {Reserve: 5000, Hits: 50, Lease: id}, {Reserve: 1, Lease: id, Wait: sec}} {
		e := b.Acquire(at(sec), again)
		if !e.Allowed || e.Lease != id || e.Reserved != 100 || e.Status != b.Status(at(sec)) {
			t.Fatalf("repeat %+v: %+v", again, e)
		}
		if st := e.Status; st.Requests.Remaining != 8 || st.Tokens.Remaining != 900 || st.Concurrency.Remaining != 2 {
			t.Fatalf("repeat charged: %+v", st)
		}
	}
	if exp, ok := b.Renew(at(2*sec), id); !ok || !exp.Equal(at(2*sec+DefaultLeaseTTL)) {
		t.Fatalf("renew by the chosen id: %v %v", exp, ok)
	}
	if !b.Settle(at(3*sec), id, Usage{PromptTokens: 40}) || b.Settle(at(3*sec), id, Usage{}) {
		t.Fatal("settle by the chosen id, once")
	}
	// Free again: a new admission, charged again.
	if e := b.Acquire(at(3*sec), r); !e.Allowed || e.Lease != id || e.Status.Requests.Remaining != 6 || e.Status.Tokens.Remaining != 860 {
		t.Fatalf("after the settle: %+v", e)
	}
	if !b.Cancel(at(3*sec), id) {
		t.Fatal("cancel by the chosen id")
	}
	if st := b.Status(at(3 * sec)); st.Requests.Remaining != 8 || st.Tokens.Remaining != 960 || st.Concurrency.Remaining != 3 {
		t.Fatalf("after the cancel: %+v", st)
	}
}

// Drawn ids skip a live chosen one, with counted ids and with Policy.IDs;
// an id chosen equal to a live drawn one is taken for a repeat of it.
func TestChosenLeaseIDCollisions(t *testing.T) {
	b := NewBudget(Limits{}, pol10, t0)
	if d := b.Acquire(t0, Request{Reserve: 1, Lease: 2}); d.Lease != 2 {
		t.Fatalf("chosen 2: %+v", d)
	}
	if d1, d2 := b.Acquire(t0, Request{Reserve: 1}), b.Acquire(t0, Request{Reserve: 1}); d1.Lease != 1 || d2.Lease != 3 {
		t.Fatalf("counted ids %d %d, want 1 3 (2 is live)", d1.Lease, d2.Lease)
	}
	if data, _ := b.MarshalBinary(); data[0] != snapshotV1 {
		t.Fatalf("chosen ids within the sequence: format %d, want 1", data[0])
	}
	if d := b.Acquire(t0, Request{Reserve: 7, Lease: 3}); !d.Allowed || d.Lease != 3 || d.Reserved != 1 || len(b.leases) != 3 {
		t.Fatalf("chosen id of a live drawn lease: %+v, %d leases", d, len(b.leases))
	}
	const c = 0xdeadbeefcafef00d
	r := NewBudget(Limits{}, &Policy{Buckets: 10, IDs: fixedIDs(c, 5)}, t0)
	r.Acquire(t0, Request{Reserve: 1, Lease: c})
	if d := r.Acquire(t0, Request{Reserve: 1}); d.Lease != 5 {
		t.Fatalf("drawn id %#x, want 5 (%#x is live)", d.Lease, uint64(c))
	}
}

// Waiters naming one lease id: the first admitted takes it, the next is
// answered with that lease when it leaves the queue, charging nothing.
func TestChosenLeaseIDWaiters(t *testing.T) {
	const id = 77
	b := NewBudget(Limits{Concurrency: 1, Window: 10 * sec}, pol10, t0)
	blocker := b.Acquire(t0, Request{Reserve: 1})
	r := Request{Reserve: 10, Lease: id, Wait: time.Minute}
	w1, w2 := b.Acquire(t0, r), b.Acquire(t0, r)
	if !w1.Queued || !w2.Queued {
		t.Fatalf("not queued: %+v %+v", w1, w2)
	}
	b.Release(at(sec), blocker.Lease)
	gs := b.Wake(at(sec), nil)
	if len(gs) != 2 || gs[0].Ticket != w1.Ticket || gs[1].Ticket != w2.Ticket {
		t.Fatalf("grants %+v", gs)
	}
	for _, g := range gs {
		if d := g.Decision; !d.Allowed || d.Lease != id || d.Reserved != 10 {
			t.Fatalf("grant %+v", g)
		}
	}
	if len(b.leases) != 1 || b.sumReq != 2 || b.sumTok != 11 {
		t.Fatalf("%d leases, %d requests, %d tokens: the repeat was charged", len(b.leases), b.sumReq, b.sumTok)
	}

	// A waiter between them: the second becomes the head, a repeat, when
	// the one before it gives up; NextWake says now, and the head delays
	// nobody.
	b = NewBudget(Limits{Concurrency: 1, Window: 10 * sec, LeaseTTL: 30 * sec}, &Policy{Buckets: 10, QueueLen: 3}, t0)
	blocker = b.Acquire(t0, Request{Reserve: 1})
	w1 = b.Acquire(t0, r)
	mid := b.Acquire(t0, Request{Reserve: 1, Wait: time.Minute})
	if w2 = b.Acquire(t0, r); !mid.Queued || !w2.Queued {
		t.Fatalf("not queued: %+v %+v", mid, w2)
	}
	b.Release(at(sec), blocker.Lease)
	if gs := b.Wake(at(sec), nil); len(gs) != 1 || gs[0].Ticket != w1.Ticket || !gs[0].Decision.Allowed {
		t.Fatalf("grants %+v", gs)
	}
	b.CancelWait(at(2*sec), mid.Ticket)
	if next, ok := b.NextWake(at(2 * sec)); !ok || !next.Equal(at(2*sec)) {
		t.Fatalf("next wake %v %v, want now: the head names a live lease", next.Sub(t0), ok)
	}
	// Refused for the slot alone (W1's expires at 31s), not after the head.
	if d := b.Acquire(at(2*sec), Request{Reserve: 1}); d.Reason != Concurrency || d.RetryAfter != 29*sec {
		t.Fatalf("behind a repeat: %+v", d)
	}
	if gs := b.Wake(at(2*sec), nil); len(gs) != 1 || gs[0].Ticket != w2.Ticket || gs[0].Decision.Lease != id || !gs[0].Decision.Allowed {
		t.Fatalf("grants %+v", gs)
	}
}

// Snapshots: format 3 exactly when a lease counts more than one request,
// carrying its hits (a restored Cancel removes them all); formats 1 and 2
// as before otherwise, chosen ids included.
func TestSnapshotHits(t *testing.T) {
	b := NewBudget(snapLimits, pol10, t0)
	d := b.Acquire(t0, Request{Reserve: 100, Hits: 3})
	b.Acquire(t0, Request{Reserve: 50, Lease: 1 << 40})
	data, _ := b.MarshalBinary()
	if data[0] != snapshotV3 {
		t.Fatalf("format %d, want 3", data[0])
	}
	c, err := RestoreBudget(data, snapLimits, pol10)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := c.MarshalBinary(); !bytes.Equal(again, data) {
		t.Fatalf("round trip:\n%x\n%x", data, again)
	}
	if err := CheckSnapshot(data, snapLimits, t0, 0); err != nil {
		t.Fatal(err)
	}
	if !c.Cancel(at(sec), d.Lease) || c.sumReq != 1 {
		t.Fatalf("restored cancel left %d requests, want 1", c.sumReq)
	}
	// With no lease of several requests left, back to format 2 (the
	// chosen id is beyond the sequence)...
	if data, _ := c.MarshalBinary(); data[0] != snapshotV2 {
		t.Fatalf("format %d, want 2", data[0])
	}
	// ...and to format 1 once that lease is gone too.
	c.Settle(at(sec), 1<<40, Usage{})
	if data, _ := c.MarshalBinary(); data[0] != snapshotV1 {
		t.Fatalf("format %d, want 1", data[0])
	}
	// The layout: a one-bucket budget's lease of 3 hits ends with 3.
	one := NewBudget(Limits{Window: 2 * sec}, &Policy{Buckets: 1}, time.Unix(0, 0))
	one.Acquire(time.Unix(0, 0), Request{Reserve: 5, Hits: 3})
	v3, _ := one.MarshalBinary()
	// 3, width(2s), N=1, head=0, offset 0, [0 0] [3 5], no average, seq 1,
	// 1 lease: id 1, age 1, reserved 5, expiry 120 s, hits 3.
	want := []byte{3, 0x80, 0xd0, 0xac, 0xf3, 0x0e, 1, 0, 0, 0, 0, 3, 5, 0, 1, 1, 1, 1, 5}
	if !bytes.HasPrefix(v3, want) || v3[len(v3)-1] != 3 {
		t.Fatalf("layout: %x", v3)
	}
	bad := map[string][]byte{
		"zero hits":      append(bytes.Clone(v3[:len(v3)-1]), 0),
		"hits above cap": append(bytes.Clone(v3[:len(v3)-1]), 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01),
		"no hits":        v3[:len(v3)-1],
		"version 4":      append([]byte{4}, v3[1:]...),
		"v2 with hits":   append([]byte{2}, v3[1:]...),
	}
	for name, data := range bad {
		if _, err := RestoreBudget(data, snapLimits, nil); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
		if err := CheckSnapshot(data, snapLimits, t0, time.Hour); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("CheckSnapshot, %s: %v", name, err)
		}
	}
	// Hits 1 in format 3 is a plain lease.
	ones := append(bytes.Clone(v3[:len(v3)-1]), 1)
	if r, err := RestoreBudget(ones, snapLimits, nil); err != nil || len(r.hits) != 0 {
		t.Fatalf("format 3 with hits 1: %v, %v", err, r.hits)
	}
}
