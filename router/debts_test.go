package router

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
)

// fakeOwner is a cluster of members n1 (this node) and n2, which owns
// every key. While down, every call fails as a refused connection does;
// while up, acquires are admitted with status in their answers, and charges
// are recorded and acknowledged, unless failCharges says to fail the next
// ones.
type fakeOwner struct {
	ring *ring.Ring

	mu          sync.Mutex
	down        bool
	failCharges int
	status      limiter.Status
	charges     []node.Charge
	onCharge    func() // runs during a charge, before it is acknowledged
	local       bool   // answer as this node (n1), the key's owner; else as n2
	held        bool   // Held shows status for every key: this node's table holds them
	release     node.ReleaseSink
}

func newFakeOwner(t *testing.T, members ...string) *fakeOwner {
	t.Helper()
	var ms []ring.Member
	for _, m := range members {
		ms = append(ms, ring.Member{Name: m})
	}
	rg, err := ring.New(ring.Config{}, ms)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeOwner{ring: rg}
}

func (f *fakeOwner) Do(_ context.Context, c node.Call) (node.Answer, error) {
	f.mu.Lock()
	if f.down {
		f.mu.Unlock()
		return node.Answer{}, fmt.Errorf("peer 127.0.0.1:1: %w", node.ErrPeerDown)
	}
	a := node.Answer{Owner: "n2", Decision: limiter.Decision{Status: f.status}}
	if f.local {
		a.Owner = "n1"
	}
	switch c.Op {
	case node.OpAcquire:
		a.Decision.Allowed, a.Decision.Lease, a.Decision.Reserved = true, 1, c.Req.PromptTokens
	case node.OpCharge:
		if f.failCharges > 0 {
			f.failCharges--
			f.mu.Unlock()
			return node.Answer{}, fmt.Errorf("call charge: %w", node.ErrTransferPending)
		}
		cb := f.onCharge
		f.mu.Unlock()
		if cb != nil {
			cb()
		}
		f.mu.Lock()
		f.charges = append(f.charges, c.Charge)
		a.OK = true
	default:
		a.OK = true
	}
	f.mu.Unlock()
	return a, nil
}
func (f *fakeOwner) Ring() *ring.Ring { return f.ring }
func (f *fakeOwner) Name() string     { return "n1" }

// OnRelease keeps the router's release sink, as *node.Node does.
func (f *fakeOwner) OnRelease(sink node.ReleaseSink) { f.release = sink }

// Held shows status for every key while held is set.
func (f *fakeOwner) Held(string) (limiter.Status, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, f.held
}

func (f *fakeOwner) set(fn func(f *fakeOwner)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeOwner) charged() []node.Charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]node.Charge(nil), f.charges...)
}

// startFake starts a router on f whose debt loop does not tick within a
// test: the test runs rounds with round(r).
func startFake(t *testing.T, f *fakeOwner, l limiter.Limits, now func() time.Time) (*Router, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	r, err := New(f, Config{Limits: func(string) limiter.Limits { return l }, Registry: reg, Now: now, DebtInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, reg
}

// round runs one round of r's debts (PayDebts with a context already
// ended) and returns how many keys still owe.
func round(r *Router) (owing int) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return r.PayDebts(ctx)
}

// gauge returns the value of the gauge name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	ms := samples(t, reg, name)
	if len(ms) == 0 {
		t.Fatalf("no gauge %s", name)
	}
	return ms[0].GetGauge().GetValue()
}

// acme is an acquire of tenant acme for prompt and maxTokens tokens.
func acme(prompt, maxTokens int64) Admission {
	return Admission{Tenant: "acme", Req: limiter.Request{PromptTokens: prompt, MaxTokens: maxTokens}}
}

// admitted makes n acquires adm and counts the admissions, checking every
// one is decided (admitted or refused) and, when fallback, flagged.
func admitted(t *testing.T, r *Router, n int, adm Admission, fallback bool) int {
	t.Helper()
	got := 0
	for range n {
		v, err := r.Admit(context.Background(), adm)
		if err != nil || v.Fallback != fallback {
			t.Fatalf("verdict %+v %v, want a decision with fallback=%v", v, err, fallback)
		}
		if v.Allowed {
			got++
		}
	}
	return got
}

// The degraded share spends what the owner last reported as remaining,
// divided among the live members: the owner said 10 requests remain, there
// are 2 members, so this node's fallback admits 5 (not the 50 of limit ÷
// members). Once everything the report counted has left the window (its
// Reset), the share is limit ÷ members again, less what the local window
// already holds.
func TestDegradedSpendsCachedRemaining(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.status = limiter.Status{Requests: limiter.DimStatus{Limit: 100, Remaining: 10, Reset: 30 * time.Second}}
	r, reg := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, clock.Now)
	body := acme(1, 0)
	if got := admitted(t, r, 1, body, false); got != 1 {
		t.Fatal("the owner did not admit")
	}
	f.set(func(f *fakeOwner) { f.down = true })
	if got := admitted(t, r, 100, body, true); got != 5 {
		t.Fatalf("fallback admitted %d with 10 remaining and 2 members, want 5", got)
	}
	v, err := r.Admit(context.Background(), body)
	if err != nil || v.Allowed || v.Reason != "requests" || v.RetryAfter != 30*time.Second {
		t.Fatalf("refusal %+v %v, want requests with retry-after 30 s (the report's reset)", v, err)
	}
	if got := counter(t, reg, "tokenring_fallback_debts_recorded_total"); got != 5 {
		t.Fatalf("debts recorded %v, want 5", got)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 5 {
		t.Fatalf("debts outstanding %v, want 5", got)
	}
	clock.Advance(30 * time.Second)
	if got := admitted(t, r, 100, body, true); got != 45 {
		t.Fatalf("after the report's reset admitted %d, want 100/2 - 5 = 45", got)
	}

	// Tokens: 1000 remaining, 2 members, 100 per request: 5 admitted.
	f = newFakeOwner(t, "n1", "n2")
	f.status = limiter.Status{Tokens: limiter.DimStatus{Limit: 100_000, Remaining: 1000, Reset: 30 * time.Second}}
	r, _ = startFake(t, f, limiter.Limits{Tokens: 100_000, Window: time.Minute}, clock.Now)
	tbody := acme(100, 0)
	admitted(t, r, 1, tbody, false)
	f.set(func(f *fakeOwner) { f.down = true })
	if got := admitted(t, r, 100, tbody, true); got != 5 {
		t.Fatalf("fallback admitted %d requests of 100 tokens with 1000 remaining and 2 members, want 5", got)
	}
}

// This node's own answers are not reported one by one: while it owns a
// key, its table is the report. When the key's state leaves the table (a
// handoff, a fence), the node hands the router the key's status, and a
// fallback afterwards spends the share of what this node had left, not of
// the whole limit.
func TestDegradedStartsFromTheStatusReleased(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.local = true
	// Its answers say no request is left: reported, the fallback would
	// take the key as exhausted.
	f.status = limiter.Status{Requests: limiter.DimStatus{Limit: 100, Remaining: 0, Reset: 30 * time.Second}}
	r, _ := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, clock.Now)
	body := acme(1, 0)
	if got := admitted(t, r, 3, body, false); got != 3 {
		t.Fatal("this node, the owner, did not admit")
	}
	if r.degraded.Exhausted(TenantKey("acme"), clock.Now()) {
		t.Fatal("this node's own answers were reported to the fallback")
	}
	f.set(func(f *fakeOwner) { f.status.Requests.Remaining = 10 })
	if f.release == nil {
		t.Fatal("New did not subscribe to the keys leaving the node's table")
	}
	f.release(TenantKey("acme"), f.status, clock.Now()) // the key handed on
	f.set(func(f *fakeOwner) { f.down, f.local = true, false })
	if got := admitted(t, r, 100, body, true); got != 5 {
		t.Fatalf("fallback admitted %d with 10 left at the release and 2 members, want 5", got)
	}
}

// A node that still holds a key's state but cannot decide for it (its
// lease lapsed: calls fail with node.ErrMinority) falls back from its own
// count of the key, read from its table at the fallback.
func TestDegradedStartsFromItsOwnCountWhileHeld(t *testing.T) {
	f := newFakeOwner(t, "n1", "n2")
	f.local = true
	f.status = limiter.Status{Requests: limiter.DimStatus{Limit: 100, Remaining: 10, Reset: 30 * time.Second}}
	r, _ := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, newFakeClock().Now)
	body := acme(1, 0)
	if got := admitted(t, r, 3, body, false); got != 3 {
		t.Fatal("this node, the owner, did not admit")
	}
	f.set(func(f *fakeOwner) { f.down, f.held = true, true })
	if got := admitted(t, r, 100, body, true); got != 5 {
		t.Fatalf("fallback admitted %d with 10 left in this node's table and 2 members, want 5", got)
	}
}

// A key its owner never reported gets the full limit ÷ live members.
func TestDegradedNeverSeenKeyUsesLimitShare(t *testing.T) {
	f := newFakeOwner(t, "n1", "n2")
	f.down = true
	r, _ := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, newFakeClock().Now)
	if got := admitted(t, r, 200, acme(1, 0), true); got != 50 {
		t.Fatalf("fallback admitted %d for a key never seen, want 100/2 = 50", got)
	}
}

// Debts are charged to the owner exactly once when it comes back: nothing
// is removed while it is down, one charge carries them all (requests,
// tokens, the time of the latest) once it is up, and nothing is charged
// again after its acknowledgement.
func TestDebtsRepaidOnceWhenOwnerReturns(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.down = true
	r, reg := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, clock.Now)
	if got := admitted(t, r, 3, acme(40, 0), true); got != 3 {
		t.Fatalf("admitted %d", got)
	}
	clock.Advance(time.Second)
	last := clock.Now()
	if got := admitted(t, r, 2, acme(40, 10), true); got != 2 {
		t.Fatalf("admitted %d", got)
	}
	for range 3 {
		round(r)
	}
	if got := f.charged(); len(got) != 0 {
		t.Fatalf("charged %v to a down owner", got)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 5 {
		t.Fatalf("outstanding %v while the owner is down, want 5", got)
	}
	if got := counter(t, reg, "tokenring_fallback_debt_charge_failures_total"); got != 3 {
		t.Fatalf("charge failures %v, want 3", got)
	}
	f.set(func(f *fakeOwner) { f.down = false })
	for range 3 {
		round(r)
	}
	want := []node.Charge{{Requests: 5, Tokens: 3*40 + 2*50, At: last}}
	if got := f.charged(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("charged %v, want exactly %v", got, want)
	}
	if got := counter(t, reg, "tokenring_fallback_debts_repaid_total"); got != 5 {
		t.Fatalf("repaid %v, want 5", got)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 0 {
		t.Fatalf("outstanding %v, want 0", got)
	}
	if n := round(r); n != 0 {
		t.Fatalf("%d keys still owing", n)
	}
}

// A charge that fails (the owner's key still in transfer) keeps the debts:
// the next round charges them. A debt recorded while a charge is on its way
// is not removed by that charge's acknowledgement: it is charged next.
func TestDebtRetriedAfterFailedCharge(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.down = true
	r, reg := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, clock.Now)
	admitted(t, r, 2, acme(7, 0), true)
	f.set(func(f *fakeOwner) { f.down, f.failCharges = false, 1 })
	round(r)
	if got := f.charged(); len(got) != 0 {
		t.Fatalf("a failed charge was recorded: %v", got)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 2 {
		t.Fatalf("outstanding %v after a failed charge, want 2", got)
	}
	// The retry succeeds; meanwhile another fallback admission is owed.
	f.set(func(f *fakeOwner) {
		f.onCharge = func() {
			f.onCharge = nil
			r.degraded.Owe("t:acme", 9, 1)
			r.debts.Recorded("t:acme", 1)
		}
	})
	round(r)
	round(r)
	round(r)
	t0 := clock.Now()
	want := []node.Charge{{Requests: 2, Tokens: 14, At: t0}, {Requests: 1, Tokens: 9, At: t0}}
	if got := f.charged(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("charged %v, want %v", got, want)
	}
	if got := counter(t, reg, "tokenring_fallback_debts_repaid_total"); got != 3 {
		t.Fatalf("repaid %v, want 3", got)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 0 {
		t.Fatalf("outstanding %v, want 0", got)
	}
}

// A debt whose latest admission is older than the key's window expires
// unpaid: the owner would not count it any more.
func TestDebtExpiresAfterWindow(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.down = true
	r, reg := startFake(t, f, limiter.Limits{Requests: 100, Window: time.Minute}, clock.Now)
	admitted(t, r, 4, acme(1, 0), true)
	clock.Advance(time.Minute)
	f.set(func(f *fakeOwner) { f.down = false })
	round(r)
	if got := f.charged(); len(got) != 0 {
		t.Fatalf("charged expired debts: %v", got)
	}
	if got := counter(t, reg, "tokenring_fallback_debts_expired_total"); got != 4 {
		t.Fatalf("expired %v, want 4", got)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 0 {
		t.Fatalf("outstanding %v, want 0", got)
	}
}

// A charge reaches a real node's window: the owner counts it like an
// admission and says so in its status.
func TestChargeCountsAtNode(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Tokens: 1000} }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, ReplicationInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r, err := New(n, Config{Limits: limits, DebtInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range 3 {
		r.degraded.Owe("t:acme", 100, 1)
		r.debts.Recorded("t:acme", 1)
	}
	round(r)
	a, err := n.Do(context.Background(), node.Call{Op: node.OpStatus, Key: "t:acme"})
	if err != nil {
		t.Fatal(err)
	}
	if st := a.Decision.Status; st.Requests.Remaining != 7 || st.Tokens.Remaining != 700 {
		t.Fatalf("owner status after a charge of 3 requests and 300 tokens: %+v", st)
	}
	if round(r) != 0 {
		t.Fatal("debts still owed after the owner acknowledged")
	}
}

// What a fenced member admitted after its last replication (node.FenceSink)
// is owed like fallback admissions: charged once, in full, when an owner is
// reachable, and it spends this node's degraded share meanwhile.
func TestOweFromAFenceIsChargedOnce(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.status = limiter.Status{Requests: limiter.DimStatus{Limit: 10, Remaining: 8, Reset: time.Minute}}
	r, reg := startFake(t, f, limiter.Limits{Requests: 10, Window: time.Minute}, clock.Now)
	if got := admitted(t, r, 1, acme(1, 1), false); got != 1 {
		t.Fatalf("admitted %d by the owner, want 1", got)
	}
	f.set(func(f *fakeOwner) { f.down = true })
	at := clock.Now().Add(-5 * time.Second)
	r.Owe("t:acme", 3, 700, at)
	r.Owe("t:acme", 0, 0, at) // nothing: not recorded
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 3 {
		t.Fatalf("outstanding %v, want 3", got)
	}
	// The owner reported 8 remaining; with 2 members the share is 4, and
	// the 3 owed spend it: one more admission, then refusals.
	if got := admitted(t, r, 3, acme(1, 1), true); got != 1 {
		t.Fatalf("admitted %d on the degraded share after owing 3 of its 4, want 1", got)
	}
	round(r)
	if got := f.charged(); len(got) != 0 {
		t.Fatalf("charged %v to a down owner", got)
	}
	f.set(func(f *fakeOwner) { f.down = false })
	round(r)
	round(r)
	want := []node.Charge{{Requests: 4, Tokens: 702, At: clock.Now()}}
	if got := f.charged(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("charged %v, want exactly %v (the 3 owed and the 1 fallback admission, once)", got, want)
	}
	if got := gauge(t, reg, "tokenring_fallback_debts_outstanding"); got != 0 {
		t.Fatalf("outstanding %v, want 0", got)
	}
}

// A draining node pays what it owes before it leaves: PayDebts charges
// until nothing is owed, and reports what is still owed when its context
// ends first.
func TestPayDebtsBeforeLeaving(t *testing.T) {
	clock := newFakeClock()
	f := newFakeOwner(t, "n1", "n2")
	f.down = true
	r, err := New(f, Config{Limits: func(string) limiter.Limits { return limiter.Limits{Requests: 100, Window: time.Minute} }, Now: clock.Now, DebtInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if got := admitted(t, r, 3, acme(1, 1), true); got != 3 {
		t.Fatalf("admitted %d", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if owing := r.PayDebts(ctx); owing != 1 {
		t.Fatalf("owner down: %d keys still owing, want 1", owing)
	}
	f.set(func(f *fakeOwner) { f.down = false })
	if owing := r.PayDebts(context.Background()); owing != 0 {
		t.Fatalf("owner back: %d keys still owing, want 0", owing)
	}
	if got := f.charged(); len(got) != 1 || got[0].Requests != 3 {
		t.Fatalf("charged %v, want the 3 requests once", got)
	}
}
