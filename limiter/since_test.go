package limiter

import (
	"testing"
	"time"
)

// copyOf is b as another member would restore it from a snapshot.
func copyOf(t *testing.T, b *Budget) *Budget {
	t.Helper()
	data, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	c, err := RestoreBudget(data, b.Limits(), b.pol)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sinceSum(b, base *Budget) (req, tok int64, buckets int) {
	b.Since(base, func(_ time.Time, r, t int64) {
		req += r
		tok += t
		buckets++
	})
	return req, tok, buckets
}

func TestSinceCountsWhatCameAfterTheBase(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	l := Limits{Requests: 1000, Tokens: 1_000_000, Concurrency: 1000, Window: time.Minute}
	b := NewBudget(l, &Policy{Buckets: 6}, t0)
	for i := range 7 { // 7 admissions of 10 tokens over the first 14 s
		b.Acquire(t0.Add(time.Duration(i)*2*time.Second), Request{Reserve: 10})
	}
	base := copyOf(t, b)
	// After the base: 5 admissions of 3 tokens, spread over 25 s, some in
	// the base's newest bucket, some in later buckets.
	for i := range 5 {
		b.Acquire(t0.Add(12*time.Second+time.Duration(i)*5*time.Second), Request{Reserve: 3})
	}
	if req, tok, _ := sinceSum(b, base); req != 5 || tok != 15 {
		t.Errorf("since the base: %d requests, %d tokens; want exactly 5 and 15", req, tok)
	}
	if req, tok, _ := sinceSum(b, nil); req != 12 || tok != 85 {
		t.Errorf("with no base: %d requests, %d tokens; want all 12 and 85", req, tok)
	}
	if req, tok, n := sinceSum(b, b); req != 0 || tok != 0 || n != 0 {
		t.Errorf("against itself: %d requests, %d tokens in %d buckets; want nothing", req, tok, n)
	}
	// Each unit is reported in its own bucket: what follows a bucket's
	// end is never reported at its start.
	var last time.Time
	b.Since(base, func(at time.Time, _, _ int64) {
		if !at.After(last) {
			t.Errorf("bucket %v reported after %v: want oldest first, each once", at, last)
		}
		last = at
		if at.After(t0.Add(32 * time.Second)) {
			t.Errorf("bucket at %v: no admission was that late", at)
		}
	})
}

func TestSinceWithADifferentWidthCountsEverything(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := NewBudget(Limits{Requests: 100, Window: time.Minute}, &Policy{Buckets: 6}, t0)
	base := NewBudget(Limits{Requests: 100, Window: time.Hour}, &Policy{Buckets: 6}, t0)
	base.Acquire(t0, Request{Reserve: 1})
	b.Acquire(t0, Request{Reserve: 1})
	b.Acquire(t0.Add(time.Second), Request{Reserve: 1})
	if req, _, _ := sinceSum(b, base); req != 2 {
		t.Errorf("base of another width: %d requests, want all 2 (never fewer)", req)
	}
}

func TestSinceNeverCountsACreditAsNegative(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := NewBudget(Limits{Requests: 100, Tokens: 10_000, Window: time.Minute}, &Policy{Buckets: 6}, t0)
	d := b.Acquire(t0, Request{Reserve: 500})
	base := copyOf(t, b)
	b.Settle(t0.Add(time.Second), d.Lease, Usage{PromptTokens: 10, CompletionTokens: 10}) // credits 480 tokens
	b.Acquire(t0.Add(2*time.Second), Request{Reserve: 7})
	if req, tok, _ := sinceSum(b, base); req != 1 || tok != 0 {
		// The new 7 tokens and the credit of 480 share a bucket: the
		// bucket holds less than the base, so nothing is reported for
		// tokens — never a negative amount.
		t.Errorf("after a credit: %d requests, %d tokens; want 1 and 0", req, tok)
	}
}
