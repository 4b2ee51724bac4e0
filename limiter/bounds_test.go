package limiter

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fixedIDs returns a Policy.IDs source handing out vals in order, then
// 1<<63 + n for the n-th call past them.
func fixedIDs(vals ...uint64) func() uint64 {
	n := 0
	return func() uint64 {
		n++
		if n <= len(vals) {
			return vals[n-1]
		}
		return 1<<63 + uint64(n)
	}
}

// TestRandomLeaseIDs: with Policy.IDs set, lease ids are the source's
// values, a 0 or an id a live lease holds is drawn again, and a snapshot
// (format 2) carries them through a restore, where they still settle.
func TestRandomLeaseIDs(t *testing.T) {
	const a, c = 0xdeadbeefcafef00d, 0x0123456789abcdef
	pol := &Policy{Buckets: 10, IDs: fixedIDs(a, 0, a, c)}
	b := NewBudget(Limits{Requests: 10}, pol, t0)
	d1 := b.Acquire(t0, Request{Reserve: 1})
	d2 := b.Acquire(t0, Request{Reserve: 1})
	if d1.Lease != a || d2.Lease != c {
		t.Fatalf("lease ids %#x %#x, want %#x %#x (0 and the duplicate redrawn)", d1.Lease, d2.Lease, uint64(a), uint64(c))
	}
	data, _ := b.MarshalBinary()
	if data[0] != snapshotV2 {
		t.Fatalf("format %d, want %d for random ids", data[0], snapshotV2)
	}
	r, err := RestoreBudget(data, Limits{Requests: 10}, pol)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := r.MarshalBinary()
	if string(again) != string(data) {
		t.Fatal("snapshot does not round-trip")
	}
	if !r.Settle(at(sec), a, Usage{}) || !r.Settle(at(sec), c, Usage{}) {
		t.Fatal("random lease ids lost in the restore")
	}
	if r.Settle(at(sec), 1, Usage{}) {
		t.Fatal("a counted id settled a lease it was never given")
	}
}

// TestCountedLeaseIDsKeepFormat1: without Policy.IDs, ids count 1, 2, … and
// snapshots stay in format 1, which an older build reads.
func TestCountedLeaseIDsKeepFormat1(t *testing.T) {
	b := NewBudget(Limits{Requests: 10}, pol10, t0)
	if d := b.Acquire(t0, Request{Reserve: 1}); d.Lease != 1 {
		t.Fatalf("lease %d", d.Lease)
	}
	if d := b.Acquire(t0, Request{Reserve: 1}); d.Lease != 2 {
		t.Fatalf("lease %d", d.Lease)
	}
	if data, _ := b.MarshalBinary(); data[0] != snapshotV1 {
		t.Fatalf("format %d", data[0])
	}
}

// TestRandomIDSourceStuck: a source that only returns one value still
// yields distinct non-zero ids (the sequence takes over).
func TestRandomIDSourceStuck(t *testing.T) {
	pol := &Policy{IDs: func() uint64 { return 7 }}
	b := NewBudget(Limits{}, pol, t0)
	seen := map[uint64]bool{}
	for range 20 {
		d := b.Acquire(t0, Request{Reserve: 1})
		if d.Lease == 0 || seen[d.Lease] {
			t.Fatalf("lease id %d repeated or zero", d.Lease)
		}
		seen[d.Lease] = true
	}
	if len(seen) != 20 {
		t.Fatalf("%d ids", len(seen))
	}
}

// TestPutRejectsFutureState: a snapshot whose window head or lease expiry
// lies beyond now + the clock-skew bound is refused with ErrFutureState and
// leaves the table as it was; one within the bound is applied.
func TestPutRejectsFutureState(t *testing.T) {
	y2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := Limits{Requests: 5}
	future := NewBudget(lim, pol10, y2200)
	future.Acquire(y2200, Request{Reserve: 1})
	bad, _ := future.MarshalBinary()

	tb := NewTable(Policy{Buckets: 10}, func(string) Limits { return lim })
	tb.Do("k", t0, func(b *Budget) { b.Acquire(t0, Request{Reserve: 1}) })
	err := tb.Put("k", bad, t0)
	if !errors.Is(err, ErrFutureState) || !strings.Contains(err.Error(), "2200-01-01") {
		t.Fatalf("year-2200 snapshot: %v", err)
	}
	if err := tb.Put("new", bad, t0); !errors.Is(err, ErrFutureState) || tb.Len() != 1 {
		t.Fatalf("new key: %v, len %d", err, tb.Len())
	}
	tb.Peek("k", func(b *Budget) {
		if st := b.Status(t0); st.Requests.Remaining != 4 {
			t.Fatalf("state changed by a refused put: %+v", st)
		}
	})

	// A lease expiring beyond now + TTL + skew, with a sane window head.
	skewed := NewBudget(lim, pol10, t0)
	skewed.Acquire(t0, Request{Reserve: 1})
	for id, l := range skewed.leases {
		l.expiry = at(DefaultLeaseTTL + 2*DefaultMaxClockSkew).UnixNano()
		skewed.leases[id] = l
		skewed.maxExp = l.expiry
	}
	data, _ := skewed.MarshalBinary()
	if err := tb.Put("k", data, t0); !errors.Is(err, ErrFutureState) {
		t.Fatalf("far lease expiry: %v", err)
	}

	// Up to the skew ahead is fine: a peer whose clock runs 59 s fast.
	ahead := NewBudget(lim, pol10, at(59*sec))
	ahead.Acquire(at(59*sec), Request{Reserve: 1})
	data, _ = ahead.MarshalBinary()
	if err := tb.Put("k", data, t0); err != nil {
		t.Fatalf("59 s ahead: %v", err)
	}
	tb.SetMaxClockSkew(10 * sec)
	if err := tb.Put("k", data, t0); !errors.Is(err, ErrFutureState) {
		t.Fatalf("59 s ahead with a 10 s bound: %v", err)
	}
}

// TestFarFutureDebtStaysInWindow: a debt dated in the year 2200 is charged
// to the newest bucket, so the key's retry-after stays within one window.
func TestFarFutureDebtStaysInWindow(t *testing.T) {
	lim := Limits{Requests: 2, Window: 60 * sec}
	b := NewBudget(lim, pol10, t0)
	y2200 := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
	if !b.Charge(t0, y2200, 5, 0) {
		t.Fatal("debt dropped")
	}
	d := b.Acquire(t0, Request{Reserve: 1})
	if d.Allowed || d.Reason != Requests {
		t.Fatalf("admitted past the debt: %+v", d)
	}
	if d.RetryAfter <= 0 || d.RetryAfter > lim.Window+lim.Window/10 {
		t.Fatalf("retry after %v, want within the window (+1 bucket)", d.RetryAfter)
	}
	if st := b.Status(t0); st.Requests.Reset > lim.Window+lim.Window/10 {
		t.Fatalf("reset %v", st.Requests.Reset)
	}
	if !b.Idle(at(lim.Window + lim.Window/10)) {
		t.Fatal("debt still counted a window later")
	}
}

// sameShardKeys returns n keys of tb that hash to the shard of key.
func sameShardKeys(tb *Table, key string, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprintf("other-%d", i)
		if tb.shard(k) == tb.shard(key) {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestTableMaxKeys: a new key at a full table is refused with ErrTableFull
// while every key holds counted units, takes an idle key's place once one
// of its shard is idle, and Put is never refused.
func TestTableMaxKeys(t *testing.T) {
	lim := Limits{Requests: 10, Window: 10 * sec}
	tb := NewTable(Policy{Buckets: 10}, func(string) Limits { return lim })
	tb.SetMaxKeys(3)
	held := sameShardKeys(tb, "new", 3)
	for _, k := range held {
		if err := tb.Do(k, t0, func(b *Budget) { b.Settle(t0, b.Acquire(t0, Request{Reserve: 1}).Lease, Usage{}) }); err != nil {
			t.Fatal(err)
		}
	}
	called := false
	err := tb.Do("new", t0, func(*Budget) { called = true })
	if !errors.Is(err, ErrTableFull) || err.Error() != "too many keys held (max_keys 3)" || called {
		t.Fatalf("full table: %v (fn called %v)", err, called)
	}
	if tb.Len() != 3 {
		t.Fatalf("len %d", tb.Len())
	}
	for _, k := range held { // nothing forgotten
		tb.Peek(k, func(b *Budget) {
			if b.Status(t0).Requests.Remaining != 9 {
				t.Fatalf("%s lost its count", k)
			}
		})
	}
	// An existing key is still served.
	if err := tb.Do(held[0], t0, func(*Budget) {}); err != nil {
		t.Fatal(err)
	}
	// Once the windows emptied, a new key evicts an idle one.
	later := at(lim.Window + 2*sec)
	if err := tb.Do("new", later, func(*Budget) { called = true }); err != nil || !called {
		t.Fatalf("idle key not evicted: %v", err)
	}
	if tb.Len() != 3 {
		t.Fatalf("len %d after eviction", tb.Len())
	}
	// Put enters past the cap: its units must not be forgotten.
	src := NewBudget(lim, &Policy{Buckets: 10}, later)
	src.Acquire(later, Request{Reserve: 1})
	data, _ := src.MarshalBinary()
	if err := tb.Put("restored", data, later); err != nil || tb.Len() != 4 {
		t.Fatalf("put at a full table: %v, len %d", err, tb.Len())
	}
	if n := tb.Sweep(at(time.Hour)); n != 4 || tb.Len() != 0 {
		t.Fatalf("swept %d, len %d", n, tb.Len())
	}
}

// TestSweepDropsKeyOnceWindowEmpties: a key with nothing in flight is
// dropped at the first Sweep after its window emptied, long before its
// lease TTL would have run out.
func TestSweepDropsKeyOnceWindowEmpties(t *testing.T) {
	lim := Limits{Requests: 10, Window: 10 * sec, LeaseTTL: time.Hour}
	tb := NewTable(Policy{Buckets: 10}, func(string) Limits { return lim })
	tb.Do("k", t0, func(b *Budget) { b.Settle(t0, b.Acquire(t0, Request{Reserve: 1}).Lease, Usage{}) })
	tb.Do("leased", t0, func(b *Budget) { b.Acquire(t0, Request{Reserve: 1}) })
	if n := tb.Sweep(at(10 * sec)); n != 0 {
		t.Fatalf("swept %d while counted", n)
	}
	// Counted until its bucket's end plus the window: [0,1 s) + 10 s.
	if n := tb.Sweep(at(11 * sec)); n != 1 || tb.Len() != 1 {
		t.Fatalf("swept %d, len %d", n, tb.Len())
	}
	if !tb.Peek("leased", func(*Budget) {}) {
		t.Fatal("a key holding a lease was dropped")
	}
}

// TestSweepShrinksMaps: after Sweep dropped every key, the shards' maps are
// gone (rebuilt empty), and the heap falls back to within a few percent of
// what it was before the table filled.
func TestSweepShrinksMaps(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 200k keys")
	}
	const nkeys = 200_000
	lim := Limits{Requests: 10, Window: 10 * sec}
	var base, full, swept runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)
	tb := NewTable(Policy{Buckets: 1}, func(string) Limits { return lim })
	for i := range nkeys {
		tb.Do(fmt.Sprintf("tenant-%07d", i), t0, func(b *Budget) {
			b.Settle(t0, b.Acquire(t0, Request{Reserve: 1}).Lease, Usage{})
		})
	}
	runtime.GC()
	runtime.ReadMemStats(&full)
	if n := tb.Sweep(at(time.Minute)); n != nkeys {
		t.Fatalf("swept %d", n)
	}
	runtime.GC()
	runtime.ReadMemStats(&swept)
	for i := range tb.shards {
		if s := &tb.shards[i]; s.m != nil || s.hwm != 0 {
			t.Fatalf("shard %d kept its map (hwm %d)", i, s.hwm)
		}
	}
	grown := int64(full.HeapInuse) - int64(base.HeapInuse)
	left := int64(swept.HeapInuse) - int64(base.HeapInuse)
	t.Logf("heap in use: +%d B full (%d B/key), +%d B after the sweep", grown, grown/nkeys, left)
	if left*20 > grown {
		t.Fatalf("heap kept %d of %d B after every key expired", left, grown)
	}
	runtime.KeepAlive(tb)
}

// TestShrinkKeepsLiveKeys: a shard rebuilt after most of its keys went
// keeps the rest, with their state.
func TestShrinkKeepsLiveKeys(t *testing.T) {
	lim := Limits{Requests: 10, Window: 10 * sec, LeaseTTL: time.Hour}
	tb := NewTable(Policy{Buckets: 10}, func(string) Limits { return lim })
	keys := sameShardKeys(tb, "x", 4*shrinkMinHWM)
	for i, k := range keys {
		tb.Do(k, t0, func(b *Budget) {
			d := b.Acquire(t0, Request{Reserve: 1})
			if i%8 != 0 {
				b.Settle(t0, d.Lease, Usage{})
			}
		})
	}
	s := tb.shard("x")
	before := s.hwm
	if n := tb.Sweep(at(time.Minute)); n != len(keys)-len(keys)/8 {
		t.Fatalf("swept %d", n)
	}
	if s.hwm != len(keys)/8 || before != len(keys) {
		t.Fatalf("hwm %d → %d", before, s.hwm)
	}
	for i := 0; i < len(keys); i += 8 {
		if !tb.Peek(keys[i], func(b *Budget) {
			if b.Status(at(time.Minute)).Concurrency.Limit != 0 || len(b.leases) != 1 {
				t.Fatalf("%s lost its lease", keys[i])
			}
		}) {
			t.Fatalf("%s dropped", keys[i])
		}
	}
}
