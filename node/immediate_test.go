package node

import (
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// TestImmediate: a key is decided here at once without a cluster, and in
// one only by its custodian, while its state is here, never while it is
// on its way here, never with synchronous replication, never once fenced
// or closed.
func TestImmediate(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	alone := newNodes(t, 1, limits)[0]
	if !alone.Immediate("t:a") {
		t.Fatal("a node without a cluster: not immediate")
	}
	nodes := newNodes(t, 3, limits)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	before := ringOf(t, n1, n2)
	n1.SetRing(before)
	n2.SetRing(before)
	mine := keysMoving(before, before, "n1", "n1", 3)
	theirs := keysMoving(before, before, "n2", "n2", 3)
	for _, k := range mine {
		if n1.Immediate(k) {
			// custody just came to n1, and n2 is the backup: a key not
			// yet seen is first looked up there
			t.Fatalf("%s, owned by n1 but never seen: immediate at n1", k)
		}
		admit(t, n1, k, 1)
		if !n1.Immediate(k) || n2.Immediate(k) {
			t.Fatalf("%s, owned by n1: immediate at n1 %v, at n2 %v; want true, false", k, n1.Immediate(k), n2.Immediate(k))
		}
	}
	for _, k := range theirs {
		if n1.Immediate(k) {
			t.Fatalf("%s, owned by n2: immediate at n1", k)
		}
	}
	// n3 joins: a key moving to it is not immediate there until its state
	// has arrived (n1, its custodian, has not taken the new ring yet).
	after := ringOf(t, n1, n2, n3)
	moving := keysMoving(before, after, "n1", "n3", 3)
	admit(t, n1, moving[0], 4)
	n3.SetRing(after)
	for _, k := range moving {
		if n3.Immediate(k) {
			t.Fatalf("%s: immediate at n3 before its custody arrived", k)
		}
	}
	n1.SetRing(after)
	n2.SetRing(after)
	eventually(t, 10*time.Second, moving[0]+"'s custody at n3", func() bool { return n3.Immediate(moving[0]) })
	if !n3.Immediate(moving[0]) || n1.Immediate(moving[0]) {
		t.Fatalf("%s after the handoff: immediate at n3 %v, at n1 %v; want true, false", moving[0], n3.Immediate(moving[0]), n1.Immediate(moving[0]))
	}
	if got := admit(t, n3, moving[0], 10); got != 6 {
		t.Fatalf("%s at n3: %d admitted, want the 6 left of 10", moving[0], got)
	}
	lone := newNodes(t, 1, limits)[0] // no backup, no checkpoint: nothing to look up first
	lone.SetRing(ringOf(t, lone))
	if !lone.Immediate("t:new") {
		t.Fatal("a cluster of one without a checkpoint: a new key not immediate")
	}

	synced := newNodes(t, 1, limits, func(c *Config) { c.ReplicationSync = true })[0]
	synced.SetRing(ringOf(t, synced))
	if synced.Immediate("t:new") {
		t.Fatal("replication: sync: immediate (an admission waits for its backup)")
	}
	n1.fenced.Store(true)
	if n1.Immediate(mine[0]) {
		t.Fatal("a fenced node: immediate")
	}
	n1.fenced.Store(false)
	n1.Close()
	if n1.Immediate(mine[0]) {
		t.Fatal("a closed node: immediate")
	}
}
