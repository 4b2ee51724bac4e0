package fallback

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/limiter"
)

// fakeOwner acknowledges charges while up and fails them while down.
type fakeOwner struct {
	down     atomic.Bool
	mu       sync.Mutex
	charges  []Charge
	failures atomic.Int64
}

func (f *fakeOwner) charge(_ context.Context, _ string, c Charge) (limiter.Status, bool, error) {
	if f.down.Load() {
		f.failures.Add(1)
		return limiter.Status{}, false, errors.New("peer down")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charges = append(f.charges, c)
	return limiter.Status{}, true, nil
}

func (f *fakeOwner) charged() []Charge {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Charge(nil), f.charges...)
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// admit makes n fallback admissions of key on d's degraded share and
// records them as debts, as the router does.
func admit(t *testing.T, s *State, d *Debts, key string, n int) {
	t.Helper()
	for range n {
		if _, reason, _ := s.Acquire(key, limiter.Limits{Requests: 100}, 2, 1, 1); reason != limiter.None {
			t.Fatalf("refused: %v", reason)
		}
		d.Recorded(key, 1)
	}
}

// The loop runs on its own ticker only while debts are owed: it repays
// them once the owner is back, then ends; Close ends it at any time. No
// goroutine outlives either.
func TestDebtLoopRunsWhileOwedAndCloses(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := &fakeOwner{}
	f.down.Store(true)
	s := NewState(time.Now, 0)
	d, err := NewDebts(s, DebtsConfig{
		Charge: f.charge, Limits: func(string) limiter.Limits { return limiter.Limits{Requests: 100} },
		Now: time.Now, MaxWait: time.Second, Interval: time.Millisecond,
		Registry: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	admit(t, s, d, "t:acme", 3)
	waitFor(t, "failed charges", func() bool { return f.failures.Load() >= 3 })
	f.down.Store(false)
	waitFor(t, "the debts repaid and the loop ended", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return !d.running
	})
	if got := f.charged(); len(got) != 1 || got[0].Requests != 3 {
		t.Fatalf("charged %v, want one charge of 3", got)
	}
	// Owed again while down: Close stops the loop mid-way.
	f.down.Store(true)
	admit(t, s, d, "t:acme", 1)
	d.Close()
	d.Close()
}
