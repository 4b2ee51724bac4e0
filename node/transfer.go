package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// transfer is the thin shell around the custody machine (custody.Machine): it
// owns the machine's lock, turns memberships into views, carries the
// machine's messages over the peer protocol, freezes and installs
// partitions in the limiter table, and publishes each partition's route to
// the hot path. It holds no lock across network I/O: messages leave on
// goroutines of their own, and a lost one is resent by the machine.
type transfer struct {
	n     *Node
	self  string // this member's id: name, or name/boot id
	gates []gate

	mu    sync.Mutex // guards m, addrs, ring, rings
	m     *custody.Machine
	addrs map[string]string // member id → peer address
	ring  *ring.Ring        // the ring of the current view (leaving members excluded)
	// rings are the last ringHistory distinct rings, newest last (ring
	// among them): who backed a partition up while its custodian lived.
	// Two crashes may reach the view one at a time, so the ring the dead
	// custodian was owner in can be more than one change old.
	rings []*ring.Ring

	sends sync.WaitGroup // messages on their way

	// offering holds the offers whose call is still under way: the
	// machine's retry resends an offer only once that call has failed
	// (TCP does not lose what it delivers), not while a large partition
	// is still being read. Guarded by mu.
	offering map[offerKey]bool
}

type offerKey struct {
	part  int
	epoch uint64
	to    string
}

// gate is one partition's door on the hot path.
type gate struct {
	// mu is held for reading while a call decides on one of the
	// partition's keys, and for writing while the shell changes the
	// partition's custody (freeze, install): so no admission slips
	// between a freeze's snapshot and the route that forwards.
	mu      sync.RWMutex
	hop     atomic.Pointer[hop]
	changed atomic.Pointer[chan struct{}] // closed when hop changes
	fetch   atomic.Pointer[fetchHint]     // set when the partition is restored (its custodian died)
}

// hop is where calls for a partition go.
type hop struct {
	mode   custody.RouteMode
	addr   string // custody.RouteForward: the peer address
	handed bool   // custody.RouteForward: custody is going (or went) there
}

// ringHistory is how many rings a transfer remembers for restores.
const ringHistory = 4

// fetchHint says where the keys of a partition restored because its
// custodian died may still be fetched from (fetchKey), key by key, until
// the window and leases have expired.
type fetchHint struct {
	backups []string // peer addresses of the members that may hold the dead custodian's copies
	until   time.Time
	// preloaded: the checkpoint's keys of the partition were installed
	// from the node's startup scan, so a key missing from the table is
	// not in the checkpoint either: no Redis read for it.
	preloaded bool
}

// transferTick is the custody machine's tick.
const transferTick = 20 * time.Millisecond

func newTransfer(n *Node, self string, partitions int) *transfer {
	t := &transfer{
		n:        n,
		self:     self,
		gates:    make([]gate, partitions),
		m:        custody.New(self, partitions, custody.Config{Retry: 5, Round: 50}), // 100ms, 1s
		addrs:    map[string]string{},
		offering: map[offerKey]bool{},
	}
	for p := range t.gates {
		t.gates[p].hop.Store(&hop{mode: custody.RouteAwait})
		ch := make(chan struct{})
		t.gates[p].changed.Store(&ch)
	}
	return t
}

// setView installs a membership: the ring of its members that are not
// leaving, and every member as alive.
func (t *transfer) setView(r *ring.Ring, members []custody.Member) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m.Fenced() {
		return // retired by a fence: feeds nothing to the machine
	}
	ids := make(map[string]string, len(members)) // name → id
	alive := make(map[string]bool, len(members)+1)
	alive[t.self] = true
	for _, m := range members {
		id := custody.MemberID(m.Name, m.Boot)
		ids[m.Name] = id
		alive[id] = true
		t.addrs[id] = m.Peer
	}
	owners := make([]string, len(t.gates))
	for p := range owners {
		if o, ok := r.PartitionOwner(p); ok {
			owners[p] = ids[o.Name]
			if owners[p] == "" {
				owners[p] = custody.MemberID(o.Name, "")
			}
		}
	}
	if t.ring == nil || t.ring.Version() != r.Version() {
		t.rings = append(t.rings, r)
		t.rings = t.rings[max(0, len(t.rings)-ringHistory):]
	}
	t.ring = r
	t.m.SetView(custody.View{Owners: owners, Alive: alive})
	t.apply()
	for p := range t.gates {
		t.publish(p) // forwards follow the new ring and addresses
	}
}

// tick advances the machine's time.
func (t *transfer) tick() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m.Fenced() {
		return // retired by a fence: feeds nothing to the machine
	}
	t.m.Tick()
	t.apply()
}

// step feeds messages from a peer to the machine.
func (t *transfer) step(msgs []custody.Msg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m.Fenced() {
		return // retired by a fence: feeds nothing to the machine
	}
	for _, msg := range msgs {
		t.m.Step(msg)
	}
	t.apply()
}

// held counts the partitions this member is custodian of.
func (t *transfer) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m.Held()
}

// stats returns the machine's counters.
func (t *transfer) stats() custody.Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m.Stats()
}

// apply carries out the machine's Ready until it has nothing more to say.
// Callers hold t.mu.
func (t *transfer) apply() {
	for {
		rd := t.m.Ready()
		if len(rd.Msgs)+len(rd.Freeze)+len(rd.Install)+len(rd.Restore)+len(rd.Routes) == 0 {
			return
		}
		if len(rd.Freeze) > 0 {
			for p, state := range t.freeze(rd.Freeze) {
				t.m.Frozen(p, state)
			}
		}
		for _, in := range rd.Install {
			t.install(in)
		}
		for _, p := range rd.Restore {
			t.n.fault("restore")
			t.noteFetch(p)
			t.n.restorePartition(&t.gates[p], p)
			t.m.Restored(p)
		}
		for _, p := range rd.Routes {
			t.publish(p)
		}
		// Last: an acknowledgement leaves only once its partition is
		// installed, and offers are only made after their freeze.
		t.send(rd.Msgs)
	}
}

// publish makes partition p's current route the hot path's, and wakes the
// calls waiting for it to change. Callers hold t.mu.
func (t *transfer) publish(p int) {
	r := t.m.Route(p)
	h := &hop{mode: r.Mode, handed: r.Handed}
	if r.Mode == custody.RouteForward {
		h.addr = t.addrs[r.To]
	}
	g := &t.gates[p]
	if old := g.hop.Load(); *old == *h {
		return
	}
	g.hop.Store(h)
	ch := make(chan struct{})
	close(*g.changed.Swap(&ch))
}

// freeze stops admitting for partitions ps and snapshots their keys out of
// the table, one blob per partition. Waiters queued on those keys are told
// to follow their key (local.moveAll). Callers hold t.mu.
func (t *transfer) freeze(ps []int) map[int][]byte {
	t.n.fault("freeze")
	want := make(map[int]bool, len(ps))
	for _, p := range ps {
		g := &t.gates[p]
		g.mu.Lock()
		want[p] = true
		t.publish(p) // forward from now on
	}
	defer func() {
		for _, p := range ps {
			t.gates[p].mu.Unlock()
		}
	}()
	var keys []string
	t.n.table.Range(func(key string) bool {
		if want[t.ring.Partition(key)] {
			keys = append(keys, key)
		}
		return true
	})
	now := t.n.cfg.Now()
	entries := make(map[int][]byte, len(ps))
	counts := make(map[int]uint64, len(ps))
	for _, key := range keys {
		state, ok := t.n.takeOut(key, now)
		if !ok {
			continue // swept meanwhile: idle, nothing to hand on
		}
		p := t.ring.Partition(key)
		entries[p] = peer.AppendEntry(entries[p], key, state)
		counts[p]++
	}
	blobs := make(map[int][]byte, len(ps))
	for _, p := range ps {
		blobs[p] = append(binary.AppendUvarint(nil, counts[p]), entries[p]...)
	}
	return blobs
}

// install puts a partition's snapshot into the table and admits for it
// from now on. Callers hold t.mu.
func (t *transfer) install(in custody.Install) {
	t.n.fault("install")
	g := &t.gates[in.Part]
	g.mu.Lock()
	defer g.mu.Unlock()
	now := t.n.cfg.Now()
	err := peer.DecodeEntries(in.State, func(key string, state []byte) error {
		if err := t.n.table.Put(key, state, now); errors.Is(err, limiter.ErrFutureState) {
			// Dated beyond our clock + MaxClockSkew: not applied (it would
			// refuse the key until then); the key starts from zero, the
			// partition's other keys are still installed.
			t.n.log.Error("handoff: key state from the future rejected", "partition", in.Part, "key", key, "err", err)
			return nil
		} else if err != nil {
			return fmt.Errorf("install %q: %w", key, err)
		}
		t.n.dirty.Mark(key) // replicate to its backup here
		return nil
	})
	if err != nil {
		// Only a peer with a different build sends what we cannot read:
		// the keys read so far are kept, the rest start from zero.
		t.n.log.Error("handoff: bad partition state received", "partition", in.Part, "err", err)
	}
	t.publish(in.Part)
}

// noteFetch remembers where partition p's keys may be fetched from, one by
// one on first use: its custodian died, and p is being restored here. The
// copies are at the custodian's backups in a ring where it was p's owner:
// every recent ring's backups of p are asked, and the newest copy wins.
// Callers hold t.mu.
func (t *transfer) noteFetch(p int) {
	var backups []string
	for _, r := range slices.Backward(t.rings) {
		for _, b := range r.PartitionBackups(p, t.n.cfg.ReplicationCopies) {
			if !slices.Contains(backups, b.Peer) {
				backups = append(backups, b.Peer)
			}
		}
	}
	if len(backups) == 0 && t.n.cfg.Checkpoint == nil {
		// Nowhere to recover from (a lone node without a checkpoint): a
		// hint would only cost every decision a second table lookup.
		t.gates[p].fetch.Store(nil)
		return
	}
	t.gates[p].fetch.Store(&fetchHint{backups: backups, until: t.n.cfg.Now().Add(t.n.cfg.HandoffHorizon)})
}

// fault passes a fault point (Config.FaultPoint).
func (n *Node) fault(where string) {
	if n.cfg.FaultPoint != nil {
		n.cfg.FaultPoint(where)
	}
}

// send delivers messages, one batch per peer, each on its own goroutine.
// Callers hold t.mu.
func (t *transfer) send(msgs []custody.Msg) {
	if len(msgs) == 0 {
		return
	}
	// Small messages to one peer share a call; each offer (a partition's
	// keys, megabytes for a busy partition) travels in its own.
	var batches []struct {
		addr string
		msgs []custody.Msg
	}
	small := map[string]int{} // peer → index in batches
	for _, msg := range msgs {
		addr := t.addrs[msg.To]
		if addr == "" {
			continue
		}
		if msg.Kind == custody.MsgOffer {
			k := offerKey{msg.Part, msg.Epoch, msg.To}
			if t.offering[k] {
				continue
			}
			t.offering[k] = true
		}
		if i, ok := small[addr]; ok && msg.Kind != custody.MsgOffer {
			batches[i].msgs = append(batches[i].msgs, msg)
			continue
		}
		if msg.Kind != custody.MsgOffer {
			small[addr] = len(batches)
		}
		batches = append(batches, struct {
			addr string
			msgs []custody.Msg
		}{addr, []custody.Msg{msg}})
	}
	for _, batch := range batches {
		addr, body := batch.addr, custody.AppendMsgs(nil, batch.msgs)
		deliver := func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := t.n.peers.Call(ctx, addr, &Call{Op: peer.OpTransfer, From: t.n.PeerAddr(), State: body})
			if err != nil {
				t.n.log.Debug("handoff: message not delivered; the machine resends", "peer", addr, "err", err)
			}
			return err == nil
		}
		if t.n.cfg.Stepped {
			// The simulation's transport queues the message and returns:
			// sent from here, in order, under t.mu.
			deliver()
			if m := batch.msgs[0]; m.Kind == custody.MsgOffer {
				delete(t.offering, offerKey{m.Part, m.Epoch, m.To})
			}
			continue
		}
		t.sends.Add(1)
		go func() {
			defer t.sends.Done()
			deliver()
			if m := batch.msgs[0]; m.Kind == custody.MsgOffer {
				t.mu.Lock()
				delete(t.offering, offerKey{m.Part, m.Epoch, m.To})
				t.mu.Unlock()
			}
		}()
	}
}
