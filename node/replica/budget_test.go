package replica

import (
	"context"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// budgetSnapshot is the snapshot of a key that spent at t0 under a
// budget of period unit (month or total), and, for a month, the end of
// that key's period.
func budgetSnapshot(t *testing.T, t0 time.Time, unit limiter.PeriodUnit) ([]byte, time.Time) {
	t.Helper()
	l := limiter.Limits{Requests: 10, Window: time.Minute, Spend: 1e12, Period: limiter.Period{Unit: unit}}
	b := limiter.NewBudget(l, nil, t0)
	d := b.Acquire(t0, limiter.Request{PromptTokens: 10, Reserve: 10, Price: limiter.Price{Input: 1}})
	b.Settle(t0, d.Lease, limiter.Usage{PromptTokens: 10})
	data, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	y, m, _ := t0.UTC().Date()
	return data, time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}

// A budget's spend lasts its period, not a window: a backup's copy of a key
// that spent outlives the horizon until the period ends, as does its
// checkpoint in a scan, and Redis keeps it that long; a copy of a key
// without spend goes at the horizon as before.
func TestBudgetCopiesLastTheirPeriod(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	spent, end := budgetSnapshot(t, t0, limiter.PeriodMonth)
	if got := limiter.SnapshotKeepUntil(spent); !got.Equal(end) {
		t.Fatalf("keep until %v, want %v", got, end)
	}
	plainB := limiter.NewBudget(limiter.Limits{Requests: 10}, nil, t0)
	plainB.Acquire(t0, limiter.Request{Reserve: 1})
	plain, _ := plainB.MarshalBinary()
	if !limiter.SnapshotKeepUntil(plain).IsZero() {
		t.Fatal("a key without spend kept past its horizon")
	}
	var s Store
	if err := s.Put("t:budget", spent, t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("t:plain", plain, t0); err != nil {
		t.Fatal(err)
	}
	const horizon = 3 * time.Minute
	s.Expire(t0.Add(time.Hour), horizon)
	if _, ok := s.Take("t:plain"); ok {
		t.Fatal("the plain copy outlived its horizon")
	}
	s.Expire(end.Add(-time.Second), horizon)
	if s.Len() != 1 {
		t.Fatal("the budget's copy went before its period ended")
	}
	s.Expire(end, horizon)
	if s.Len() != 0 {
		t.Fatal("the budget's copy outlived its period")
	}

	now := time.Now() // Redis's clock: a total budget, whose copy Redis keeps maxBudgetTTL
	spent, _ = budgetSnapshot(t, now, limiter.PeriodTotal)
	cp := &RedisCheckpoint{Client: startRedis(t), Prefix: "tr:"}
	ctx := context.Background()
	if err := cp.Save(ctx, now, map[string][]byte{"t:budget": spent, "t:plain": plain}); err != nil {
		t.Fatal(err)
	}
	if ttl := cp.Client.TTL(ctx, "tr:t:budget").Val(); ttl < maxBudgetTTL-time.Minute || ttl > maxBudgetTTL {
		t.Fatalf("the budget's checkpoint lives %v", ttl)
	}
	if ttl := cp.Client.TTL(ctx, "tr:t:plain").Val(); ttl > 3*time.Minute {
		t.Fatalf("the plain checkpoint lives %v", ttl)
	}
	pl, keys, err := ScanCheckpoint(ctx, cp, func(string) int { return 0 }, now.Add(time.Hour), horizon)
	if err != nil || keys != 1 || pl == nil {
		t.Fatalf("an hour later the scan keeps %d keys (%v), want the budget's", keys, err)
	}
}
