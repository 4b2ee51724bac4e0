package limiter

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

func TestShardIsOneCacheLine(t *testing.T) {
	if s := unsafe.Sizeof(shard{}); s != 64 {
		t.Fatalf("shard is %d bytes", s)
	}
}

func tableLimits(key string) Limits {
	if key == "big" {
		return Limits{Requests: 100, Window: 10 * sec}
	}
	return Limits{Requests: 2, Concurrency: 1, Window: 10 * sec, LeaseTTL: 30 * sec}
}

func TestTableDoPeekLen(t *testing.T) {
	tb := NewTable(Policy{Buckets: 10}, tableLimits)
	if tb.Peek("a", func(*Budget) {}) || tb.Len() != 0 {
		t.Fatal("empty table")
	}
	var d Decision
	tb.Do("a", t0, func(b *Budget) { d = b.Acquire(t0, Request{Reserve: 1}) })
	if !d.Allowed || d.Status.Requests.Limit != 2 {
		t.Fatalf("%+v", d)
	}
	tb.Do("big", t0, func(b *Budget) {
		if b.Limits().Requests != 100 {
			t.Fatalf("limits %+v", b.Limits())
		}
	})
	var st Status
	if !tb.Peek("a", func(b *Budget) { st = b.Status(t0) }) || st.Requests.Remaining != 1 {
		t.Fatalf("peek %+v", st)
	}
	if tb.Len() != 2 {
		t.Fatalf("len %d", tb.Len())
	}
	var keys []string
	tb.Range(func(k string) bool { keys = append(keys, k); return true })
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "big"}) {
		t.Fatalf("keys %v", keys)
	}
	n := 0
	tb.Range(func(string) bool { n++; return false })
	if n != 1 {
		t.Fatalf("range did not stop: %d", n)
	}
	// A nil limitsFor means unlimited.
	u := NewTable(Policy{}, nil)
	u.Do("x", t0, func(b *Budget) {
		if b.Limits() != (Limits{Window: DefaultWindow, LeaseTTL: DefaultLeaseTTL}) {
			t.Fatalf("limits %+v", b.Limits())
		}
	})
}

func TestTableSweep(t *testing.T) {
	tb := NewTable(Policy{Buckets: 10}, tableLimits)
	var lease uint64
	tb.Do("leased", t0, func(b *Budget) { lease = b.Acquire(t0, Request{Reserve: 1}).Lease })
	tb.Do("counted", t0, func(b *Budget) { b.Release(t0, b.Acquire(t0, Request{Reserve: 1}).Lease) })
	tb.Do("waiting", t0, func(b *Budget) {
		b.Acquire(t0, Request{Reserve: 1})
		if !b.Acquire(t0, Request{Reserve: 1, Wait: time.Hour}).Queued {
			t.Fatal("not queued")
		}
	})
	tb.Do("empty", t0, func(*Budget) {})
	if n := tb.Sweep(t0); n != 1 || tb.Len() != 3 {
		t.Fatalf("swept %d, %d left", n, tb.Len())
	}
	// The window slid: "counted" is idle; "leased" still holds a slot.
	if n := tb.Sweep(at(11 * sec)); n != 1 || tb.Len() != 2 {
		t.Fatalf("swept %d, %d left", n, tb.Len())
	}
	// The slots expired: "leased" goes, "waiting" stays while it has a waiter.
	if n := tb.Sweep(at(31 * sec)); n != 1 || tb.Len() != 1 {
		t.Fatalf("swept %d, %d left", n, tb.Len())
	}
	if !tb.Peek("waiting", func(*Budget) {}) || tb.Peek("leased", func(*Budget) {}) {
		t.Fatal("wrong key swept")
	}
	// A key that comes back starts anew: the old lease is gone.
	tb.Do("leased", at(31*sec), func(b *Budget) {
		if b.Settle(at(31*sec), lease, Usage{}) {
			t.Fatal("old lease survived the sweep")
		}
	})
}

func TestTableTakePut(t *testing.T) {
	tb := NewTable(Policy{Buckets: 10}, tableLimits)
	var lease uint64
	tb.Do("k", t0, func(b *Budget) {
		lease = b.Acquire(t0, Request{Reserve: 7}).Lease
	})
	data, ok := tb.Take("k")
	if !ok || tb.Len() != 0 {
		t.Fatal("take")
	}
	if _, ok := tb.Take("k"); ok {
		t.Fatal("took twice")
	}
	other := NewTable(Policy{Buckets: 10}, tableLimits)
	other.Do("k", t0, func(b *Budget) { b.Acquire(t0, Request{Reserve: 1}) }) // replaced by Put
	if err := other.Put("k", []byte{9, 9}, t0); err == nil {
		t.Fatal("garbage accepted")
	}
	if err := other.Put("k", data, t0); err != nil {
		t.Fatal(err)
	}
	other.Do("k", at(sec), func(b *Budget) {
		if st := b.Status(at(sec)); st.Requests.Remaining != 1 || st.Concurrency.Remaining != 0 {
			t.Fatalf("restored %+v", st)
		}
		if !b.Settle(at(sec), lease, Usage{}) {
			t.Fatal("lease lost in the handoff")
		}
	})
	if err := other.Put("new", data, t0); err != nil || other.Len() != 2 {
		t.Fatalf("put new key: %v, len %d", err, other.Len())
	}
}

// TestTableConcurrent hammers a few keys from many goroutines (run with
// -race) and checks that the per-key limits still hold exactly.
func TestTableConcurrent(t *testing.T) {
	tb := NewTable(Policy{Buckets: 10}, func(string) Limits {
		return Limits{Requests: 50, Concurrency: 5, Window: time.Hour}
	})
	const keys, workers, tries = 8, 16, 200
	var mu sync.Mutex
	allowed := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range tries {
				key := fmt.Sprint("key-", (w+i)%keys)
				now := at(time.Duration(i) * ms)
				tb.Do(key, now, func(b *Budget) {
					d := b.Acquire(now, Request{Reserve: 1})
					if d.Allowed {
						b.Settle(now, d.Lease, Usage{})
						mu.Lock()
						allowed[key]++
						mu.Unlock()
					}
				})
				if i%50 == 0 {
					tb.Sweep(now)
					tb.Range(func(string) bool { return true })
					tb.Len()
				}
			}
		})
	}
	wg.Wait()
	for k, n := range allowed {
		if n != 50 {
			t.Errorf("%s: %d admitted, want exactly 50", k, n)
		}
	}
	if len(allowed) != keys {
		t.Errorf("%d keys", len(allowed))
	}
}

// A reload lowers and raises a key's limit: its window keeps what it
// counted (a lowered limit refuses until the window drains below it, a
// raised one admits at once), a key restored by Put and a key first seen
// take the limits in force, and Peek shows them.
func TestTableLimitsChanged(t *testing.T) {
	var rpm atomic.Int64
	rpm.Store(10)
	tb := NewTable(Policy{}, func(string) Limits {
		return Limits{Requests: rpm.Load(), Window: time.Minute}
	})
	now := time.Unix(1000, 0)
	admit := func(key string, n int) (allowed int) {
		for range n {
			if err := tb.Do(key, now, func(b *Budget) {
				if b.Acquire(now, Request{Reserve: 1}).Allowed {
					allowed++
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		return allowed
	}
	if got := admit("a", 6); got != 6 {
		t.Fatalf("under rpm 10: %d of 6 admitted", got)
	}
	rpm.Store(5)
	if got := admit("a", 2); got != 2 {
		t.Fatalf("limits changed but not announced: %d of 2 admitted, want 2 (the old rpm 10 holds)", got)
	}
	tb.LimitsChanged()
	if got := admit("a", 3); got != 0 {
		t.Fatalf("rpm lowered to 5 with 8 counted: %d admitted, want 0 (nothing until the window drains)", got)
	}
	var limit int64
	tb.Peek("a", func(b *Budget) { limit = b.Limits().Requests })
	if limit != 5 {
		t.Fatalf("Peek after the change shows rpm %d, want 5", limit)
	}
	rpm.Store(10)
	tb.LimitsChanged()
	if got := admit("a", 5); got != 2 {
		t.Fatalf("rpm raised to 10 with 8 counted: %d of 5 admitted, want exactly 2", got)
	}
	now = now.Add(61 * time.Second) // the window drains
	if got := admit("a", 12); got != 10 {
		t.Fatalf("a drained window under rpm 10: %d of 12 admitted, want 10", got)
	}
	// A key restored from a snapshot taken under the old limits, and a key
	// first seen, both take the limits in force.
	snap, ok := tb.Take("a")
	if !ok {
		t.Fatal("Take: a not held")
	}
	rpm.Store(11)
	tb.LimitsChanged()
	if err := tb.Put("a", snap, now); err != nil {
		t.Fatal(err)
	}
	if got := admit("a", 5); got != 1 {
		t.Fatalf("restored with 10 counted under rpm 11: %d of 5 admitted, want 1", got)
	}
	if got := admit("b", 12); got != 11 {
		t.Fatalf("a new key under rpm 11: %d of 12 admitted, want 11", got)
	}
}

// Limits a request sent hold against the table's until a request sends
// others: a reload (LimitsChanged) leaves them; the window keeps its
// count across both.
func TestTableSentLimitsOutlastAReload(t *testing.T) {
	var rpm atomic.Int64
	rpm.Store(100)
	tb := NewTable(Policy{}, func(string) Limits { return Limits{Requests: rpm.Load(), Window: time.Minute} })
	now := time.Unix(1000, 0)
	admit := func(sent *Limits, n int) (allowed int) {
		for range n {
			if err := tb.Do("k", now, func(b *Budget) {
				if sent != nil {
					b.SetSentLimits(*sent)
				}
				if b.Acquire(now, Request{Reserve: 1}).Allowed {
					allowed++
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
		return allowed
	}
	if got := admit(&Limits{Requests: 5}, 8); got != 5 {
		t.Fatalf("sent rpm 5: %d of 8 admitted", got)
	}
	rpm.Store(50)
	tb.LimitsChanged()
	if got := admit(nil, 3); got != 0 {
		t.Fatalf("after a reload to rpm 50, a key at its sent rpm 5: %d admitted, want 0", got)
	}
	var lim Limits
	tb.Peek("k", func(b *Budget) { lim = b.Limits() })
	if lim.Requests != 5 || lim.Window != time.Minute {
		t.Fatalf("limits after the reload: %+v, want the sent rpm 5 in the table's 1m window", lim)
	}
	if got := admit(&Limits{Requests: 7}, 4); got != 2 {
		t.Fatalf("sent rpm raised to 7 with 5 counted: %d admitted, want 2", got)
	}
	if got := admit(&Limits{Requests: 3}, 2); got != 0 {
		t.Fatalf("sent rpm lowered to 3 with 7 counted: %d admitted, want 0", got)
	}
}
