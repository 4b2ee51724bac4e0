package limiter

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// t0 is the fake clock's origin, on a whole second, so that with a 10 s
// window of 10 buckets bucket boundaries fall on t0 + whole seconds.
var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// pol10 is a policy of 10 buckets per window: with Window 10s a bucket is 1s
// and a unit admitted at t0+x is counted until t0+ceil'(x)+11s, where
// ceil' is x rounded down to a second.
var pol10 = &Policy{Buckets: 10, DefaultMaxTokens: 1000, QueueLen: 2, Aging: 5 * time.Second}

const ms = time.Millisecond
const sec = time.Second

// step is one Acquire of a step table.
type step struct {
	at     time.Duration // since t0
	r      Request
	allow  bool
	reason Dimension
	retry  time.Duration // RetryAfter when refused
}

func runSteps(t *testing.T, b *Budget, steps []step) []Decision {
	t.Helper()
	var ds []Decision
	for i, s := range steps {
		d := b.Acquire(at(s.at), s.r)
		if d.Allowed != s.allow || d.Reason != s.reason || (!s.allow && d.RetryAfter != s.retry) {
			t.Fatalf("step %d at t0+%v: got allowed=%v reason=%v retry=%v, want allowed=%v reason=%v retry=%v",
				i, s.at, d.Allowed, d.Reason, d.RetryAfter, s.allow, s.reason, s.retry)
		}
		ds = append(ds, d)
	}
	return ds
}

func TestRequestWindowSlides(t *testing.T) {
	b := NewBudget(Limits{Requests: 3, Window: 10 * sec}, pol10, t0)
	r := Request{Reserve: 1}
	runSteps(t, b, []step{
		{0, r, true, None, 0},
		{2 * sec, r, true, None, 0},
		{4*sec + 300*ms, r, true, None, 0},
		// Bucket [t0, t0+1s) counts until t0+11s.
		{5 * sec, r, false, Requests, 6 * sec},
		{10*sec + 999*ms, r, false, Requests, 1 * ms},
		{11*sec - 1, r, false, Requests, 1},
		{11 * sec, r, true, None, 0},
		// Next oldest: bucket [t0+2s, t0+3s) leaves at t0+13s.
		{11 * sec, r, false, Requests, 2 * sec},
		{12*sec + 500*ms, r, false, Requests, 500 * ms},
		{13 * sec, r, true, None, 0},
		// Then [t0+4s, t0+5s) leaves at t0+15s.
		{13 * sec, r, false, Requests, 2 * sec},
		// A long gap clears everything.
		{time.Hour, r, true, None, 0},
		{time.Hour, r, true, None, 0},
		{time.Hour, r, true, None, 0},
		{time.Hour, r, false, Requests, 11 * sec},
	})
}

func TestTokenWindowRetryAfter(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Window: 10 * sec}, pol10, t0)
	runSteps(t, b, []step{
		{0, Request{Reserve: 400}, true, None, 0},
		{3 * sec, Request{Reserve: 400}, true, None, 0},
		{5 * sec, Request{Reserve: 300}, false, Tokens, 6 * sec},  // t0 bucket leaves at 11s
		{5 * sec, Request{Reserve: 200}, true, None, 0},           // exactly the limit
		{5 * sec, Request{Reserve: 1}, false, Tokens, 6 * sec},    // 400 free at 11s
		{5 * sec, Request{Reserve: 500}, false, Tokens, 9 * sec},  // needs t0+3s's 400 too: 14s
		{5 * sec, Request{Reserve: 900}, false, Tokens, 11 * sec}, // needs all three: 16s
		{5 * sec, Request{Reserve: 1000}, false, Tokens, 11 * sec},
		{5 * sec, Request{Reserve: 1001}, false, Tokens, 10 * sec}, // never fits: Window
		{14 * sec, Request{Reserve: 800}, true, None, 0},
	})
}

func TestReasonOrderAndStatus(t *testing.T) {
	b := NewBudget(Limits{Requests: 2, Tokens: 100, Concurrency: 1, Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	d := b.Acquire(t0, Request{Reserve: 60})
	if !d.Allowed || d.Reserved != 60 || d.Lease == 0 {
		t.Fatalf("first: %+v", d)
	}
	want := Status{
		Requests:    DimStatus{Limit: 2, Remaining: 1, Reset: 11 * sec},
		Tokens:      DimStatus{Limit: 100, Remaining: 40, Reset: 11 * sec},
		Concurrency: DimStatus{Limit: 1, Remaining: 0, Reset: 30 * sec},
	}
	if d.Status != want {
		t.Fatalf("status %+v, want %+v", d.Status, want)
	}
	// Tokens and concurrency both full: tokens is reported first; the retry
	// is the later of the two (slot at 30s, tokens at 11s).
	d = b.Acquire(at(sec), Request{Reserve: 50})
	if d.Allowed || d.Reason != Tokens || d.RetryAfter != 29*sec {
		t.Fatalf("second: %+v", d)
	}
	d = b.Acquire(at(sec), Request{Reserve: 40})
	if d.Allowed || d.Reason != Concurrency || d.RetryAfter != 29*sec {
		t.Fatalf("third: %+v", d)
	}
	b.Release(at(2*sec), d.Lease) // unknown lease: no effect
	if !b.Release(at(2*sec), 1) {
		t.Fatal("release of the first lease failed")
	}
	b.Acquire(at(2*sec), Request{Reserve: 40})
	// Requests full; requests and tokens fit at 11s, the slot at 32s.
	d = b.Acquire(at(2*sec), Request{Reserve: 0, PromptTokens: 0, MaxTokens: 1})
	if d.Allowed || d.Reason != Requests || d.RetryAfter != 30*sec {
		t.Fatalf("fourth: %+v", d)
	}
	st := b.Status(at(5 * sec))
	want = Status{
		Requests:    DimStatus{Limit: 2, Remaining: 0, Reset: 8 * sec},
		Tokens:      DimStatus{Limit: 100, Remaining: 0, Reset: 8 * sec},
		Concurrency: DimStatus{Limit: 1, Remaining: 0, Reset: 27 * sec},
	}
	if st != want {
		t.Fatalf("status %+v, want %+v", st, want)
	}
	// Unlimited dimensions report Limit 0.
	u := NewBudget(Limits{}, nil, t0)
	if st := u.Acquire(t0, Request{PromptTokens: 5}).Status; st.Requests.Limit != 0 || st.Tokens.Remaining != 0 || st.Concurrency.Limit != 0 {
		t.Fatalf("unlimited status %+v", st)
	}
}

func TestEstimate(t *testing.T) {
	b := NewBudget(Limits{Window: 10 * sec}, pol10, t0)
	acq := func(r Request) Decision {
		t.Helper()
		d := b.Acquire(t0, r)
		if !d.Allowed {
			t.Fatalf("refused %+v", d)
		}
		return d
	}
	steps := []struct {
		r          Request
		completion int64 // settled with this many completion tokens
		reserved   int64
	}{
		{Request{PromptTokens: 100, MaxTokens: 500}, 100, 600}, // no history: max_tokens
		{Request{PromptTokens: 100}, 200, 250},                 // avg 100: ceil(1.5×100)
		{Request{PromptTokens: 100, MaxTokens: 500}, 0, 280},   // avg 120 → 180
		{Request{PromptTokens: 100, MaxTokens: 50}, 0, 150},    // max_tokens smaller
		{Request{PromptTokens: 7, Reserve: 33}, 0, 33},         // explicit reservation
		{Request{PromptTokens: -5, MaxTokens: -1}, 0, 93},      // avg 61.44 → ceil(92.16)
	}
	for i, s := range steps {
		d := acq(s.r)
		if d.Reserved != s.reserved {
			t.Fatalf("step %d: reserved %d, want %d", i, d.Reserved, s.reserved)
		}
		b.Settle(t0, d.Lease, Usage{CompletionTokens: s.completion})
	}
	// Without history and without max_tokens: the policy default.
	b = NewBudget(Limits{}, pol10, t0)
	if d := b.Acquire(t0, Request{PromptTokens: 10}); d.Reserved != 1010 {
		t.Fatalf("default max tokens: reserved %d", d.Reserved)
	}
	if d := NewBudget(Limits{}, nil, t0).Acquire(t0, Request{}); d.Reserved != DefaultMaxTokens {
		t.Fatalf("nil policy: reserved %d", d.Reserved)
	}
}

func TestSettleCreditDebit(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Window: 10 * sec}, pol10, t0)
	tokens := func(now time.Duration) int64 {
		t.Helper()
		return 1000 - b.Status(at(now)).Tokens.Remaining
	}
	a := b.Acquire(at(0), Request{Reserve: 500})
	c := b.Acquire(at(2*sec), Request{Reserve: 300})
	if got := tokens(3 * sec); got != 800 {
		t.Fatalf("after two reservations: %d", got)
	}
	// Credit: 500 reserved, 200 used; the 300 go back to a's bucket.
	if !b.Settle(at(3*sec), a.Lease, Usage{PromptTokens: 150, CompletionTokens: 50}) {
		t.Fatal("settle a")
	}
	if got := tokens(3 * sec); got != 500 {
		t.Fatalf("after credit: %d", got)
	}
	// Idempotent: a second settle changes nothing.
	if b.Settle(at(3*sec), a.Lease, Usage{}) || tokens(3*sec) != 500 {
		t.Fatal("second settle changed state")
	}
	// Debit: 300 reserved, 450 used; the 150 go to c's bucket (t0+2s).
	if !b.Settle(at(4*sec), c.Lease, Usage{PromptTokens: 100, CompletionTokens: 350}) {
		t.Fatal("settle c")
	}
	if got := tokens(4 * sec); got != 650 {
		t.Fatalf("after debit: %d", got)
	}
	// a's bucket leaves at 11s, c's (now 450) at 13s.
	if got := tokens(11 * sec); got != 450 {
		t.Fatalf("at 11s: %d", got)
	}
	if got := tokens(13 * sec); got != 0 {
		t.Fatalf("at 13s: %d", got)
	}
	if b.Settle(at(13*sec), 12345, Usage{}) {
		t.Fatal("unknown lease settled")
	}

	// Settling after the reservation's bucket left the window: a credit is
	// dropped, a debit goes to the current bucket.
	b = NewBudget(Limits{Tokens: 1000, Window: 10 * sec, LeaseTTL: time.Hour}, pol10, t0)
	x := b.Acquire(at(0), Request{Reserve: 500})
	y := b.Acquire(at(0), Request{Reserve: 100})
	b.Settle(at(20*sec), x.Lease, Usage{CompletionTokens: 10})
	if got := tokens(20 * sec); got != 0 {
		t.Fatalf("late credit: %d", got)
	}
	b.Settle(at(20*sec+500*ms), y.Lease, Usage{CompletionTokens: 350})
	st := b.Status(at(21 * sec))
	if st.Tokens.Remaining != 750 || st.Tokens.Reset != 10*sec {
		t.Fatalf("late debit: %+v", st.Tokens)
	}
}

func TestReleaseKeepsTokens(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Concurrency: 1, Window: 10 * sec}, pol10, t0)
	d := b.Acquire(t0, Request{Reserve: 700})
	if !b.Release(at(sec), d.Lease) {
		t.Fatal("release")
	}
	st := b.Status(at(sec))
	if st.Tokens.Remaining != 300 || st.Concurrency.Remaining != 1 {
		t.Fatalf("after release %+v", st)
	}
	if b.Release(at(sec), d.Lease) || b.Settle(at(sec), d.Lease, Usage{}) || b.Cancel(at(sec), d.Lease) {
		t.Fatal("finished lease accepted")
	}
}

func TestCancelRollsBack(t *testing.T) {
	b := NewBudget(Limits{Requests: 2, Tokens: 1000, Concurrency: 3, Window: 10 * sec}, pol10, t0)
	a := b.Acquire(at(0), Request{Reserve: 500})
	runSteps(t, b, []step{
		{sec, Request{Reserve: 500}, true, None, 0},
		{2 * sec, Request{Reserve: 1}, false, Requests, 9 * sec},
	})
	if !b.Cancel(at(2*sec), a.Lease) {
		t.Fatal("cancel")
	}
	if b.Cancel(at(2*sec), a.Lease) {
		t.Fatal("second cancel")
	}
	st := b.Status(at(2 * sec))
	if st.Requests.Remaining != 1 || st.Tokens.Remaining != 500 || st.Concurrency.Remaining != 2 {
		t.Fatalf("after cancel %+v", st)
	}
	runSteps(t, b, []step{
		{2 * sec, Request{Reserve: 500}, true, None, 0},
		// Now the oldest is t0+1s's, leaving at 12s.
		{2 * sec, Request{Reserve: 1}, false, Requests, 10 * sec},
	})
	// Cancelling after the bucket left the window only frees the slot.
	c := NewBudget(Limits{Requests: 1, Concurrency: 1, Window: 10 * sec}, pol10, t0)
	l := c.Acquire(t0, Request{Reserve: 1})
	c.Acquire(at(15*sec), Request{Reserve: 1}) // refused: no slot
	if !c.Cancel(at(15*sec), l.Lease) {
		t.Fatal("late cancel")
	}
	if st := c.Status(at(15 * sec)); st.Requests.Remaining != 1 || st.Concurrency.Remaining != 1 {
		t.Fatalf("after late cancel %+v", st)
	}
}

func TestRenewAndTTLExpiry(t *testing.T) {
	b := NewBudget(Limits{Concurrency: 2, Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	a := b.Acquire(at(0), Request{Reserve: 1})
	c := b.Acquire(at(10*sec), Request{Reserve: 1})
	runSteps(t, b, []step{
		{15 * sec, Request{Reserve: 1}, false, Concurrency, 15 * sec}, // a expires at 30s
	})
	exp, ok := b.Renew(at(20*sec), a.Lease)
	if !ok || !exp.Equal(at(50*sec)) {
		t.Fatalf("renew: %v %v", exp, ok)
	}
	runSteps(t, b, []step{
		{25 * sec, Request{Reserve: 1}, false, Concurrency, 15 * sec}, // now c (40s) is first
		{40*sec - 1, Request{Reserve: 1}, false, Concurrency, 1},
		{40 * sec, Request{Reserve: 1}, true, None, 0}, // c's slot expired
	})
	if _, ok := b.Renew(at(40*sec), c.Lease); ok {
		t.Fatal("renewed an expired lease")
	}
	if b.Settle(at(40*sec), c.Lease, Usage{}) {
		t.Fatal("settled an expired lease")
	}
	if st := b.Status(at(50 * sec)); st.Concurrency.Remaining != 1 || st.Concurrency.Reset != 20*sec {
		t.Fatalf("after a expired: %+v", st.Concurrency)
	}
	if _, ok := b.Renew(at(50*sec), a.Lease); ok {
		t.Fatal("renewed a at its expiry")
	}

	// Lowering the limit below the slots in use: the retry waits for as
	// many expiries as needed (2 in use, limit 1: the second one).
	b = NewBudget(Limits{Concurrency: 2, Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	b.Acquire(at(0), Request{Reserve: 1})
	b.Acquire(at(10*sec), Request{Reserve: 1})
	b.SetLimits(Limits{Concurrency: 1, Window: 10 * sec, LeaseTTL: 30 * sec})
	runSteps(t, b, []step{
		{15 * sec, Request{Reserve: 1}, false, Concurrency, 25 * sec},
		{30 * sec, Request{Reserve: 1}, false, Concurrency, 10 * sec},
		{40 * sec, Request{Reserve: 1}, true, None, 0},
	})
}

func TestIdle(t *testing.T) {
	b := NewBudget(Limits{Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	if !b.Idle(t0) {
		t.Fatal("new budget not idle")
	}
	d := b.Acquire(t0, Request{Reserve: 5})
	b.Release(at(sec), d.Lease)
	if b.Idle(at(10 * sec)) {
		t.Fatal("idle while tokens counted")
	}
	if !b.Idle(at(11 * sec)) {
		t.Fatal("not idle once the window slid")
	}
	b.Acquire(at(20*sec), Request{Reserve: 5})
	if b.Idle(at(40 * sec)) {
		t.Fatal("idle with a lease")
	}
	if !b.Idle(at(50 * sec)) {
		t.Fatal("not idle after the lease expired")
	}
}

func TestClockBackwards(t *testing.T) {
	b := NewBudget(Limits{Requests: 1, Window: 10 * sec}, pol10, at(5*sec))
	b.Acquire(at(5*sec), Request{Reserve: 1})
	// An earlier time does not resurrect or misplace anything: the charge
	// still leaves at 16s, and the retry is measured from the given time.
	runSteps(t, b, []step{
		{2 * sec, Request{Reserve: 1}, false, Requests, 14 * sec},
		{16 * sec, Request{Reserve: 1}, true, None, 0},
	})
}

func TestSetLimitsRebucket(t *testing.T) {
	b := NewBudget(Limits{Requests: 100, Tokens: 1000, Window: 10 * sec, LeaseTTL: time.Hour}, pol10, t0)
	a := b.Acquire(at(0), Request{Reserve: 400})
	c := b.Acquire(at(4*sec+500*ms), Request{Reserve: 400})
	// Window 5s, still 10 buckets: 0.5s each. Each old 1s bucket moves to
	// the new bucket holding its last instant: a's [0s,1s) to [0.5s,1s),
	// leaving at 6s; c's [4s,5s) to [4.5s,5s), leaving at 10s.
	b.SetLimits(Limits{Requests: 100, Tokens: 1000, Window: 5 * sec, LeaseTTL: time.Hour})
	if st := b.Status(at(6*sec - 1)); st.Tokens.Remaining != 200 || st.Tokens.Reset != 4*sec+1 {
		t.Fatalf("after shrinking: %+v", st.Tokens)
	}
	if st := b.Status(at(6 * sec)); st.Tokens.Remaining != 600 || st.Tokens.Reset != 4*sec {
		t.Fatalf("after shrinking: %+v", st.Tokens)
	}
	// A credit on a (gone) is dropped; on c it lands where c's units are.
	b.Settle(at(6*sec), a.Lease, Usage{})
	b.Settle(at(6*sec), c.Lease, Usage{CompletionTokens: 100})
	if st := b.Status(at(6 * sec)); st.Tokens.Remaining != 900 || st.Tokens.Reset != 4*sec {
		t.Fatalf("after credits: %+v", st.Tokens)
	}
	// Growing the window (2s buckets) keeps what is counted: c's units move
	// to [4s,6s), leaving at 26s.
	b.SetLimits(Limits{Requests: 100, Tokens: 1000, Window: 20 * sec})
	if st := b.Status(at(6 * sec)); st.Tokens.Remaining != 900 || st.Requests.Remaining != 99 || st.Tokens.Reset != 20*sec {
		t.Fatalf("after growing: %+v", st)
	}
	if got := b.Limits(); got.Window != 20*sec || got.LeaseTTL != DefaultLeaseTTL {
		t.Fatalf("limits %+v", got)
	}
}

func TestHugeValuesDoNotOverflow(t *testing.T) {
	b := NewBudget(Limits{Window: 1 << 62, LeaseTTL: 1 << 62}, nil, t0)
	if l := b.Limits(); l.Window != maxDuration || l.LeaseTTL != maxDuration {
		t.Fatalf("limits not capped: %+v", l)
	}
	d := b.Acquire(t0, Request{PromptTokens: 1 << 62, MaxTokens: 1 << 62})
	if !d.Allowed || d.Reserved != maxUnits {
		t.Fatalf("huge request: %+v", d)
	}
	b.Acquire(t0, Request{Reserve: 1 << 62})
	if !b.Settle(t0, d.Lease, Usage{PromptTokens: 1 << 62, CompletionTokens: 1 << 62}) {
		t.Fatal("settle")
	}
	st := b.Status(t0)
	if st.Tokens.Reset <= 0 || st.Concurrency.Reset != maxDuration {
		t.Fatalf("status %+v", st)
	}
	data, _ := b.MarshalBinary()
	if _, err := RestoreBudget(data, b.Limits(), nil); err != nil {
		t.Fatalf("restore after saturation: %v", err)
	}
	// A tokens limit near the int64 range still compares without overflow.
	c := NewBudget(Limits{Tokens: 1<<63 - 1}, nil, t0)
	for range 3 {
		if d := c.Acquire(t0, Request{Reserve: 1 << 62}); !d.Allowed {
			t.Fatalf("refused %+v", d)
		}
	}
}

func TestRenewNeverShortens(t *testing.T) {
	b := NewBudget(Limits{Window: 10 * sec, LeaseTTL: 30 * sec}, pol10, t0)
	l := b.Acquire(at(10*sec), Request{Reserve: 1}).Lease
	exp, ok := b.Renew(at(5*sec), l) // a lagging clock
	if !ok || !exp.Equal(at(40*sec)) {
		t.Fatalf("renew %v %v", exp.Sub(t0), ok)
	}
	exp, ok = b.Renew(at(20*sec), l)
	if !ok || !exp.Equal(at(50*sec)) {
		t.Fatalf("renew %v %v", exp.Sub(t0), ok)
	}
}

func TestPolicyDefaults(t *testing.T) {
	var p *Policy
	if p.buckets() != DefaultBuckets || p.defaultMaxTokens() != DefaultMaxTokens || p.queueLen() != DefaultQueueLen || p.aging() != int64(DefaultAging) {
		t.Fatal("nil policy")
	}
	p = &Policy{Buckets: 1 << 20, DefaultMaxTokens: -1, QueueLen: -1, Aging: -1}
	if p.buckets() != maxBuckets || p.defaultMaxTokens() != DefaultMaxTokens || p.queueLen() != DefaultQueueLen || p.aging() != int64(DefaultAging) {
		t.Fatal("out-of-range policy")
	}
	b := NewBudget(Limits{Requests: -1, Tokens: -5, Concurrency: -3, Window: 7 * sec}, p, t0)
	if l := b.Limits(); l.Requests != 0 || l.Tokens != 0 || l.Concurrency != 0 || b.width != 1708985 {
		t.Fatalf("limits %+v width %d", l, b.width) // ceil(7e9/4096)
	}
	for _, d := range []Dimension{None, Requests, Tokens, Concurrency, QueueFull} {
		_ = d.String()
	}
	if QueueFull.String() != "queue_full" || None.String() != "" {
		t.Fatal("Dimension.String")
	}
}

func TestSelectKth(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SliceOfN(rapid.Int64Range(-5, 5), 1, 100).Draw(t, "s")
		k := rapid.IntRange(0, len(s)-1).Draw(t, "k")
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		if got := selectKth(slices.Clone(s), k); got != sorted[k] {
			t.Fatalf("selectKth(%v, %d) = %d, want %d", s, k, got, sorted[k])
		}
	})
}

// Charges (debts of fallback admissions made elsewhere) land in the bucket
// of their admission time while it is in the window, are dropped once it has
// left, count toward the limits like admissions, and never make Remaining
// negative.
func TestChargeSteps(t *testing.T) {
	b := NewBudget(Limits{Requests: 10, Tokens: 1000, Window: 10 * sec}, pol10, t0)
	type cstep struct {
		now, at       time.Duration // since t0
		req, tok      int64
		counted       bool
		remReq, remTk int64         // Status at now after the charge
		reset         time.Duration // requests Reset at now
	}
	for i, s := range []cstep{
		// At t0+5s, a debt from t0+1.5s lands in bucket [1s,2s): counted until 12s.
		{5 * sec, 1500 * ms, 3, 300, true, 7, 700, 7 * sec},
		// A debt from the future (a clock ahead) goes to the newest bucket.
		{5 * sec, 9 * sec, 1, 10, true, 6, 690, 11 * sec},
		// A debt from before the window (bucket [-6s,-5s) left at 5s): dropped.
		{5 * sec, -5500 * ms, 4, 400, false, 6, 690, 11 * sec},
		// The oldest bucket still counted at 5s is [-5s,-4s) (leaves at 6s).
		{5 * sec, -4500 * ms, 1, 0, true, 5, 690, 11 * sec},
		{6 * sec, 0, 0, 0, false, 6, 690, 10 * sec},
		// Over the limit: Remaining stays 0.
		{6 * sec, 6 * sec, 20, 2000, true, 0, 0, 11 * sec},
		// Negative amounts count as 0.
		{6 * sec, 6 * sec, -1, -1, false, 0, 0, 11 * sec},
		// The t0+1.5s charge leaves at 12s; the t0+5s and t0+6s buckets still count.
		{12 * sec, 0, 0, 0, false, 0, 0, 5 * sec},
		// Everything has left at 17s.
		{17 * sec, 0, 0, 0, false, 10, 1000, 0},
	} {
		if got := b.Charge(at(s.now), at(s.at), s.req, s.tok); got != s.counted {
			t.Fatalf("step %d: Charge counted=%v, want %v", i, got, s.counted)
		}
		st := b.Status(at(s.now))
		if st.Requests.Remaining != s.remReq || st.Tokens.Remaining != s.remTk || st.Requests.Reset != s.reset {
			t.Fatalf("step %d at t0+%v: status %+v, want remaining %d/%d, reset %v", i, s.now, st, s.remReq, s.remTk, s.reset)
		}
	}
	// Charged units refuse admissions like admitted ones, with an honest
	// retry: 9 charged at t0+0.5s leave at 11s.
	b = NewBudget(Limits{Requests: 10, Window: 10 * sec}, pol10, t0)
	b.Charge(at(2*sec), at(500*ms), 9, 0)
	runSteps(t, b, []step{
		{2 * sec, Request{Reserve: 1}, true, None, 0},
		{3 * sec, Request{Reserve: 1}, false, Requests, 8 * sec},
		{11 * sec, Request{Reserve: 1}, true, None, 0},
	})
}

// BucketEnd is when the bucket admissions go to ends: an admission until
// then leaves the window with it; one at BucketEnd goes to the next bucket.
// A clock read earlier than the latest seen does not move it back.
func TestBucketEnd(t *testing.T) {
	l := Limits{Requests: 100, Window: time.Minute} // 60 buckets of 1 s
	t0 := time.Unix(1_000_000, 250_000_000)
	b := NewBudget(l, nil, t0)
	end := b.BucketEnd()
	if want := time.Unix(1_000_001, 0); !end.Equal(want) {
		t.Fatalf("BucketEnd at %v = %v, want %v", t0, end, want)
	}
	b.Acquire(end.Add(-time.Nanosecond), Request{PromptTokens: 1, MaxTokens: 1})
	if !b.BucketEnd().Equal(end) {
		t.Fatalf("an admission inside the bucket moved its end to %v", b.BucketEnd())
	}
	// The admission leaves the window at end + Window, not a bucket later.
	if got := b.Status(end.Add(time.Minute - time.Nanosecond)).Requests.Remaining; got != 99 {
		t.Fatalf("just before end+Window: %d requests left, want 99", got)
	}
	if got := b.Status(end.Add(time.Minute)).Requests.Remaining; got != 100 {
		t.Fatalf("at end+Window: %d requests left, want 100", got)
	}
	latest := b.BucketEnd() // the latest time seen: end + Window
	if b.Status(t0); !b.BucketEnd().Equal(latest) {
		t.Fatalf("a clock read behind the latest moved BucketEnd from %v to %v", latest, b.BucketEnd())
	}
}
