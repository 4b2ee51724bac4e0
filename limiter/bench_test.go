package limiter

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// benchLimits limit all three dimensions, high enough that the benchmarks
// measure admissions, not refusals.
var benchLimits = Limits{Requests: 1 << 40, Tokens: 1 << 46, Concurrency: 1000}

// BenchmarkAcquireComplete is the hot path for one key: admit a request
// (all three dimensions checked and charged, a lease created), then settle
// it (credit, average, slot freed). The fake clock advances 100µs per
// operation, so the window slides a bucket every 10 000 operations.
func BenchmarkAcquireComplete(b *testing.B) {
	bud := NewBudget(benchLimits, nil, t0)
	now := t0
	r := Request{PromptTokens: 500, MaxTokens: 256}
	u := Usage{PromptTokens: 500, CompletionTokens: 120}
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100 * time.Microsecond)
		d := bud.Acquire(now, r)
		if !d.Allowed {
			b.Fatalf("refused: %+v", d)
		}
		bud.Settle(now, d.Lease, u)
	}
}

// BenchmarkAcquireCompleteHits is BenchmarkAcquireComplete for an
// admission as Envoy's rate limit service makes it: several hits, a lease
// id the caller chose (the ids a hash would give), repeated once (the
// repeat charges nothing), then settled by that id.
func BenchmarkAcquireCompleteHits(b *testing.B) {
	bud := NewBudget(benchLimits, nil, t0)
	now := t0
	r := Request{PromptTokens: 500, MaxTokens: 256, Hits: 3}
	u := Usage{PromptTokens: 500, CompletionTokens: 120}
	id := uint64(0x9e3779b97f4a7c15)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100 * time.Microsecond)
		id = id*6364136223846793005 + 1442695040888963407
		r.Lease = id | 1
		d := bud.Acquire(now, r)
		if !d.Allowed || bud.Acquire(now, r).Lease != d.Lease {
			b.Fatalf("refused or not repeated: %+v", d)
		}
		bud.Settle(now, d.Lease, u)
	}
}

// BenchmarkTableParallel runs acquire+settle through a Table of 10 000 keys
// from GOMAXPROCS goroutines (use -cpu 1,2,… to see the scaling). Each
// goroutine has its own fake clock and picks keys pseudo-randomly.
func BenchmarkTableParallel(b *testing.B) {
	const nkeys = 10_000
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%05d", i)
	}
	tb := NewTable(Policy{}, func(string) Limits { return benchLimits })
	for _, k := range keys { // warm up: every key has admitted once
		tb.Do(k, t0, func(bud *Budget) {
			bud.Settle(t0, bud.Acquire(t0, Request{PromptTokens: 1}).Lease, Usage{})
		})
	}
	var seed atomic.Uint64
	r := Request{PromptTokens: 500, MaxTokens: 256}
	u := Usage{PromptTokens: 500, CompletionTokens: 120}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := seed.Add(0x9e3779b97f4a7c15) | 1 // xorshift state
		now := t0
		for pb.Next() {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			now = now.Add(time.Microsecond)
			tb.Do(keys[x%nkeys], now, func(bud *Budget) {
				d := bud.Acquire(now, r)
				bud.Settle(now, d.Lease, u)
			})
		}
	})
}

// BenchmarkBytesPerKey measures the heap held per live key: a Table of
// 100 000 keys with the default window (60 s in 60 buckets), each with
// admissions outstanding (their leases held), including the table's maps
// and the key strings. Reported as B/key; the target is ≤ 2048.
func BenchmarkBytesPerKey(b *testing.B) {
	for _, leases := range []int{1, 4} {
		b.Run(fmt.Sprintf("leases=%d", leases), func(b *testing.B) {
			const nkeys = 100_000
			keys := make([]string, nkeys)
			for i := range keys {
				keys[i] = fmt.Sprintf("tenant-%06d", i)
			}
			lim := Limits{Requests: 600, Tokens: 2_000_000, Concurrency: 50}
			var perKey float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tb := NewTable(Policy{}, func(string) Limits { return lim })
				for i, k := range keys {
					now := t0.Add(time.Duration(i) * time.Microsecond)
					tb.Do(k, now, func(bud *Budget) {
						for range leases {
							if d := bud.Acquire(now, Request{PromptTokens: 100}); !d.Allowed {
								b.Fatalf("refused: %+v", d)
							}
						}
					})
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perKey = float64(after.HeapAlloc-before.HeapAlloc) / nkeys
				if tb.Len() != nkeys {
					b.Fatal("keys lost")
				}
				runtime.KeepAlive(tb)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// BenchmarkTableDoFull measures Do for a new key at a full table (100 000
// keys, MaxKeys 100 000): "evict" when every key is idle (the new key takes
// an idle key's place), "refuse" when every key holds counted units (the
// bounded scan finds none: ErrTableFull).
func BenchmarkTableDoFull(b *testing.B) {
	const nkeys = 100_000
	lim := Limits{Requests: 1000, Window: 10 * sec}
	for _, mode := range []string{"evict", "refuse"} {
		b.Run(mode, func(b *testing.B) {
			tb := NewTable(Policy{Buckets: 10}, func(string) Limits { return lim })
			tb.SetMaxKeys(nkeys)
			for i := range nkeys {
				tb.Do(fmt.Sprintf("held-%06d", i), t0, func(bud *Budget) {
					bud.Settle(t0, bud.Acquire(t0, Request{Reserve: 1}).Lease, Usage{})
				})
			}
			now := t0
			if mode == "evict" {
				now = at(time.Minute) // every window emptied
			}
			keys := make([]string, 1<<20) // new keys: each Do evicts until they wrap
			for i := range keys {
				keys[i] = fmt.Sprintf("new-%06d", i)
			}
			b.ReportAllocs()
			i, refused := 0, 0
			for b.Loop() {
				if err := tb.Do(keys[i&(len(keys)-1)], now, func(*Budget) {}); err != nil {
					refused++
				}
				i++
			}
			if tb.Len() > nkeys || (mode == "refuse") != (refused == i) {
				b.Fatalf("%s: %d refused of %d, %d keys", mode, refused, i, tb.Len())
			}
		})
	}
}
