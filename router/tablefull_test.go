package router

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
)

// TestOwnerTableFullIs503: a new tenant at an owner holding MaxKeys keys
// gets a 503 with the reason and a Retry-After, on the decision API and on
// the proxy path's decision, nothing admitted and no fallback; tenants the
// owner holds are still served.
func TestOwnerTableFullIs503(t *testing.T) {
	l := limiter.Limits{Requests: 5}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: func(string) limiter.Limits { return l }, MaxKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r, err := New(n, Config{Limits: func(string) limiter.Limits { return l }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	s := &server{Server: hs, node: n}
	for _, tenant := range []string{"a", "b"} {
		if rep := s.acquire(t, `{"tenant":"`+tenant+`","prompt_tokens":1,"max_tokens":1}`); rep.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tenant, rep.Code, rep.Error)
		}
	}
	rep := s.acquire(t, `{"tenant":"c","prompt_tokens":1,"max_tokens":1}`)
	if rep.Code != http.StatusServiceUnavailable || rep.Error != "too many keys held (max_keys reached at n1)" ||
		rep.Header.Get("Retry-After") != "1" || rep.RetryAfterMS != 1000 || rep.Allowed || rep.Fallback {
		t.Fatalf("new tenant at a full owner: %d %+v", rep.Code, rep)
	}
	if st := s.status(t, "c"); st.Code != http.StatusServiceUnavailable {
		t.Fatalf("status of a new tenant at a full owner: %d", st.Code)
	}
	if rep := s.acquire(t, `{"tenant":"a","prompt_tokens":1,"max_tokens":1}`); rep.Code != http.StatusOK {
		t.Fatalf("a held tenant: %d %s", rep.Code, rep.Error)
	}
	if n.Keys() != 2 {
		t.Fatalf("%d keys", n.Keys())
	}
}

// TestFallbackKeysBounded: with every owner down, the fallback remembers
// at most MaxFallbackKeys keys holding slots; past that a new tenant's
// degraded acquire is a 503 (max_keys), never an untracked admission.
func TestFallbackKeysBounded(t *testing.T) {
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	l := limiter.Limits{Requests: 30, Concurrency: 30}
	r, err := New(downCluster{rg}, Config{Limits: func(string) limiter.Limits { return l }, MaxFallbackKeys: 4 * stateShards})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	s := &server{Server: hs}
	allowed, full := 0, 0
	for i := range 1000 {
		rep := s.acquire(t, fmt.Sprintf(`{"tenant":"t%d","prompt_tokens":1,"max_tokens":1}`, i))
		switch {
		case rep.Code == http.StatusOK && rep.Fallback:
			allowed++
		case rep.Code == http.StatusServiceUnavailable && strings.HasPrefix(rep.Error, "too many keys held (max_keys") && rep.Header.Get("Retry-After") == "1":
			full++
		default:
			t.Fatalf("tenant %d: %d %+v", i, rep.Code, rep)
		}
	}
	if e := r.degraded.entries(); e > 4*stateShards || allowed != e || allowed+full != 1000 || full < 1000-4*stateShards {
		t.Fatalf("%d admitted, %d refused as full, %d entries (cap %d)", allowed, full, e, 4*stateShards)
	}
}

// TestFallbackStaleEntriesLeave: entries that hold nothing and whose
// reports went stale are dropped by the calls that follow (two per call in
// the shard), and the shards' maps are rebuilt small.
func TestFallbackStaleEntriesLeave(t *testing.T) {
	clock := newFakeClock()
	d := newDegraded(clock.Now, 0)
	st := limiter.Status{Requests: limiter.DimStatus{Limit: 10, Remaining: 5, Reset: 10 * time.Second}}
	const keys = 10_000
	for i := range keys {
		d.report(fmt.Sprint("t:", i), st, clock.Now())
	}
	if got := d.entries(); got != keys {
		t.Fatalf("%d entries", got)
	}
	for i := range keys { // still fresh: lookups drop nothing
		d.release(fmt.Sprint("t:", i), 1)
	}
	if got := d.entries(); got != keys {
		t.Fatalf("%d entries left while their reports are fresh", got)
	}
	clock.Advance(11 * time.Second)
	for i := range keys {
		d.release(fmt.Sprint("x:", i), 1)
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

// TestFallbackLeaseIDsRandom: the degraded share's local lease ids, which
// clients hold inside lease strings, are random, not 1, 2, 3….
func TestFallbackLeaseIDsRandom(t *testing.T) {
	clock := newFakeClock()
	d := newDegraded(clock.Now, 0)
	l := limiter.Limits{Requests: 1000, Concurrency: 1000}
	small := 0
	seen := map[uint64]bool{}
	for range 32 {
		id, reason, _ := d.acquire("t:k", l, 1, 1)
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

// TestFallbackEvictionSparesUsedEntries: a hit marks its entry used, and a
// full shard evicts, among its oldest entries, one not used since it last
// passed the tail (a second chance, as CLOCK gives); when every candidate
// was used, the first that holds nothing goes.
func TestFallbackEvictionSparesUsedEntries(t *testing.T) {
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
