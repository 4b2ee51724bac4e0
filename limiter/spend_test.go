package limiter

import (
	"math/rand/v2"
	"testing"
	"time"
)

// usd is a dollar amount in picodollars.
func usd(dollars float64) int64 { return int64(dollars * 1e12) }

// gpt4o is $2.50 input, $1.25 cached input, $10 output per million
// tokens: picodollars per token.
var gpt4o = Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 2_500_000, Output: 10_000_000}

// TestPriceCost: cached and written prompt tokens are parts of the prompt,
// each at its price; amounts are exact picodollars; absurd inputs
// saturate instead of overflowing.
func TestPriceCost(t *testing.T) {
	claude := Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000}
	for _, c := range []struct {
		p    Price
		u    Usage
		want int64
	}{
		{gpt4o, Usage{PromptTokens: 1000, CompletionTokens: 100}, 1000*2_500_000 + 100*10_000_000},
		{gpt4o, Usage{PromptTokens: 1000, CachedTokens: 400, CompletionTokens: 100}, 600*2_500_000 + 400*1_250_000 + 100*10_000_000},
		{claude, Usage{PromptTokens: 1000, CachedTokens: 500, CacheWriteTokens: 200, CompletionTokens: 1}, 300*3_000_000 + 500*300_000 + 200*3_750_000 + 15_000_000},
		{claude, Usage{PromptTokens: 10, CachedTokens: 50, CacheWriteTokens: 50}, 10 * 300_000}, // parts clamped to the prompt
		{gpt4o, Usage{PromptTokens: -5, CompletionTokens: -1}, 0},
		{Price{Input: MaxSpend}, Usage{PromptTokens: 1 << 40}, MaxSpend},
		{Price{Input: MaxSpend, Output: MaxSpend}, Usage{PromptTokens: 1 << 40, CompletionTokens: 1 << 40}, MaxSpend},
	} {
		if got := c.p.Cost(c.u); got != c.want {
			t.Errorf("%+v of %+v: %d, want %d", c.p, c.u, got, c.want)
		}
	}
}

// spendLimits is a $1.00 budget per day in UTC, with room in every other
// dimension.
var spendLimits = Limits{Window: 10 * sec, LeaseTTL: 30 * sec, Spend: usd(1), Period: Period{Unit: PeriodDay}}

// TestSpendReservesAndSettlesExactly: an acquire holds its estimated cost,
// a settle spends the real cost in its place, a cancel frees it, a release
// and an expiry spend what was held; the status reports it all; a
// request whose cost does not fit is refused with Spend and no room is
// taken.
func TestSpendReservesAndSettlesExactly(t *testing.T) {
	b := NewBudget(spendLimits, pol10, t0)
	// 1000 prompt + 1000 completion (no history: max_tokens) at gpt4o:
	// $0.0025 + $0.01.
	d := b.Acquire(at(0), Request{PromptTokens: 1000, MaxTokens: 1000, Price: gpt4o})
	if !d.Allowed || d.Status.Spend.Held != usd(0.0125) || d.Status.Spend.Remaining != usd(1)-usd(0.0125) {
		t.Fatalf("acquire: %+v", d.Status.Spend)
	}
	b.Settle(at(sec), d.Lease, Usage{PromptTokens: 1000, CachedTokens: 1000, CompletionTokens: 10})
	want := int64(1000*1_250_000 + 10*10_000_000)
	if s := b.Status(at(sec)).Spend; s.Spent != want || s.Held != 0 || s.Remaining != usd(1)-want {
		t.Fatalf("after settle: %+v, want spent %d", s, want)
	}
	c := b.Acquire(at(sec), Request{PromptTokens: 10, MaxTokens: 10, Price: gpt4o})
	b.Cancel(at(sec), c.Lease)
	if s := b.Status(at(sec)).Spend; s.Spent != want || s.Held != 0 {
		t.Fatalf("after cancel: %+v", s)
	}
	r := b.Acquire(at(sec), Request{Reserve: 100, PromptTokens: 100, Price: gpt4o})
	b.Release(at(sec), r.Lease)
	want += 100 * 2_500_000
	x := b.Acquire(at(sec), Request{Reserve: 100, PromptTokens: 50, Price: gpt4o})
	held := int64(50*2_500_000 + 50*10_000_000)
	if s := b.Status(at(2 * sec)).Spend; s.Spent != want || s.Held != held {
		t.Fatalf("after release: %+v", s)
	}
	if b.Settle(at(40*sec), x.Lease, Usage{PromptTokens: 1}) {
		t.Fatal("settled an expired lease")
	}
	want += held
	if s := b.Status(at(40 * sec)).Spend; s.Spent != want || s.Held != 0 {
		t.Fatalf("after expiry: %+v, want spent %d", s, want)
	}
	// A request costing more than is left is refused, and takes nothing.
	left := usd(1) - want
	big := Request{PromptTokens: left/gpt4o.Input + 1, MaxTokens: 1, Price: gpt4o}
	before := b.Status(at(41 * sec))
	if d := b.Acquire(at(41*sec), big); d.Allowed || d.Reason != Spend || d.Reason.String() != "budget" {
		t.Fatalf("over budget: %+v", d)
	}
	if after := b.Status(at(41 * sec)); after.Spend != before.Spend || after.Requests != before.Requests {
		t.Fatalf("a refusal changed the key: %+v → %+v", before, after)
	}
	big.PromptTokens = left / gpt4o.Input
	big.MaxTokens = 0
	big.Reserve = big.PromptTokens
	if d := b.Acquire(at(41*sec), big); !d.Allowed || d.Status.Spend.Remaining != left-big.PromptTokens*gpt4o.Input {
		t.Fatalf("exactly what is left: %+v", d)
	}
}

// TestSpendRetryAfterIsThePeriodsEnd: a refusal for spend names the time
// until midnight in the budget's zone, when the spend resets; and the
// reset happens exactly once at that boundary.
func TestSpendRetryAfterIsThePeriodsEnd(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	l := spendLimits
	l.Period = Period{Unit: PeriodDay, Loc: tokyo}
	start := time.Date(2026, 12, 3, 23, 0, 0, 0, tokyo)
	b := NewBudget(l, pol10, start)
	d := b.Acquire(start, Request{Reserve: 400_000, PromptTokens: 400_000, Price: gpt4o}) // $1.00
	b.Settle(start, d.Lease, Usage{PromptTokens: 400_000})
	r := b.Acquire(start.Add(time.Minute), Request{Reserve: 1, PromptTokens: 1, Price: gpt4o})
	if r.Allowed || r.Reason != Spend || r.RetryAfter != 59*time.Minute {
		t.Fatalf("refusal: %+v", r)
	}
	if s := b.Status(start.Add(time.Hour - time.Nanosecond)).Spend; s.Spent != usd(1) || s.Reset != time.Nanosecond {
		t.Fatalf("before midnight: %+v", s)
	}
	midnight := start.Add(time.Hour)
	if s := b.Status(midnight).Spend; s.Spent != 0 || !s.Start.Equal(midnight) || s.Reset != 24*time.Hour {
		t.Fatalf("at midnight: %+v", s)
	}
	a := b.Acquire(midnight, Request{Reserve: 4, PromptTokens: 4, Price: gpt4o})
	b.Settle(midnight.Add(time.Hour), a.Lease, Usage{PromptTokens: 4})
	if s := b.Status(midnight.Add(23 * time.Hour)).Spend; s.Spent != 4*gpt4o.Input {
		t.Fatalf("reset twice in one day: %+v", s)
	}
}

// TestPeriodBounds: days, ISO weeks and months in a zone, short periods
// from the epoch, and the total that never ends.
func TestPeriodBounds(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 8, 12, 0, 0, 0, ny) // a Sunday, the day clocks go forward
	for _, c := range []struct {
		p          Period
		start, end time.Time
	}{
		{Period{Unit: PeriodDay, Loc: ny}, time.Date(2026, 3, 8, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny)},
		{Period{Unit: PeriodWeek, Loc: ny}, time.Date(2026, 3, 2, 0, 0, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny)},
		{Period{Unit: PeriodMonth}, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)},
		{Period{Unit: PeriodEvery, Every: time.Hour}, at.Truncate(time.Hour), at.Truncate(time.Hour).Add(time.Hour)},
	} {
		s, e := c.p.bounds(at.UnixNano())
		if s != c.start.UnixNano() || e != c.end.UnixNano() {
			t.Errorf("%s: [%s, %s), want [%s, %s)", c.p, time.Unix(0, s), time.Unix(0, e), c.start, c.end)
		}
	}
	if d := time.Duration(time.Date(2026, 3, 9, 0, 0, 0, 0, ny).UnixNano() - time.Date(2026, 3, 8, 0, 0, 0, 0, ny).UnixNano()); d != 23*time.Hour {
		t.Errorf("the day clocks go forward lasts %s", d)
	}
	if _, e := (Period{}).bounds(at.UnixNano()); e != endOfTime {
		t.Errorf("total ends at %d", e)
	}
}

// TestSpendNeverOverUnderMaxTokens: with reservation max_tokens, random
// acquires, settles within their max_tokens (cached or not), cancels,
// releases and expiries never take what is spent and held past the
// limit, and what is spent is always exactly the costs settled plus the
// holds released or expired, to the picodollar.
func TestSpendNeverOverUnderMaxTokens(t *testing.T) {
	claude := Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000}
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 7))
		l := spendLimits
		l.Reserve, l.Period = ReserveMaxTokens, Period{}
		b := NewBudget(l, pol10, t0)
		type held struct {
			id            uint64
			prompt, max   int64
			price         Price
			reservedSpend int64
			expiry        time.Time
		}
		var live []held
		var spent int64
		end := func(now time.Time, h held, settle bool, u Usage) {
			switch {
			case settle && b.Settle(now, h.id, u):
				spent += h.price.Cost(u)
			case !settle && b.Cancel(now, h.id):
			case b.Release(now, h.id):
				spent += h.reservedSpend
			default:
				t.Fatalf("lease %d is gone", h.id)
			}
		}
		now := t0
		for range 400 {
			now = now.Add(time.Duration(rng.IntN(400)) * ms)
			kept := live[:0]
			for _, h := range live { // expired: what it held is spent
				if now.Before(h.expiry) {
					kept = append(kept, h)
				} else {
					spent += h.reservedSpend
				}
			}
			live = kept
			switch k := rng.IntN(10); {
			case k < 5 || len(live) == 0:
				p := gpt4o
				if rng.IntN(2) == 0 {
					p = claude
				}
				r := Request{PromptTokens: rng.Int64N(20_000), MaxTokens: 1 + rng.Int64N(8_000), Price: p}
				if d := b.Acquire(now, r); d.Allowed {
					cost := r.PromptTokens*max(p.Input, p.CachedInput, p.CacheWrite) + r.MaxTokens*p.Output
					live = append(live, held{d.Lease, r.PromptTokens, r.MaxTokens, p, cost, now.Add(l.LeaseTTL)})
				}
			default:
				i := rng.IntN(len(live))
				h := live[i]
				live = append(live[:i], live[i+1:]...)
				u := Usage{PromptTokens: h.prompt, CompletionTokens: rng.Int64N(h.max + 1)}
				u.CachedTokens = rng.Int64N(h.prompt + 1)
				u.CacheWriteTokens = rng.Int64N(h.prompt - u.CachedTokens + 1)
				end(now, h, k < 8, u)
			}
			s := b.Status(now).Spend
			if s.Spent+s.Held > usd(1) || s.Overdraft != 0 {
				t.Fatalf("seed %d: over the budget: %+v", seed, s)
			}
			if s.Spent != spent {
				t.Fatalf("seed %d: spent %d, charged %d", seed, s.Spent, spent)
			}
		}
		for _, h := range live {
			end(now, h, true, Usage{PromptTokens: h.prompt, CachedTokens: h.prompt, CompletionTokens: h.max})
		}
		if s := b.Status(now).Spend; s.Held != 0 || s.Spent != spent || s.Spent > usd(1) {
			t.Fatalf("seed %d: end: %+v, charged %d", seed, s, spent)
		}
	}
}

// TestSpendSnapshot: format 4 carries the period, what is spent and every
// lease's hold and price; a restored key settles at the lease's price.
func TestSpendSnapshot(t *testing.T) {
	b := NewBudget(spendLimits, pol10, t0)
	d := b.Acquire(at(0), Request{PromptTokens: 100, MaxTokens: 10, Price: gpt4o})
	e := b.Acquire(at(0), Request{PromptTokens: 7, MaxTokens: 3, Price: Price{Input: 1, Output: 2}, Hits: 2})
	b.Settle(at(sec), e.Lease, Usage{PromptTokens: 7, CompletionTokens: 1})
	data, _ := b.MarshalBinary()
	if data[0] != snapshotV4 {
		t.Fatalf("format %d", data[0])
	}
	c, err := RestoreBudget(data, spendLimits, pol10)
	if err != nil {
		t.Fatal(err)
	}
	checkInternals(t, c)
	if got, want := c.Status(at(sec)).Spend, b.Status(at(sec)).Spend; got != want {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	c.Settle(at(2*sec), d.Lease, Usage{PromptTokens: 100, CompletionTokens: 5})
	if s := c.Status(at(2 * sec)).Spend; s.Spent != 7+2+100*gpt4o.Input+5*gpt4o.Output || s.Held != 0 {
		t.Fatalf("settled after restore: %+v", s)
	}
	if err := CheckSnapshot(data, spendLimits, at(sec), 0); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		if _, err := RestoreBudget(data[:i], spendLimits, pol10); err == nil {
			t.Fatalf("truncated at %d accepted", i)
		}
	}
}

func TestUSD(t *testing.T) {
	for v, want := range map[int64]string{0: "0.00", 25e12: "25.00", 1: "0.000000000001", 1_234_560_000_000: "1.23456", -15e11: "-1.50", MaxSpend: "1152921.504606846976"} {
		if got := USD(v); got != want {
			t.Errorf("USD(%d) = %s, want %s", v, got, want)
		}
	}
}
