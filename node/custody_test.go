package node

import (
	"context"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
)

// A member forwards to a joiner as soon as gossip shows it, which can be
// before the joiner installed its own first membership. The joiner must not
// decide such a call from its empty table (that counted from zero a key a
// custodian held, and the install that followed overwrote the admission:
// one over the limit in the join test): it waits for its first ring.
func TestForwardedCallWaitsForFirstRing(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10} }
	nodes := newNodes(t, 2, limits, func(c *Config) { c.TransferWait = 50 * time.Millisecond })
	n1, n2 := nodes[0], nodes[1]
	both := ringOf(t, n1, n2)
	key := keysMoving(both, both, "n2", "n2", 1)[0]
	n1.SetRing(both) // n1 knows n2; n2 has no membership yet
	_, err := n1.Do(context.Background(), Call{Op: OpAcquire, Key: key})
	if err == nil || n2.Keys() != 0 {
		t.Fatalf("a forwarded call at a node without a ring: err %v, %d keys there; want no decision", err, n2.Keys())
	}
	n2.SetRing(both)
	if got := admit(t, n1, key, 12); got != 10 {
		t.Fatalf("%d of 12 admitted once both have the ring, want exactly 10", got)
	}
}

// The call that waits for the joiner's first ring must wait off the
// connection's reader: the frames behind it (a liveness ping, the transfer
// it waits for) must still be read. Run on the reader, it held them for a
// whole TransferWait; the forwarder, hearing nothing after its probe,
// declared the joiner down and fell back (the join test's fallbacks).
func TestCallAwaitingFirstRingLeavesItsConnectionFree(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10} }
	nodes := newNodes(t, 2, limits, func(c *Config) { c.TransferWait = time.Minute })
	n1, n2 := nodes[0], nodes[1]
	both := ringOf(t, n1, n2)
	key := keysMoving(both, both, "n2", "n2", 1)[0]
	n1.SetRing(both) // n1 knows n2; n2 has no membership yet
	decided := make(chan error, 1)
	go func() {
		_, err := n1.Do(context.Background(), Call{Op: OpAcquire, Key: key})
		decided <- err
	}()
	p := n1.peers.(*peer.Pool).Get(n2.PeerAddr())
	eventually(t, 5*time.Second, "the forwarded acquire reaches n2", func() bool { return n1.peerStats.Calls.Load() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Call(ctx, &Call{Op: peer.OpPing}); err != nil {
		t.Fatalf("a ping behind the call awaiting n2's first ring: %v; want its answer at once", err)
	}
	select {
	case err := <-decided:
		t.Fatalf("the acquire was decided (err %v) before n2 had a ring", err)
	default:
	}
	n2.SetRing(both)
	if err := <-decided; err != nil {
		t.Fatalf("the acquire once n2 has its ring: %v", err)
	}
	if got := remaining(t, n2, key); got != 9 {
		t.Fatalf("%d requests admitted at n2 after the forwarded one, want exactly 9", got)
	}
}

// A forwarded call is decided on the connection's reader only when it needs
// no waiting and no network: at this partition's custodian, and, while the
// partition's fetch hint lasts (after its custodian died, or the cluster
// started), only for a key already here. (Every call was sent to a goroutine
// of its own for the hint's three minutes, a fresh stack each.)
func TestInlineOnlyWhatIsDecidedAtOnce(t *testing.T) {
	nodes := newNodes(t, 2, tenRequests)
	n1, n2 := nodes[0], nodes[1]
	both := ringOf(t, n1, n2)
	n1.SetRing(both)
	n2.SetRing(both)
	here := keysMoving(both, both, "n1", "n1", 1)[0]
	there := keysMoving(both, both, "n2", "n2", 1)[0]
	call := func(key string) *Call { return &Call{Op: OpAcquire, Key: key, Hops: 1} }
	g := &n1.tr.Load().gates[both.Partition(here)]
	g.fetch.Store(&fetchHint{until: n1.cfg.Now().Add(time.Hour)})
	if n1.inline(call(here)) {
		t.Fatal("a key not yet here, under a fetch hint, inline: its network lookup would hold the reader")
	}
	if a, err := n1.Do(context.Background(), Call{Op: OpAcquire, Key: here}); err != nil || !a.Decision.Allowed {
		t.Fatalf("first acquire: %+v %v", a, err)
	}
	if !n1.inline(call(here)) {
		t.Fatal("a key already here, under a fetch hint, not inline")
	}
	if n1.inline(call(there)) {
		t.Fatal("a key of another custodian inline: it is forwarded, which waits")
	}
	if n1.inline(&Call{Op: OpAcquire, Key: here, Hops: 1, Req: limiter.Request{Wait: time.Second}}) {
		t.Fatal("an acquire that may wait inline")
	}
	// With sync replication a change waits for its backup's
	// acknowledgement, which arrives on another connection, whose reader
	// may itself be waiting on this one (the crash test's survivors
	// declared each other down for ten seconds).
	synced := newNodes(t, 2, tenRequests, func(c *Config) { c.ReplicationSync = true })
	s1 := synced[0]
	both = ringOf(t, synced...)
	s1.SetRing(both)
	synced[1].SetRing(both)
	here = keysMoving(both, both, "n1", "n1", 1)[0]
	if a, err := s1.Do(context.Background(), Call{Op: OpAcquire, Key: here}); err != nil || !a.Decision.Allowed {
		t.Fatalf("first acquire under sync replication: %+v %v", a, err)
	}
	s1.tr.Load().gates[both.Partition(here)].fetch.Store(nil)
	if s1.inline(call(here)) {
		t.Fatal("a decision under sync replication inline")
	}
}
