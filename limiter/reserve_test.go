package limiter

import (
	"testing"
	"time"
)

// An overdraft, step by step: settles whose usage exceeds the reservation
// take the token window past its limit; Status shows by how much (counted
// − limit) with Remaining 0, SettleOverdrawn says how much each settle
// added, and both fall back to 0 as the window drains.
func TestOverdraftSteps(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1000, Concurrency: 10, Window: 10 * sec}, pol10, t0)
	type ostep struct {
		now        time.Duration // since t0
		reserve    int64         // > 0: an acquire of that many tokens (leases[i] in order)
		settle     int           // else: settle leases[settle-1] ...
		used       int64         // ... with this usage
		overdrawn  int64         // SettleOverdrawn's second result
		remaining  int64         // tokens' Status after the step
		overdraft  int64
		allowMore1 bool // an acquire of 1 token would be admitted now
	}
	var leases []uint64
	for i, s := range []ostep{
		{0, 300, 0, 0, 0, 700, 0, true},
		{0, 300, 0, 0, 0, 400, 0, true},
		{0, 300, 0, 0, 0, 100, 0, true},
		// Within the limit: 300 → 350 leaves 50.
		{1 * sec, 0, 1, 350, 0, 50, 0, true},
		// 300 → 500: 200 more, 150 of them past the limit.
		{1 * sec, 0, 2, 500, 150, 0, 150, false},
		// 300 → 320: 20 more, all past it (counted 1170).
		{2 * sec, 0, 3, 320, 20, 0, 170, false},
		// A settle of an unknown lease counts nothing.
		{2 * sec, 0, 3, 5000, 0, 0, 170, false},
		// The bucket of t0 (holding all 1170) leaves at t0+11s.
		{11 * sec, 0, 0, 0, 0, 1000, 0, true},
	} {
		now := at(s.now)
		switch {
		case s.reserve > 0:
			d := b.Acquire(now, Request{Reserve: s.reserve})
			if !d.Allowed {
				t.Fatalf("step %d: acquire of %d refused: %+v", i, s.reserve, d)
			}
			leases = append(leases, d.Lease)
		case s.settle > 0:
			_, over := b.SettleOverdrawn(now, leases[s.settle-1], Usage{PromptTokens: 100, CompletionTokens: s.used - 100})
			if over != s.overdrawn {
				t.Fatalf("step %d: SettleOverdrawn = %d, want %d", i, over, s.overdrawn)
			}
		}
		st := b.Status(now).Tokens
		if st.Remaining != s.remaining || st.Overdraft != s.overdraft {
			t.Fatalf("step %d at t0+%v: tokens %+v, want remaining %d overdraft %d", i, s.now, st, s.remaining, s.overdraft)
		}
		if st.Overdraft > 0 && st.Limit-st.Remaining+st.Overdraft != b.sumTok {
			t.Fatalf("step %d: overdraft %d is not counted %d − limit %d", i, st.Overdraft, b.sumTok, st.Limit)
		}
		if got := b.fitsNow(now, 1); got != s.allowMore1 {
			t.Fatalf("step %d: a token fits = %v, want %v", i, got, s.allowMore1)
		}
	}
}

// fitsNow reports whether n tokens would be admitted at now, changing
// nothing (the admission, if made, is cancelled).
func (b *Budget) fitsNow(now time.Time, n int64) bool {
	d := b.Acquire(now, Request{Reserve: n})
	if d.Allowed {
		b.Cancel(now, d.Lease)
	}
	return d.Allowed
}

// Requests and slots can be overdrawn too: a debt charged past the request
// limit, a concurrency limit lowered below the slots in use. Unlimited
// dimensions never are.
func TestOverdraftOtherDimensions(t *testing.T) {
	b := NewBudget(Limits{Requests: 10, Concurrency: 4, Window: 10 * sec}, pol10, t0)
	for range 4 {
		if d := b.Acquire(t0, Request{Reserve: 5}); !d.Allowed {
			t.Fatalf("acquire refused: %+v", d)
		}
	}
	b.Charge(t0, t0, 9, 100)
	b.SetLimits(Limits{Requests: 10, Concurrency: 1, Window: 10 * sec})
	st := b.Status(t0)
	want := Status{
		Requests:    DimStatus{Limit: 10, Remaining: 0, Overdraft: 3, Reset: 11 * sec},
		Tokens:      DimStatus{Reset: 11 * sec}, // unlimited: 120 counted, no overdraft
		Concurrency: DimStatus{Limit: 1, Remaining: 0, Overdraft: 3, Reset: DefaultLeaseTTL},
	}
	if st != want {
		t.Fatalf("status %+v, want %+v", st, want)
	}
}

// ReserveMaxTokens against ReserveEstimate, the trade-off of ReserveMode:
// a key whose history says completions are short (an estimate far below
// max_tokens) admits many requests at once; each then uses its whole
// max_tokens. Under ReserveEstimate the settles take the window past the
// limit, by at most concurrency × (max_tokens − estimate); under
// ReserveMaxTokens what is counted never exceeds the limit, at any step,
// and fewer requests are admitted.
func TestReserveMaxTokensNeverOverdraws(t *testing.T) {
	const (
		limit       = 10_000
		concurrency = 50
		prompt      = 20
		maxTokens   = 400
	)
	run := func(mode ReserveMode) (admitted int, maxCounted, overdrawn int64) {
		b := NewBudget(Limits{Tokens: limit, Concurrency: concurrency, Window: 10 * sec, Reserve: mode}, pol10, t0)
		// History: completions of 10 tokens, so the estimate is
		// prompt + ceil(1.5 × 10) = 35 against a bound of 420.
		for range 20 {
			d := b.Acquire(t0, Request{PromptTokens: prompt, MaxTokens: maxTokens})
			b.Settle(t0, d.Lease, Usage{PromptTokens: prompt, CompletionTokens: 10})
		}
		base := b.sumTok
		check := func(what string) {
			maxCounted = max(maxCounted, b.sumTok)
			st := b.Status(at(sec)).Tokens
			if st.Overdraft != max(b.sumTok-limit, 0) {
				t.Fatalf("%v, %s: overdraft %d, counted %d", mode, what, st.Overdraft, b.sumTok)
			}
		}
		var leases []uint64
		for range 200 { // many at once: every acquire before any settle
			d := b.Acquire(at(sec), Request{PromptTokens: prompt, MaxTokens: maxTokens})
			if !d.Allowed {
				continue
			}
			leases = append(leases, d.Lease)
			check("acquire")
		}
		for _, id := range leases { // each uses its whole max_tokens
			_, over := b.SettleOverdrawn(at(sec), id, Usage{PromptTokens: prompt, CompletionTokens: maxTokens})
			overdrawn += over
			check("settle")
		}
		if base > limit {
			t.Fatalf("the history alone counts %d", base)
		}
		return len(leases), maxCounted, overdrawn
	}

	n, counted, over := run(ReserveMaxTokens)
	if counted > limit || over != 0 {
		t.Errorf("max_tokens: counted up to %d of %d, %d tokens overdrawn; want never past the limit", counted, limit, over)
	}
	if n == 0 {
		t.Fatalf("max_tokens admitted nothing")
	}
	ne, countedE, overE := run(ReserveEstimate)
	if countedE <= limit || overE != countedE-limit {
		t.Errorf("estimate: counted up to %d of %d, %d overdrawn; want an overdraft, all of it counted", countedE, limit, overE)
	}
	if bound := int64(concurrency) * (prompt + maxTokens - (prompt + 15)); overE > bound {
		t.Errorf("estimate: overdrawn %d, over the bound concurrency × (max_tokens − estimate) = %d", overE, bound)
	}
	if ne <= n {
		t.Errorf("estimate admitted %d, max_tokens %d: estimate should admit more", ne, n)
	}
	t.Logf("max_tokens: %d admitted, counted ≤ %d; estimate: %d admitted, counted up to %d (%d overdrawn)", n, counted, ne, countedE, overE)
}

// What each mode reserves: the estimate, the whole bound, and a Reserve
// (a chain's key following its first) raised to the bound only under
// ReserveMaxTokens and only when the request gives max_tokens (a request
// without a completion reserves its prompt exactly).
func TestReserveModeEstimates(t *testing.T) {
	withHistory := func(mode ReserveMode) *Budget {
		b := NewBudget(Limits{Window: 10 * sec, Reserve: mode}, pol10, t0)
		d := b.Acquire(t0, Request{PromptTokens: 1})
		b.Settle(t0, d.Lease, Usage{CompletionTokens: 10}) // average completion 10: estimate +15
		return b
	}
	for _, c := range []struct {
		mode ReserveMode
		r    Request
		want int64
	}{
		{ReserveEstimate, Request{PromptTokens: 100, MaxTokens: 500}, 115},
		{ReserveEstimate, Request{PromptTokens: 100}, 115},
		{ReserveEstimate, Request{PromptTokens: 100, MaxTokens: 500, Reserve: 40}, 40},
		{ReserveMaxTokens, Request{PromptTokens: 100, MaxTokens: 500}, 600},
		{ReserveMaxTokens, Request{PromptTokens: 100}, 1100}, // pol10's default max_tokens
		{ReserveMaxTokens, Request{PromptTokens: 100, MaxTokens: 500, Reserve: 115}, 600},
		{ReserveMaxTokens, Request{PromptTokens: 100, MaxTokens: 500, Reserve: 900}, 900},
		{ReserveMaxTokens, Request{PromptTokens: 100, Reserve: 100}, 100},
		{ReserveMaxTokens, Request{Reserve: 7}, 7},
		{ReserveMode(9), Request{PromptTokens: 100, MaxTokens: 500}, 115}, // unknown: estimate
	} {
		b := withHistory(c.mode)
		if got := b.Acquire(at(sec), c.r).Reserved; got != c.want {
			t.Errorf("%v, %+v: reserved %d, want %d", c.mode, c.r, got, c.want)
		}
	}
	if got := NewBudget(Limits{Reserve: ReserveMode(9)}, nil, t0).Limits().Reserve; got != ReserveEstimate {
		t.Errorf("an unknown mode normalises to %v", got)
	}
	if ReserveEstimate.String() != "estimate" || ReserveMaxTokens.String() != "max_tokens" {
		t.Errorf("names %q, %q", ReserveEstimate, ReserveMaxTokens)
	}
}

// A reload (LimitsChanged) carries a key's ReserveMode as it carries its
// numbers, to a key whose numbers a request sent too (they stay).
func TestTableReloadCarriesReserveMode(t *testing.T) {
	var mode ReserveMode
	tb := NewTable(Policy{DefaultMaxTokens: 1000}, func(string) Limits {
		return Limits{Tokens: 100_000, Window: time.Minute, Reserve: mode}
	})
	now := time.Unix(1000, 0)
	reserve := func(key string, sent *Limits) (got int64, lim Limits) {
		if err := tb.Do(key, now, func(b *Budget) {
			if sent != nil {
				b.SetSentLimits(*sent)
			}
			d := b.Acquire(now, Request{PromptTokens: 10, MaxTokens: 200})
			b.Settle(now, d.Lease, Usage{PromptTokens: 10, CompletionTokens: 2})
			got, lim = d.Reserved, b.Limits()
		}); err != nil {
			t.Fatal(err)
		}
		return got, lim
	}
	sent := &Limits{Tokens: 50_000}
	reserve("plain", nil)
	reserve("sent", sent)
	if got, _ := reserve("plain", nil); got != 13 { // 10 + ceil(1.5 × 2)
		t.Fatalf("estimate: reserved %d", got)
	}
	mode = ReserveMaxTokens
	tb.LimitsChanged()
	if got, lim := reserve("plain", nil); got != 210 || lim.Reserve != ReserveMaxTokens {
		t.Fatalf("after a reload to max_tokens: reserved %d, limits %+v", got, lim)
	}
	if got, lim := reserve("sent", nil); got != 210 || lim.Tokens != 50_000 {
		t.Fatalf("a key with sent limits after the reload: reserved %d, limits %+v (want max_tokens and its sent tpm)", got, lim)
	}
	mode = ReserveEstimate
	tb.LimitsChanged()
	if got, _ := reserve("sent", sent); got != 10+3 {
		t.Fatalf("back to estimate: reserved %d", got)
	}
}

// TestEmbeddingsLeaveTheAverage: a request that reserved its prompt alone
// and completed nothing (an embedding) does not pull the key's average
// completion down: the next chat request reserves as before.
func TestEmbeddingsLeaveTheAverage(t *testing.T) {
	b := NewBudget(Limits{Tokens: 1 << 30}, pol10, t0)
	d := b.Acquire(t0, Request{PromptTokens: 100, MaxTokens: 1000})
	b.Settle(t0, d.Lease, Usage{PromptTokens: 100, CompletionTokens: 200}) // average 200
	for range 20 {
		e := b.Acquire(t0, Request{PromptTokens: 50, Reserve: 50})
		b.Settle(t0, e.Lease, Usage{PromptTokens: 50})
	}
	if c := b.Acquire(t0, Request{PromptTokens: 100, MaxTokens: 1000}); c.Reserved != 100+300 {
		t.Fatalf("reserved %d after 20 embeddings, want 400 (1.5 × the chat average of 200)", c.Reserved)
	}
}
