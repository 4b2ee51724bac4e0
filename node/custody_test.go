package node

import (
	"context"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Scripted steps of the custody machine, for what the simulation does not
// pin down on its own.

// A joiner hears of offers before it hears of the cluster: an offer from a
// member its view does not show yet is installed and acknowledged, not
// dropped (dropping it only delayed handovers, which the simulation does
// not measure, so no seed catches it).
func TestCustodyJoinerInstallsOfferBeforeItsView(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	m.Step(custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 1, Epoch: 1, State: []byte{0}})
	rd := m.Ready()
	if len(rd.Install) != 1 || rd.Install[0].Part != 1 {
		t.Fatalf("installs %+v, want partition 1", rd.Install)
	}
	if len(rd.Msgs) != 1 || rd.Msgs[0].Kind != msgAck || rd.Msgs[0].To != "n1" || rd.Msgs[0].Epoch != 1 {
		t.Fatalf("messages %+v, want one ack of epoch 1 to n1", rd.Msgs)
	}
	if !m.Holds(1) || m.Route(1).Mode != routeLocal {
		t.Fatalf("holds %v, route %+v: want custodian, admitting", m.Holds(1), m.Route(1))
	}
}

// An offer from a member this one saw leave the membership is dropped: its
// partitions may have been restored elsewhere since.
func TestCustodyDropsOffersFromGoneMembers(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	owners := []string{"n2", "n2", "n2", "n2"}
	m.SetView(custodyView{Owners: owners, Alive: map[string]bool{"n1": true, "n2": true}})
	m.SetView(custodyView{Owners: owners, Alive: map[string]bool{"n2": true}})
	m.Ready()
	m.Step(custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 1, Epoch: 9, State: []byte{0}})
	if rd := m.Ready(); len(rd.Install) != 0 || len(rd.Msgs) != 0 {
		t.Fatalf("an offer from a gone member led to %+v", rd)
	}
}

// A duplicate offer is acknowledged again and installs nothing.
func TestCustodyDuplicateOfferIsAckedOnly(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	offer := custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 2, Epoch: 3, State: []byte{0}}
	m.Step(offer)
	m.Ready()
	m.Step(offer)
	rd := m.Ready()
	if len(rd.Install) != 0 || len(rd.Msgs) != 1 || rd.Msgs[0].Kind != msgAck || rd.Msgs[0].Epoch != 3 {
		t.Fatalf("duplicate offer led to %+v, want one ack and no install", rd)
	}
}

// A fenced machine routes every partition to routeFenced, hands back the
// snapshots frozen for handovers not yet acknowledged, and ignores what it
// is fed afterwards.
func TestCustodyFenceRetiresTheMachine(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	m.Step(custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 1, Epoch: 1, State: []byte{0}})
	m.Step(custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 3, Epoch: 1, State: []byte{0}})
	m.Ready()
	// Partition 3 is being handed to n3, frozen and not yet acknowledged.
	m.SetView(custodyView{Owners: []string{"n2", "n2", "n2", "n3"}, Alive: map[string]bool{"n2": true, "n3": true}})
	for _, p := range m.Ready().Freeze {
		m.Frozen(p, []byte{7})
	}
	m.Ready()
	frozen := m.Fence()
	if len(frozen) != 1 || frozen[0].Part != 3 || string(frozen[0].State) != "\x07" {
		t.Fatalf("fence returned %+v, want partition 3's frozen snapshot", frozen)
	}
	if rd := m.Ready(); len(rd.Routes) != 4 || len(rd.Msgs)+len(rd.Freeze)+len(rd.Install)+len(rd.Restore) != 0 {
		t.Fatalf("after the fence: %+v, want every route and nothing else", rd)
	}
	m.Step(custodyMsg{Kind: msgAck, From: "n3", To: "n2", Part: 3, Epoch: 2})
	m.Tick()
	m.SetView(custodyView{Owners: []string{"n2", "n2", "n2", "n2"}, Alive: map[string]bool{"n2": true}})
	if rd := m.Ready(); len(rd.Routes)+len(rd.Msgs)+len(rd.Freeze)+len(rd.Install)+len(rd.Restore) != 0 {
		t.Fatalf("a fenced machine acted on its input: %+v", rd)
	}
	for p := range 4 {
		if r := m.Route(p); r.Mode != routeFenced {
			t.Fatalf("partition %d routes %+v, want fenced", p, r)
		}
	}
	if m.Fence() != nil || !m.Fenced() {
		t.Fatal("a second fence returned snapshots, or the machine is not fenced")
	}
}

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
	p := n1.peer(n2.PeerAddr())
	eventually(t, "the forwarded acquire reaches n2", func() bool { return p.stats.calls.Load() > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.call(ctx, &Call{Op: OpPing}); err != nil {
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
