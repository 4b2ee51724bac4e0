package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/ring"
)

// member returns nd as a ring member.
func member(nd *Node) ring.Member { return ring.Member{Name: nd.Name(), Peer: nd.PeerAddr()} }

func ringOf(t testing.TB, nodes ...*Node) *ring.Ring {
	t.Helper()
	var ms []ring.Member
	for _, nd := range nodes {
		ms = append(ms, member(nd))
	}
	r, err := ring.New(ring.Config{}, ms)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// admit sends n acquires for key via nd and counts the allowed ones.
func admit(t *testing.T, nd *Node, key string, n int) (allowed int) {
	t.Helper()
	for range n {
		a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}})
		if err != nil {
			t.Fatalf("acquire %s via %s: %v", key, nd.Name(), err)
		}
		if a.Decision.Allowed {
			allowed++
		}
	}
	return allowed
}

// ringAll gives each of nodes the ring of them all, and returns it.
func ringAll(t testing.TB, nodes []*Node) *ring.Ring {
	t.Helper()
	all := ringOf(t, nodes...)
	for _, nd := range nodes {
		nd.SetRing(all)
	}
	return all
}

func newNodes(t testing.TB, n int, limits func(string) limiter.Limits, opts ...func(*Config)) []*Node {
	t.Helper()
	var nodes []*Node
	for i := range n {
		cfg := Config{Name: fmt.Sprintf("n%d", i+1), LimitsFor: limits}
		withTestSecrets(&cfg)
		for _, o := range opts {
			o(&cfg)
		}
		nd, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
	}
	return nodes
}

// ownerPair starts n1 and n2 sharing one ring and returns them with a key
// n1 owns and the ring n2 has alone once n1 is gone.
func ownerPair(t *testing.T, limits func(string) limiter.Limits, opts ...func(*Config)) (n1, n2 *Node, without *ring.Ring, key string) {
	t.Helper()
	nodes := newNodes(t, 2, limits, opts...)
	n1, n2 = nodes[0], nodes[1]
	both := ringOf(t, n1, n2)
	n1.SetRing(both)
	n2.SetRing(both)
	without = ringOf(t, n2)
	return n1, n2, without, keysMoving(both, without, "n1", "n2", 1)[0]
}

// keysMoving returns keys owned by from in before and by to in after.
func keysMoving(before, after *ring.Ring, from, to string, want int) []string {
	return keysWhere(want, func(k string) bool {
		b, _ := before.Owner(k)
		a, _ := after.Owner(k)
		return b.Name == from && a.Name == to
	})
}

// partitionsMoving counts the partitions owned by from in before and by to
// in after.
func partitionsMoving(before, after *ring.Ring, from, to string) (n int) {
	for _, p := range before.OwnedPartitions(from) {
		if o, _ := after.PartitionOwner(p); o.Name == to {
			n++
		}
	}
	return n
}

// keysWhere returns up to want keys (of the first 100,000 t:kN) for which
// ok is true.
func keysWhere(want int, ok func(key string) bool) []string {
	var keys []string
	for i := 0; len(keys) < want && i < 100000; i++ {
		if k := fmt.Sprintf("t:k%d", i); ok(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// A joiner that learns the new ring before the members holding its
// partitions waits for them: calls through any node, meanwhile and after,
// count from the real windows, never from zero and never twice.
func TestHandoffOnJoinKeepsCounts(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	nodes := newNodes(t, 3, limits)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	before := ringOf(t, n1, n2)
	n1.SetRing(before)
	n2.SetRing(before)
	after := ringOf(t, n1, n2, n3)
	keys := keysMoving(before, after, "n1", "n3", 20)
	for _, k := range keys {
		if got := admit(t, n2, k, 6); got != 6 {
			t.Fatalf("%s: %d of 6 admitted before the join", k, got)
		}
	}
	// n3 learns the ring first; n1 and n2 a moment later, while calls
	// through all three are under way: each key's calls through n1 and n2
	// are half answered before the others learn the ring, and the other
	// half sent as they do; the calls through n3 wait for their
	// partitions, which come only after it. Answers are counted.
	n3.SetRing(after)
	counts := make([]int, len(keys))
	var answered atomic.Int64
	changing := make(chan struct{})
	early := 0 // answers there can be before the change
	var wg sync.WaitGroup
	for i, k := range keys {
		if nodes[i%3] != n3 {
			early += 5
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if j == 5 {
					<-changing
				}
				counts[i] += admit(t, nodes[i%3], k, 1)
				answered.Add(1)
			}
		}()
	}
	eventually(t, 10*time.Second, fmt.Sprintf("%d answers through n1 and n2 before the change", early), func() bool { return answered.Load() >= int64(early) })
	if got := answered.Load(); got != int64(early) {
		t.Fatalf("%d answers before n1 and n2 learned the ring, want %d: none through n3, whose partitions had not come", got, early)
	}
	close(changing)
	n1.SetRing(after)
	n2.SetRing(after)
	wg.Wait()
	if got, want := answered.Load()-int64(early), int64(10*len(keys)-early); got != want {
		t.Fatalf("%d answers from the change on, want %d", got, want)
	}
	for i, k := range keys {
		if counts[i] != 4 {
			t.Fatalf("%s via %s across the join: %d of 10 admitted, want exactly 4 (6 were used before)", k, nodes[i%3].Name(), counts[i])
		}
		if got := admit(t, n1, k, 3); got != 0 {
			t.Fatalf("%s: %d admitted once every ring agreed, want 0", k, got)
		}
	}
	if n1.Keys() != 0 || n3.Keys() != len(keys) {
		t.Fatalf("keys held: n1 %d n3 %d, want 0 and %d", n1.Keys(), n3.Keys(), len(keys))
	}
	for _, nd := range nodes {
		if c := nd.custodyStats().Conflicts; c != 0 {
			t.Fatalf("%s: %d partitions reset while their holder was alive", nd.Name(), c)
		}
	}
	// Partitions without keys travel too, on their own schedule: every one
	// n3 owns arrives, exactly once.
	want := int64(len(after.OwnedPartitions("n3")))
	eventually(t, 10*time.Second, fmt.Sprintf("the %d partitions n3 owns at n3", want), func() bool { return n3.custodyStats().Received >= want })
	if got := n3.custodyStats().Received; got != want {
		t.Fatalf("n3 received %d partitions, want the %d it owns", got, want)
	}
	// Once a partition has arrived, a key never seen before in it is
	// decided at once: no pull, no round trip to anyone.
	fresh := keysMoving(before, after, "n1", "n3", 40)[len(keys):]
	calls, _ := n3.Forwarded()
	for _, k := range fresh {
		if got := admit(t, n3, k, 1); got != 1 {
			t.Fatalf("new key %s: %d of 1 admitted", k, got)
		}
	}
	if now, _ := n3.Forwarded(); now != calls {
		t.Fatalf("%d new keys at their new owner cost %d peer calls, want 0", len(fresh), now-calls)
	}
}

// Leases move with their key, and so do waiters: a waiter queued at the old
// owner follows its key and is granted at the new one when a slot frees.
func TestHandoffKeepsLeasesAndWaitersFollow(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Concurrency: 2} }
	nodes := newNodes(t, 2, limits)
	n1, n2 := nodes[0], nodes[1]
	before := ringOf(t, n1)
	n1.SetRing(before)
	after := ringOf(t, n1, n2)
	key := keysMoving(before, after, "n1", "n2", 1)[0]
	ctx := context.Background()
	var leases []uint64
	for range 2 {
		a, err := n1.Do(ctx, Call{Op: OpAcquire, Key: key})
		if err != nil || !a.Decision.Allowed {
			t.Fatalf("acquire: %+v %v", a, err)
		}
		leases = append(leases, a.Decision.Lease)
	}
	type result struct {
		a   Answer
		err error
	}
	waiter := make(chan result, 1)
	go func() {
		a, err := n1.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{Wait: time.Minute}})
		waiter <- result{a, err}
	}()
	waitWaiting(t, n1, 1)
	n2.SetRing(after)
	n1.SetRing(after)
	// Both slots are still held at the new owner.
	if a, err := n2.Do(ctx, Call{Op: OpAcquire, Key: key}); err != nil || a.Decision.Allowed || a.Decision.Reason != limiter.Concurrency {
		t.Fatalf("acquire at the new owner: %+v %v, want a concurrency refusal", a, err)
	}
	eventually(t, 5*time.Second, "the waiter to follow its key to n2", func() bool { return n2.Waiting() == 1 })
	// A lease issued by the old owner settles at the new one, exactly
	// once, and the freed slot goes to the waiter that moved.
	for i, want := range []bool{true, false} {
		if a, err := n1.Do(ctx, Call{Op: OpSettle, Key: key, Lease: leases[0]}); err != nil || a.OK != want || a.Owner != "n2" {
			t.Fatalf("settle #%d: %+v %v, want ok=%v decided by n2", i+1, a, err, want)
		}
	}
	select {
	case r := <-waiter:
		if r.err != nil || !r.a.Decision.Allowed || r.a.Owner != "n2" {
			t.Fatalf("waiter: %+v %v, want admitted by n2", r.a, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter that followed its key was never granted")
	}
	if got := admit(t, n2, key, 3); got != 0 {
		t.Fatalf("%d admitted with both slots held, want 0", got)
	}
}

// Drain hands every partition on and returns once all are acknowledged;
// calls reaching the draining node meanwhile are forwarded, never decided
// from zero, while the others learn of the leave.
func TestDrainHandsEverythingOn(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10} }
	nodes := newNodes(t, 3, limits)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	all := ringAll(t, nodes)
	without := ringOf(t, n2, n3)
	keys := append(keysMoving(all, without, "n1", "n2", 10), keysMoving(all, without, "n1", "n3", 10)...)
	for _, k := range keys {
		if got := admit(t, n3, k, 7); got != 7 {
			t.Fatalf("%s: %d of 7", k, got)
		}
	}
	// Each key gets one call answered before the drain, and one sent once
	// n1 has handed a partition on, as the others hear of the leave.
	counts := make([]int, len(keys))
	var answered atomic.Int64
	handing := make(chan struct{})
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts[i] = admit(t, nodes[i%3], k, 1)
			answered.Add(1)
			<-handing
			counts[i] += admit(t, nodes[i%3], k, 1)
			answered.Add(1)
		}()
	}
	eventually(t, 5*time.Second, "each key's first call answered", func() bool { return answered.Load() == int64(len(keys)) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- n1.Drain(ctx) }()
	// The others hear of it late: once n1 has handed a partition on.
	eventually(t, 5*time.Second, "n1 to hand a partition on", func() bool { return n1.custodyStats().Given > 0 })
	close(handing)
	for _, nd := range []*Node{n2, n3} {
		tellLeaving(t, nd, nodes, n1)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := answered.Load(); got != int64(2*len(keys)) {
		t.Fatalf("%d calls answered, want %d", got, 2*len(keys))
	}
	if n1.Keys() != 0 || n1.tr.Load().held() != 0 {
		t.Fatalf("after Drain n1 holds %d keys, %d partitions", n1.Keys(), n1.tr.Load().held())
	}
	for i, k := range keys {
		counts[i] += admit(t, nodes[i%3], k, 5)
		if counts[i] != 3 {
			t.Fatalf("%s after the leave: %d admitted, want exactly 3 (7 of 10 were used)", k, counts[i])
		}
	}
}

// tellLeaving gives nd the membership of all with leaver draining: still a
// member, out of the ring (what gossip's Meta.Leaving carries).
func tellLeaving(t testing.TB, nd *Node, all []*Node, leaver *Node) {
	t.Helper()
	var members []custody.Member
	for _, m := range all {
		members = append(members, custody.Member{Member: member(m), Leaving: m == leaver})
	}
	if err := nd.follow(members); err != nil {
		t.Fatal(err)
	}
}

func noReplication(c *Config) { c.ReplicationInterval = -1 }

// A crashed previous holder refuses the pull at once: without a replica the
// key starts from zero at the new owner instead of failing or hanging.
func TestHandoffFromCrashedHolderStartsFresh(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10} }
	n1, n2, after, key := ownerPair(t, limits, noReplication)
	if got := admit(t, n1, key, 6); got != 6 {
		t.Fatal(got)
	}
	n1.Close() // crash: its state is gone
	n2.SetRing(after)
	if got := admit(t, n2, key, 12); got != 10 {
		t.Fatalf("%d admitted after the holder crashed, want 10 (a fresh window)", got)
	}
}

// An owner that crashes after a replication round loses nothing: the new
// owner's pull fails, and it takes the backup's replica instead.
func TestCrashRecoversFromReplica(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	// Rounds are run by hand below, after the last admission, so what the
	// replicas hold is exactly known.
	nodes := newNodes(t, 3, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	all := ringAll(t, nodes)
	after := ringOf(t, n2, n3)
	keys := append(keysMoving(all, after, "n1", "n2", 10), keysMoving(all, after, "n1", "n3", 10)...)
	ctx := context.Background()
	held := map[string]uint64{}
	for _, k := range keys {
		if got := admit(t, n2, k, 6); got != 6 {
			t.Fatalf("%s: %d of 6", k, got)
		}
		// a 7th admission whose lease must survive the crash
		a, err := n3.Do(ctx, Call{Op: OpAcquire, Key: k})
		if err != nil || !a.Decision.Allowed {
			t.Fatalf("7th: %+v %v", a, err)
		}
		held[k] = a.Decision.Lease
	}
	n1.replicateOnce()
	if got := n2.Replicas() + n3.Replicas(); got != len(keys) {
		t.Fatalf("%d keys replicated, want %d", got, len(keys))
	}
	n1.Close() // crash: no handoff
	n2.SetRing(after)
	n3.SetRing(after)
	for i, k := range keys {
		if a, err := nodes[2-i%2].Do(ctx, Call{Op: OpSettle, Key: k, Lease: held[k], Usage: limiter.Usage{PromptTokens: 1}}); err != nil || !a.OK {
			t.Fatalf("%s: the lease taken before the crash does not settle after it: %+v %v", k, a, err)
		}
		if got := admit(t, nodes[1+i%2], k, 10); got != 3 {
			t.Fatalf("%s after the owner crashed: %d admitted, want exactly 3 (7 of 10 used before)", k, got)
		}
	}
	if got := n2.counts.fromReplica.Load() + n3.counts.fromReplica.Load(); got != int64(len(keys)) {
		t.Fatalf("restored %d keys from replicas, want %d", got, len(keys))
	}
}

// The loss bound: what an owner admitted after its last replication round
// is lost with it, and nothing else. Replication is stopped on purpose
// after the first round, so the loss is exactly the admissions made since.
func TestCrashLosesOnlyUnreplicated(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 20} }
	n1, n2, after, key := ownerPair(t, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	admit(t, n1, key, 5)
	n1.replicateOnce() // one round: 5 admissions are safe at n2
	admit(t, n1, key, 3)
	n1.Close()
	n2.SetRing(after)
	if got := admit(t, n2, key, 20); got != 15 {
		t.Fatalf("%d admitted after the crash, want 15: the 5 replicated count, the 3 unreplicated are lost", got)
	}
}

// In sync mode an owner answers an admission only once the key's backup
// holds it: a crash right after, before any replication round, loses
// nothing. (TestCrashLosesOnlyUnreplicated is the async contrast.)
func TestSyncReplicationLosesNothing(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 20} }
	n1, n2, after, key := ownerPair(t, limits, func(c *Config) {
		c.ReplicationInterval = time.Hour // no rounds: only the sync copies
		c.ReplicationSync = true
	})
	if got := admit(t, n1, key, 8); got != 8 {
		t.Fatal(got)
	}
	if got := n2.Replicas(); got != 1 {
		t.Fatalf("the backup holds %d replicas after sync admissions, want 1", got)
	}
	n1.Close() // crash right after the last answer
	n2.SetRing(after)
	if got := admit(t, n2, key, 20); got != 12 {
		t.Fatalf("%d admitted after the crash, want exactly 12: all 8 admissions were replicated before they were answered", got)
	}
}

// Two copies survive two crashes: five nodes with ReplicationCopies 2; the
// owner of some keys and those keys' first backup crash together, and the
// new owners restore every key from the second backup, losing nothing that
// was replicated.
func TestTwoCopiesSurviveTwoCrashes(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	nodes := newNodes(t, 5, limits, func(c *Config) { c.ReplicationInterval = time.Hour; c.ReplicationCopies = 2 })
	all := ringAll(t, nodes)
	byName := map[string]*Node{}
	for _, nd := range nodes {
		byName[nd.Name()] = nd
	}
	// Keys owned by n1 whose first backup is the same member: both crash.
	var keys []string
	var backup string
	for i := 0; len(keys) < 20 && i < 100_000; i++ {
		k := fmt.Sprintf("t:two-%d", i)
		o, _ := all.Owner(k)
		bs := all.Backups(k, 2)
		if o.Name != "n1" || len(bs) != 2 || (backup != "" && bs[0].Name != backup) {
			continue
		}
		backup = bs[0].Name
		keys = append(keys, k)
	}
	if len(keys) < 20 {
		t.Fatalf("found %d keys owned by n1 with one first backup", len(keys))
	}
	for _, k := range keys {
		if got := admit(t, nodes[1], k, 7); got != 7 {
			t.Fatalf("%s: %d of 7", k, got)
		}
	}
	byName["n1"].replicateOnce()
	var survivors []*Node
	for _, nd := range nodes {
		if nd.Name() == "n1" || nd.Name() == backup {
			nd.Close() // both crash at once: no handoff
			continue
		}
		survivors = append(survivors, nd)
	}
	after := ringAll(t, survivors)
	for _, nd := range survivors {
		nd.SetRing(after)
	}
	for i, k := range keys {
		if got := admit(t, survivors[i%len(survivors)], k, 10); got != 3 {
			t.Fatalf("%s after its owner and first backup crashed: %d admitted, want exactly 3 (7 of 10 used before)", k, got)
		}
	}
}
