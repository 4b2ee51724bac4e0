package fallback

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/internal/testclock"
	"github.com/tokenring/tokenring/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock shared by the node and the router.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock { return testclock.New() }

// TestKeysBounded: the state remembers at most its maxKeys keys holding
// slots; past that a new key's acquire is refused (limiter.TableFull,
// FullRetry), never an untracked admission.
func TestKeysBounded(t *testing.T) {
	clock := newFakeClock()
	d := NewState(clock.Now, 4*stateShards)
	l := limiter.Limits{Requests: 30, Concurrency: 30}
	allowed, full := 0, 0
	for i := range 1000 {
		_, reason, retry := d.Acquire(fmt.Sprintf("t:t%d", i), l, 3, 2, 1)
		switch {
		case reason == limiter.None:
			allowed++
		case reason == limiter.TableFull && retry == FullRetry:
			full++
		default:
			t.Fatalf("key %d: %v %v", i, reason, retry)
		}
	}
	if e := d.entries(); e > 4*stateShards || allowed != e || allowed+full != 1000 || full < 1000-4*stateShards {
		t.Fatalf("%d admitted, %d refused as full, %d entries (cap %d)", allowed, full, e, 4*stateShards)
	}
}

// TestStaleEntriesLeave: entries that hold nothing and whose
// reports went stale are dropped by the calls that follow (two per call in
// the shard), and the shards' maps are rebuilt small.
func TestStaleEntriesLeave(t *testing.T) {
	clock := newFakeClock()
	d := NewState(clock.Now, 0)
	st := limiter.Status{Requests: limiter.DimStatus{Limit: 10, Remaining: 5, Reset: 10 * time.Second}}
	const keys = 10_000
	for i := range keys {
		d.Report(fmt.Sprint("t:", i), st, clock.Now())
	}
	if got := d.entries(); got != keys {
		t.Fatalf("%d entries", got)
	}
	for i := range keys { // still fresh: lookups drop nothing
		d.Release(fmt.Sprint("t:", i), 1)
	}
	if got := d.entries(); got != keys {
		t.Fatalf("%d entries left while their reports are fresh", got)
	}
	clock.Advance(11 * time.Second)
	for i := range keys {
		d.Release(fmt.Sprint("x:", i), 1)
	}
	if got := d.entries(); got != 0 {
		t.Fatalf("%d stale entries left after %d calls", got, keys)
	}
	for i := range d.shards {
		if h := d.shards[i].hwm; h >= shrinkMinHWM {
			t.Fatalf("shard %d's map not rebuilt (hwm %d)", i, h)
		}
	}
}

// TestLeaseIDsRandom: the degraded share's local lease ids, which
// clients hold inside lease strings, are random, not 1, 2, 3….
func TestLeaseIDsRandom(t *testing.T) {
	clock := newFakeClock()
	d := NewState(clock.Now, 0)
	l := limiter.Limits{Requests: 1000, Concurrency: 1000}
	small := 0
	seen := map[uint64]bool{}
	for range 32 {
		id, reason, _ := d.Acquire("t:k", l, 1, 1, 1)
		if reason != limiter.None || seen[id] {
			t.Fatalf("id %d, reason %v", id, reason)
		}
		seen[id] = true
		if id < 1<<32 {
			small++
		}
	}
	if small > 1 {
		t.Fatalf("%d of 32 fallback lease ids below 2^32", small)
	}
}

// TestEvictionSparesUsedEntries: a hit marks its entry used, and a
// full shard evicts, among its oldest entries, one not used since it last
// passed the tail (a second chance, as CLOCK gives); when every candidate
// was used, the first that holds nothing goes.
func TestEvictionSparesUsedEntries(t *testing.T) {
	now := time.Unix(1000, 0)
	st := limiter.Status{Requests: limiter.DimStatus{Limit: 10, Remaining: 5, Reset: 10 * time.Second}}
	var s stateShard
	s.init()
	for _, k := range []string{"a", "b", "c"} { // fresh reports: the sweep keeps them
		e := s.get(k, now, uncapped)
		if e == nil {
			t.Fatalf("%s not created", k)
		}
		e.setReport(st, now)
	}
	tail := s.list.prev
	spared := tail.key
	for _, e := range s.m {
		e.used = e != tail.prev // the entry next to the tail alone unused
	}
	unused := tail.prev.key
	if !s.evict(now) || s.m[spared] == nil || s.m[unused] != nil || len(s.m) != 2 {
		t.Fatalf("entries %v after evict: want %s (used, at the tail) kept and %s (unused) evicted", keysOf(s.m), spared, unused)
	}
	for _, e := range s.m {
		e.used = true
	}
	if !s.evict(now) || len(s.m) != 1 {
		t.Fatalf("entries %v: with every entry used, evict must still drop one holding nothing", keysOf(s.m))
	}
}

func keysOf(m map[string]*keyState) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestExhaustedHint: the owner's last report says a key has no
// request left only while what it counted is in its window.
func TestExhaustedHint(t *testing.T) {
	clock := newFakeClock()
	d := NewState(clock.Now, 0)
	if d.Exhausted("t:a", clock.Now()) {
		t.Fatal("a key never reported looks exhausted")
	}
	st := limiter.Status{Requests: limiter.DimStatus{Limit: 2, Remaining: 0, Reset: 30 * time.Second}}
	d.Report("t:a", st, clock.Now())
	if !d.Exhausted("t:a", clock.Now()) {
		t.Fatal("a fresh report of 0 requests left does not look exhausted")
	}
	clock.Advance(30 * time.Second)
	if d.Exhausted("t:a", clock.Now()) {
		t.Fatal("a report whose window has passed still looks exhausted")
	}
	st.Requests.Remaining = 1
	d.Report("t:a", st, clock.Now())
	if d.Exhausted("t:a", clock.Now()) {
		t.Fatal("a report of 1 request left looks exhausted")
	}
}

// TestAcquireHits: an admission counting several requests (an Envoy
// descriptor's hits_addend) spends that many of the share and owes that
// many to the owner; more than the share never fits.
func TestAcquireHits(t *testing.T) {
	clock := newFakeClock()
	d := NewState(clock.Now, 0)
	l := limiter.Limits{Requests: 30} // 10 a member, of 3
	if _, reason, _ := d.Acquire("d:k", l, 3, 0, 11); reason != limiter.Requests {
		t.Fatalf("11 hits on a share of 10: %v, want refused for requests", reason)
	}
	for _, hits := range []int64{4, 6} {
		if _, reason, _ := d.Acquire("d:k", l, 3, 0, hits); reason != limiter.None {
			t.Fatalf("%d hits: %v, want admitted", hits, reason)
		}
	}
	if _, reason, _ := d.Acquire("d:k", l, 3, 0, 1); reason != limiter.Requests {
		t.Fatalf("a hit past a spent share: %v, want refused", reason)
	}
	c, _, ok := d.owed("d:k", clock.Now(), time.Minute)
	if !ok || c.Requests != 10 {
		t.Fatalf("owed %+v (%v), want the 10 requests admitted", c, ok)
	}
	if !d.Owe("d:o", 0, 5) {
		t.Fatal("Owe refused")
	}
	if c, _, _ := d.owed("d:o", clock.Now(), time.Minute); c.Requests != 5 {
		t.Fatalf("the open policy owes %d requests, want 5", c.Requests)
	}
}
