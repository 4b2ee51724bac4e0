package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
)

// memCheckpoint is a Checkpoint holding snapshots in memory.
type memCheckpoint struct {
	at     time.Time
	states map[string][]byte
}

func (m *memCheckpoint) Save(context.Context, time.Time, map[string][]byte) error { return nil }
func (m *memCheckpoint) Load(_ context.Context, key string) ([]byte, time.Time, bool, error) {
	s, ok := m.states[key]
	return s, m.at, ok, nil
}
func (m *memCheckpoint) Scan(_ context.Context, fn func(string, []byte, time.Time) error) error {
	for k, s := range m.states {
		if err := fn(k, s, m.at); err != nil {
			return err
		}
	}
	return nil
}

// snapshotAt is the state of a key with limits l that admitted n requests
// at t.
func snapshotAt(t *testing.T, l limiter.Limits, n int, at time.Time) []byte {
	t.Helper()
	b := limiter.NewBudget(l, nil, at)
	for range n {
		if d := b.Acquire(at, limiter.Request{Reserve: 1}); !d.Allowed {
			t.Fatalf("snapshot: refused %+v", d)
		}
	}
	data, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFutureCheckpointNotRestored: a checkpointed state dated in the year
// 2200 is not installed at restore (it would refuse the tenant for 173
// years); the key starts empty, while a sane state next to it is restored.
func TestFutureCheckpointNotRestored(t *testing.T) {
	lim := limiter.Limits{Requests: 10}
	limits := func(string) limiter.Limits { return lim }
	now := time.Now()
	cp := &memCheckpoint{at: now, states: map[string][]byte{
		"t:future": snapshotAt(t, lim, 10, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)),
		"t:sane":   snapshotAt(t, lim, 4, now),
	}}
	nd := newNodes(t, 1, limits, func(c *Config) { c.Checkpoint = cp; c.ReplicationInterval = time.Hour })[0]
	if n, err := nd.Preload(context.Background()); err != nil || n != 2 {
		t.Fatalf("preloaded %d (%v)", n, err)
	}
	nd.SetRing(ringOf(t, nd))
	if got := nd.Keys(); got != 1 {
		t.Fatalf("%d keys restored, want only the sane one", got)
	}
	if got := admit(t, nd, "t:sane", 10); got != 6 {
		t.Fatalf("sane key: %d admitted, want 6", got)
	}
	if got := admit(t, nd, "t:future", 10); got != 10 {
		t.Fatalf("future key: %d admitted, want all 10", got)
	}
}

// TestFutureReplicaRejected: a replica dated beyond the clock-skew bound is
// not kept, and the key's previous replica stays.
func TestFutureReplicaRejected(t *testing.T) {
	lim := limiter.Limits{Requests: 10}
	nd := newNodes(t, 1, func(string) limiter.Limits { return lim })[0]
	now := time.Now()
	good := snapshotAt(t, lim, 3, now)
	if err := nd.replicas.Put("t:k", good, now); err != nil {
		t.Fatal(err)
	}
	bad := snapshotAt(t, lim, 10, now.Add(2*DefaultMaxClockSkew))
	if err := nd.replicas.Put("t:k", bad, now); !errors.Is(err, limiter.ErrFutureState) {
		t.Fatalf("future replica: %v", err)
	}
	if err := nd.replicas.Put("t:other", bad, now); err == nil || nd.Replicas() != 1 {
		t.Fatalf("future replica of a new key kept: %v, %d replicas", err, nd.Replicas())
	}
	rep, ok := nd.replicas.Take("t:k")
	if !ok || string(rep.State) != string(good) {
		t.Fatal("the good replica was displaced")
	}
	ahead := snapshotAt(t, lim, 1, now.Add(DefaultMaxClockSkew/2))
	if err := nd.replicas.Put("t:k", ahead, now); err != nil {
		t.Fatalf("replica within the skew bound: %v", err)
	}
}

// TestMaxKeysRefusesNewKeys: a node holding MaxKeys keys refuses a call
// for a new key with limiter.TableFull (retry after a sweep), keeps serving
// its keys, and still takes a debt for a new key.
func TestMaxKeysRefusesNewKeys(t *testing.T) {
	lim := limiter.Limits{Requests: 10}
	nd := newNodes(t, 1, func(string) limiter.Limits { return lim }, func(c *Config) { c.MaxKeys = 3 })[0]
	for i := range 3 {
		if got := admit(t, nd, fmt.Sprintf("t:%d", i), 1); got != 1 {
			t.Fatalf("key %d: %d admitted", i, got)
		}
	}
	ctx := context.Background()
	a, err := nd.Do(ctx, Call{Op: OpAcquire, Key: "t:new", Req: limiter.Request{Reserve: 1}})
	if err != nil || a.Decision.Allowed || a.Decision.Reason != limiter.TableFull || a.Decision.RetryAfter != time.Second {
		t.Fatalf("new key at a full table: %+v, %v", a.Decision, err)
	}
	a, err = nd.Do(ctx, Call{Op: OpStatus, Key: "t:new2"})
	if err != nil || a.Decision.Reason != limiter.TableFull {
		t.Fatalf("status of a new key at a full table: %+v, %v", a.Decision, err)
	}
	if got := admit(t, nd, "t:0", 1); got != 1 {
		t.Fatal("a held key refused")
	}
	a, err = nd.Do(ctx, Call{Op: OpCharge, Key: "t:debtor", Charge: Charge{Requests: 2, At: time.Now()}})
	if err != nil || !a.OK || a.Decision.Status.Requests.Remaining != 8 {
		t.Fatalf("debt for a new key at a full table: %+v, %v", a, err)
	}
	if nd.Keys() != 4 {
		t.Fatalf("%d keys", nd.Keys())
	}
}

// TestDefaultLeaseIDsRandom: a node's lease ids are not 1, 2, 3… but
// drawn at random, distinct.
func TestDefaultLeaseIDsRandom(t *testing.T) {
	nd := newNodes(t, 1, func(string) limiter.Limits { return limiter.Limits{} })[0]
	seen := map[uint64]bool{}
	small := 0
	for range 64 {
		a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: "t:k", Req: limiter.Request{Reserve: 1}})
		if err != nil || !a.Decision.Allowed {
			t.Fatalf("%+v %v", a.Decision, err)
		}
		if seen[a.Decision.Lease] {
			t.Fatalf("lease id %d twice", a.Decision.Lease)
		}
		seen[a.Decision.Lease] = true
		if a.Decision.Lease < 1<<32 {
			small++
		}
	}
	if small > 1 { // each below 2^32 with probability 2^-32
		t.Fatalf("%d of 64 lease ids below 2^32: not random", small)
	}
}

// TestFutureHandoffEntryRejected: a partition handed over with one key's
// state dated in the future installs its other keys, and not that one.
func TestFutureHandoffEntryRejected(t *testing.T) {
	lim := limiter.Limits{Requests: 10}
	nd := newNodes(t, 1, func(string) limiter.Limits { return lim }, func(c *Config) { c.ReplicationInterval = time.Hour })[0]
	r := ringOf(t, nd)
	nd.SetRing(r)
	good := "t:good"
	var bad string
	for i := 0; bad == ""; i++ {
		if k := fmt.Sprint("t:bad", i); r.Partition(k) == r.Partition(good) {
			bad = k
		}
	}
	now := time.Now()
	blob := binary.AppendUvarint(nil, 2)
	blob = peer.AppendEntry(blob, bad, snapshotAt(t, lim, 10, now.Add(time.Hour)))
	blob = peer.AppendEntry(blob, good, snapshotAt(t, lim, 4, now))
	tr := nd.tr.Load()
	tr.mu.Lock()
	tr.install(custody.Install{Part: r.Partition(good), State: blob})
	tr.mu.Unlock()
	if got := admit(t, nd, good, 10); got != 6 {
		t.Fatalf("good key: %d admitted, want 6", got)
	}
	if got := admit(t, nd, bad, 10); got != 10 {
		t.Fatalf("future key: %d admitted, want all 10", got)
	}
}

// TestSweepDropsKeyWhenWindowEmpties: the node's sweeper drops a settled
// key at its first sweep after the key's window emptied (fake clock), long
// before the lease TTL, and keeps a key whose lease is still held.
func TestSweepDropsKeyWhenWindowEmpties(t *testing.T) {
	var clock atomic.Int64
	start := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return start.Add(time.Duration(clock.Load())) }
	lim := limiter.Limits{Requests: 10, Window: 10 * time.Second, LeaseTTL: time.Hour}
	nd := newNodes(t, 1, func(string) limiter.Limits { return lim }, func(c *Config) {
		c.Now, c.SweepInterval, c.ReplicationInterval = now, time.Millisecond, -1
	})[0]
	ctx := context.Background()
	a, err := nd.Do(ctx, Call{Op: OpAcquire, Key: "t:done", Req: limiter.Request{Reserve: 1}})
	if err != nil || !a.Decision.Allowed {
		t.Fatal(a.Decision, err)
	}
	if a, err := nd.Do(ctx, Call{Op: OpSettle, Key: "t:done", Lease: a.Decision.Lease}); err != nil || !a.OK {
		t.Fatal("settle", err)
	}
	if got := admit(t, nd, "t:leased", 1); got != 1 {
		t.Fatal("leased key refused")
	}
	// A sweep while both windows count: one second on, a sweep brings each
	// key it keeps to the new time (Budget.Idle), which its state then
	// shows (latest is zero for a key dropped).
	clock.Store(int64(time.Second))
	swept := func(key string) bool { at := latest(nd, key); return at.IsZero() || at.Equal(now()) }
	eventually(t, 5*time.Second, "a sweep over both keys one second on", func() bool { return swept("t:done") && swept("t:leased") })
	if nd.Keys() != 2 {
		t.Fatalf("%d keys while counted", nd.Keys())
	}
	clock.Store(int64(11 * time.Second)) // the window emptied; the lease runs for an hour
	eventually(t, 5*time.Second, "the settled key dropped after the window emptied", func() bool { return nd.Keys() == 1 })
	if !nd.table.Peek("t:leased", func(*limiter.Budget) {}) {
		t.Fatal("the key holding a lease was dropped")
	}
}

// latest is the latest time key's state at nd has seen
// (limiter.SnapshotTime); zero if nd does not hold key.
func latest(nd *Node, key string) (at time.Time) {
	nd.table.Peek(key, func(b *limiter.Budget) {
		snap, _ := b.AppendBinary(nil)
		at, _ = limiter.SnapshotTime(snap)
	})
	return at
}

// The waiters' map of a key is rebuilt once it falls below a quarter of
// its high-water mark.
func TestWaitersMapShrinks(t *testing.T) {
	l := newLocal("n", nil, time.Now)
	for i := range 1000 {
		l.waiters[waiterID{"k", uint64(i)}] = make(chan waiting, 1)
		l.waitersSize.Grew(len(l.waiters))
	}
	for i := range 999 {
		l.deliver("k", []limiter.Grant{{Ticket: uint64(i)}})
	}
	if l.waitersSize.Mark() >= 64 || len(l.waiters) != 1 {
		t.Fatalf("waiters: hwm %d, len %d", l.waitersSize.Mark(), len(l.waiters))
	}
}
