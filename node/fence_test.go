package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// gossipView is the membership gossip would show: each node under boot id
// boots[i].
func gossipView(nodes []*Node, boots ...string) []viewMember {
	var ms []viewMember
	for i, nd := range nodes {
		ms = append(ms, viewMember{Member: member(nd), Boot: boots[i]})
	}
	return ms
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
	n3.OnFence(owed.owe)
	whole := gossipView(nodes, "a", "a", "a")
	for _, nd := range nodes {
		nd.gossiped.Store(true)
		if err := nd.follow(whole); err != nil {
			t.Fatal(err)
		}
	}
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
	_, err := n3.Do(ctx, &Call{Op: OpAcquire, Key: replicated})
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
		a, err := n1.Do(ctx, &Call{Op: OpCharge, Key: key, Charge: Charge{Requests: o[0], Tokens: o[1], At: time.Now()}})
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

// The lease: a member that hears from no majority stops deciding within
// about a lease, before gossip says anything; its calls fall back.
func TestLeaseLapsesWithoutAMajority(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 100} }
	nodes := newNodes(t, 3, limits)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	whole := gossipView(nodes, "a", "a", "a")
	for _, nd := range nodes {
		nd.gossiped.Store(true)
		if err := nd.follow(whole); err != nil {
			t.Fatal(err)
		}
	}
	key := keysMoving(ringOf(t, n1, n2, n3), ringOf(t, n1, n2), "n3", "n1", 1)[0]
	if got := admit(t, n3, key, 3); got != 3 {
		t.Fatalf("%d of 3 admitted while whole", got)
	}
	// Still leased well after a lease: the heartbeats keep it.
	time.Sleep(2 * n3.quorumLease())
	if !n3.Leased() {
		t.Fatal("lease lapsed while every member answers heartbeats")
	}
	n1.Close()
	n2.Close() // n3 hears from nobody now
	deadline := time.Now().Add(10 * time.Second)
	for n3.Leased() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n3.Leased() {
		t.Fatal("still leased 10 s after both other members went silent")
	}
	if _, err := n3.Do(context.Background(), &Call{Op: OpAcquire, Key: key}); !errors.Is(err, ErrMinority) {
		t.Fatalf("an acquire without a lease: %v, want ErrMinority", err)
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
		view    []viewMember
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
