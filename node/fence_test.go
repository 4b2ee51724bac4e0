package node

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/ring"
)

// gossipView is the membership gossip would show: each node under boot id
// boots[i].
func gossipView(nodes []*Node, boots ...string) []custody.Member {
	var ms []custody.Member
	for i, nd := range nodes {
		ms = append(ms, custody.Member{Member: member(nd), Boot: boots[i]})
	}
	return ms
}

// joinAll has nodes follow one gossip view of them all (boot ids "a"), as
// members joined through gossip: the quorum rules apply.
func joinAll(t *testing.T, nodes []*Node) {
	t.Helper()
	whole := gossipView(nodes, slices.Repeat([]string{"a"}, len(nodes))...)
	for _, nd := range nodes {
		nd.gossiped.Store(true)
		if err := nd.follow(whole); err != nil {
			t.Fatal(err)
		}
	}
}

// sink records what a fence hands over.
type sink struct {
	mu   sync.Mutex
	owed map[string][2]int64 // key → requests, tokens
}

func (s *sink) owe(key string, requests, tokens int64, _ time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owed == nil {
		s.owed = map[string][2]int64{}
	}
	o := s.owed[key]
	s.owed[key] = [2]int64{o[0] + requests, o[1] + tokens}
}

func (s *sink) get(key string) [2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owed[key]
}

// A split: n3 alone on one side, n1 and n2 on the other. n3's view has no
// majority: it fences itself (stops deciding, hands what it admitted since
// its last acknowledged replication to the sink: the debts), and comes
// back under a new boot id as a new member. The majority restores n3's
// partitions from their replicas. Once the debts are charged, the merged
// window holds both sides' admissions, exactly.
func TestSplitMinorityFencesAndMergesBack(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 30, Concurrency: 100} }
	nodes := newNodes(t, 3, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	var owed sink
	var released releases
	n3.OnFence(owed.owe)
	n3.OnRelease(released.sink)
	joinAll(t, nodes)
	all, majority := ringOf(t, n1, n2, n3), ringOf(t, n1, n2)
	keys := keysMoving(all, majority, "n3", "n1", 2)
	replicated, fresh := keys[0], keys[1]
	ctx := context.Background()
	admit(t, n3, replicated, 5)
	n3.replicateOnce() // n3's backup holds 5
	admit(t, n3, replicated, 3)
	admit(t, n1, fresh, 4) // forwarded to n3, never replicated

	// The cut, as n3's gossip sees it.
	if err := n3.follow(gossipView(nodes[2:], "a")); err != nil {
		t.Fatal(err)
	}
	if !n3.Fenced() || n3.Keys() != 0 {
		t.Fatalf("after a minority view: fenced %v with %d keys, want fenced with none", n3.Fenced(), n3.Keys())
	}
	if got := owed.get(replicated); got[0] != 3 {
		t.Errorf("%s: %d requests owed, want exactly the 3 admitted after the acknowledged replication", replicated, got[0])
	}
	if got := owed.get(fresh); got[0] != 4 {
		t.Errorf("%s: %d requests owed, want all 4 (never replicated)", fresh, got[0])
	}
	// Each key's status went to the release sink as it left the table:
	// what n3's fallback starts from.
	for key, left := range map[string]int64{replicated: 30 - 8, fresh: 30 - 4} {
		if st := released.get(key); len(st) != 1 || st[0].Requests.Remaining != left {
			t.Errorf("%s at the fence: released %+v, want once with %d of 30 left", key, st, left)
		}
	}
	if n := released.keys(); n != len(keys) {
		t.Errorf("%d keys released at the fence, want %d", n, len(keys))
	}
	_, err := n3.Do(ctx, Call{Op: OpAcquire, Key: replicated})
	if !errors.Is(err, ErrMinority) || !errors.Is(err, ErrTransferPending) {
		t.Fatalf("an acquire at a fenced member: %v, want ErrMinority (a kind of ErrTransferPending, so callers fall back)", err)
	}

	// The majority restores n3's partitions: the replica counts 5.
	for _, nd := range nodes[:2] {
		if err := nd.follow(gossipView(nodes[:2], "a", "a")); err != nil {
			t.Fatal(err)
		}
	}
	if got := admit(t, n2, replicated, 10); got != 10 {
		t.Fatalf("majority side: %d of 10 admitted", got)
	}

	// Healed: n3 comes back under a new boot id, and its debts are paid.
	// A view still showing the fenced incarnation changes nothing.
	if err := n3.follow(gossipView(nodes, "a", "a", "a")); err != nil {
		t.Fatal(err)
	}
	if !n3.Fenced() {
		t.Fatal("unfenced by a view that still shows the fenced incarnation")
	}
	healed := gossipView(nodes, "a", "a", "b")
	for _, nd := range nodes {
		if err := nd.follow(healed); err != nil {
			t.Fatal(err)
		}
	}
	if n3.Fenced() {
		t.Fatal("still fenced after a majority view with the new incarnation")
	}
	for _, key := range keys {
		o := owed.get(key)
		a, err := n1.Do(ctx, Call{Op: OpCharge, Key: key, Charge: Charge{Requests: o[0], Tokens: o[1], At: time.Now()}})
		if err != nil || !a.OK {
			t.Fatalf("charging %s's debts: %+v %v", key, a, err)
		}
	}
	// 5 replicated + 10 on the majority side + 3 owed = 18 of 30.
	if got := admit(t, n3, replicated, 30); got != 12 {
		t.Errorf("%s after the merge: %d admitted, want exactly 12 (18 of 30 counted)", replicated, got)
	}
	// 4 owed of 30; the majority restored nothing for it.
	if got := admit(t, n2, fresh, 30); got != 26 {
		t.Errorf("%s after the merge: %d admitted, want exactly 26", fresh, got)
	}
}

// The mandate: a member that hears from no majority stops deciding within
// about a mandate's term, before gossip says anything; its calls fall back.
func TestMandateLapsesWithoutAMajority(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 100} }
	nodes := newNodes(t, 3, limits)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	joinAll(t, nodes)
	key := keysMoving(ringOf(t, n1, n2, n3), ringOf(t, n1, n2), "n3", "n1", 1)[0]
	if got := admit(t, n3, key, 3); got != 3 {
		t.Fatalf("%d of 3 admitted while whole", got)
	}
	// Still mandated after the mandate it holds now has run out: the
	// heartbeats extended it.
	held := n3.mandateUntil.Load()
	eventually(t, 10*time.Second, "the mandate n3 held at the start to run out", func() bool { return n3.mono() > held })
	if !n3.Mandated() {
		t.Fatal("mandate lapsed while every member answers heartbeats")
	}
	n1.Close()
	n2.Close() // n3 hears from nobody now
	eventually(t, 10*time.Second, "n3's mandate to lapse after both other members went silent", func() bool { return !n3.Mandated() })
	if _, err := n3.Do(context.Background(), Call{Op: OpAcquire, Key: key}); !errors.Is(err, ErrMinority) {
		t.Fatalf("an acquire without a lease: %v, want ErrMinority", err)
	}
}

// A node built without a peer liveness takes the shipped one (a second),
// for its mandate as for its peers: a mandate cut to a few heartbeats
// lapsed on loaded machines while every member answered.
func TestMandateTermReadsTheDefaultLiveness(t *testing.T) {
	nodes := newNodes(t, 1, func(string) limiter.Limits { return limiter.Limits{Requests: 1} })
	if got, want := nodes[0].mandateTerm(), time.Second+4*heartbeatInterval; got != want {
		t.Fatalf("mandate term %v, want %v (default liveness plus four heartbeats)", got, want)
	}
}

// Fallback shares divide by the membership counted, not by the ring of
// the moment: a member that saw the others go one by one keeps dividing by
// all of them, so its side of a split does not give itself bigger shares.
func TestSharersCountTheMembershipNotTheRing(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 100} }
	nodes := newNodes(t, 3, limits, noReplication)
	n3 := nodes[2]
	n3.gossiped.Store(true)
	steps := []struct {
		view    []custody.Member
		ring    int
		fenced  bool
		sharers int
	}{
		{gossipView(nodes, "a", "a", "a"), 3, false, 3},
		{gossipView(nodes[1:], "a", "a"), 2, false, 3}, // n1 gone: 2 of 3, a majority; its ring has 2
		{gossipView(nodes[2:], "a"), 2, true, 3},       // n2 gone too: fenced, the last ring kept
	}
	for i, s := range steps {
		if err := n3.follow(s.view); err != nil {
			t.Fatal(err)
		}
		if got := len(n3.Ring().Members()); got != s.ring || n3.Fenced() != s.fenced || n3.Sharers() != s.sharers {
			t.Fatalf("step %d: ring of %d, fenced %v, sharers %d; want %d, %v, %d", i, got, n3.Fenced(), n3.Sharers(), s.ring, s.fenced, s.sharers)
		}
	}
}

// keysBackedUp returns want keys that owner holds in r with backup as
// their backup.
func keysBackedUp(r *ring.Ring, owner, backup string, want int) []string {
	return keysWhere(want, func(k string) bool {
		o, _ := r.Owner(k)
		b, _ := r.Backup(k)
		return o.Name == owner && b.Name == backup
	})
}

// A fence relies on a key's acknowledged replica only when that backup is
// on the other side (counted, and missing from the fencing view): there
// the majority restores from it. A backup on the fenced side with it
// leaves the majority nothing, so the fence owes all the key counts. And
// the replicas the fenced backup holds stay: after a crash one may be the
// last copy there is.
func TestFenceOwesAllWhenTheBackupIsOnItsSide(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 30, Concurrency: 100} }
	nodes := newNodes(t, 5, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	n3, n5 := nodes[2], nodes[4]
	var owed sink
	n3.OnFence(owed.owe)
	n5.OnFence(owed.owe)
	joinAll(t, nodes)
	// n3 and n5 are cut off together, 2 of 5.
	all := ringOf(t, nodes...)
	withIt := keysBackedUp(all, "n3", "n5", 1)    // its backup is cut off with it
	elsewhere := keysBackedUp(all, "n5", "n4", 1) // its backup is on the majority side
	if len(withIt) == 0 || len(elsewhere) == 0 {
		t.Fatal("no keys with the backups wanted")
	}
	admit(t, n3, withIt[0], 5)
	admit(t, n5, elsewhere[0], 5)
	n3.replicateOnce() // n5 acknowledges 5
	n5.replicateOnce() // n4 acknowledges 5
	admit(t, n3, withIt[0], 3)
	admit(t, n5, elsewhere[0], 3)
	if n5.Replicas() != 1 {
		t.Fatalf("n5 holds %d replicas after a replication round, want 1", n5.Replicas())
	}

	minority := gossipView([]*Node{n3, n5}, "a", "a")
	for _, nd := range []*Node{n3, n5} {
		if err := nd.follow(minority); err != nil {
			t.Fatal(err)
		}
		if !nd.Fenced() {
			t.Fatalf("%s not fenced by a view of 2 of 5", nd.Name())
		}
	}
	if got := owed.get(withIt[0]); got[0] != 8 {
		t.Errorf("%s, backed up on the fenced side: %d requests owed, want all 8", withIt[0], got[0])
	}
	if got := owed.get(elsewhere[0]); got[0] != 3 {
		t.Errorf("%s, backed up on the majority side: %d requests owed, want the 3 beyond its replica", elsewhere[0], got[0])
	}
	if n5.Replicas() != 1 {
		t.Error("n5's fence dropped the replica it holds for n3")
	}
}

// A partition frozen for a handover whose taker never acknowledged is owed
// too: the taker may never have installed it.
func TestFenceOwesFrozenHandovers(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 30, Concurrency: 100} }
	nodes := newNodes(t, 3, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	n3 := nodes[2]
	var owed sink
	n3.OnFence(owed.owe)
	joinAll(t, nodes)
	// A joiner n4 whose peer address answers nothing: what moves to it
	// stays frozen at n3, offered and unacknowledged.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	n4 := custody.Member{Member: ring.Member{Name: "n4", Peer: deadAddr}, Boot: "a"}
	joined := append(gossipView(nodes, "a", "a", "a"), n4)
	before := ringOf(t, nodes...)
	after, err := ring.New(n3.ringConfig(), []ring.Member{member(nodes[0]), member(nodes[1]), member(n3), n4.Member})
	if err != nil {
		t.Fatal(err)
	}
	moving := keysMoving(before, after, "n3", "n4", 1)
	if len(moving) == 0 {
		t.Fatal("no key moves from n3 to n4")
	}
	key := moving[0]
	admit(t, n3, key, 6)
	if err := n3.follow(joined); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "n3 to freeze the partition moving to n4", func() bool { return !n3.table.Peek(key, func(*limiter.Budget) {}) })
	if err := n3.follow(gossipView(nodes[2:], "a")); err != nil {
		t.Fatal(err)
	}
	if !n3.Fenced() {
		t.Fatal("n3 not fenced by a view of 1 of 4")
	}
	if got := owed.get(key); got[0] != 6 {
		t.Errorf("%s, frozen for n4: %d requests owed, want all 6", key, got[0])
	}
}

// A two-node cluster scales down to one by SIGTERM: the leaver is marked
// leaving, then departed (a view whose ring is unchanged, which must still
// reach the quorum), then gone. The survivor keeps deciding: not fenced.
func TestDepartedLeaverDoesNotFenceTheSurvivor(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 30, Concurrency: 100} }
	nodes := newNodes(t, 2, limits)
	n1, n2 := nodes[0], nodes[1]
	joinAll(t, nodes)
	leaving := gossipView(nodes, "a", "a")
	leaving[1].Leaving = true
	departed := gossipView(nodes, "a", "a")
	departed[1].Leaving, departed[1].Departed = true, true
	for _, v := range [][]custody.Member{leaving, departed, gossipView(nodes[:1], "a")} {
		if err := n1.follow(v); err != nil {
			t.Fatal(err)
		}
	}
	if n1.Fenced() {
		t.Fatalf("n1 fenced after %s left with its departure announced", n2.Name())
	}
	if got := admit(t, n1, "t:acme", 3); got != 3 {
		t.Errorf("n1 alone: %d of 3 admitted, want 3", got)
	}
}

// A stall: n3's process stops for longer than the others take to declare
// it dead (here deadAfter is 1 ms, so its next heartbeat finds the gap).
// Its own view never changed, but it must not decide again on what it
// held: it fences itself, owing what it admitted beyond its backup's
// acknowledged copy (the copy the others restore from), and comes back as
// a new member, to which the others hand back exactly what they hold.
func TestStalledMemberFencesAndIsHandedBack(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 30, Concurrency: 100} }
	nodes := newNodes(t, 3, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	var owed sink
	n3.OnFence(owed.owe)
	joinAll(t, nodes)
	all, majority := ringOf(t, n1, n2, n3), ringOf(t, n1, n2)
	keys := keysMoving(all, majority, "n3", "n1", 2)
	replicated, fresh := keys[0], keys[1]
	admit(t, n3, replicated, 5)
	n3.replicateOnce() // n3's backup holds 5
	admit(t, n3, replicated, 3)
	admit(t, n1, fresh, 4) // forwarded to n3, never replicated

	three := func() int { return 3 } // gossip shows the three members
	n3.gossipMembers.Store(&three)
	n3.deadAfter.Store(int64(time.Millisecond)) // every heartbeat now follows a "stall"
	eventually(t, 10*time.Second, "n3 to fence itself after a stall longer than deadAfter", n3.Fenced)
	n3.deadAfter.Store(0)
	n3.tmu.Lock() // the fence runs under tmu: once we hold it, the fence is over
	n3.tmu.Unlock()
	if _, err := n3.Do(context.Background(), Call{Op: OpAcquire, Key: replicated}); !errors.Is(err, ErrMinority) {
		t.Fatalf("an acquire at the stalled member after it woke: %v, want ErrMinority", err)
	}
	if got := owed.get(replicated); got[0] != 3 {
		t.Errorf("%s: %d requests owed, want exactly the 3 admitted after the acknowledged replication (its backup is on the other side)", replicated, got[0])
	}
	if got := owed.get(fresh); got[0] != 4 {
		t.Errorf("%s: %d requests owed, want all 4 (never replicated)", fresh, got[0])
	}
	// The others declared n3 dead and restored its partitions.
	for _, nd := range nodes[:2] {
		if err := nd.follow(gossipView(nodes[:2], "a", "a")); err != nil {
			t.Fatal(err)
		}
	}
	if got := admit(t, n2, replicated, 10); got != 10 {
		t.Fatalf("while n3 was gone: %d of 10 admitted", got)
	}
	// memberlist refutes n3's death under its old boot id: nothing changes.
	for _, nd := range nodes {
		if err := nd.follow(gossipView(nodes, "a", "a", "a")); err != nil {
			t.Fatal(err)
		}
	}
	if !n3.Fenced() {
		t.Fatal("unfenced by a view that shows the stalled incarnation")
	}
	back := gossipView(nodes, "a", "a", "b")
	for _, nd := range nodes {
		if err := nd.follow(back); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range keys {
		o := owed.get(key)
		a, err := n1.Do(context.Background(), Call{Op: OpCharge, Key: key, Charge: Charge{Requests: o[0], Tokens: o[1], At: time.Now()}})
		if err != nil || !a.OK {
			t.Fatalf("charging %s's debts: %+v %v", key, a, err)
		}
	}
	// 5 replicated + 10 while n3 was gone + 3 owed = 18 of 30.
	if got := admit(t, n3, replicated, 30); got != 12 {
		t.Errorf("%s after n3 came back: %d admitted, want exactly 12 (18 of 30 counted)", replicated, got)
	}
	if got := admit(t, n2, fresh, 30); got != 26 {
		t.Errorf("%s after n3 came back: %d admitted, want exactly 26", fresh, got)
	}
}
