package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// Network splits (see custody.Quorum for the rule). A member joined through
// gossip keeps two watches on the membership counted:
//
//   - The mandate, extended by heartbeats every heartbeatInterval: a member
//     that has not heard from a majority within mandateTerm stops deciding
//     for the partitions it holds (Do fails with ErrMinority, the caller
//     falls back to its degraded share, as a debt) until it hears from a
//     majority again. Nothing else changes: a stall or a short cut costs
//     fallback answers, never state. The mandate is shorter than gossip's
//     failure detection, so the side without a majority stops admitting
//     exactly before the other side restores its partitions.
//   - The view: when gossip shows a membership without a majority, the
//     member fences itself (fence): it gives up custody of everything,
//     hands each key's admissions that the majority side may lack to the
//     fence sink (the router keeps them as debts, paid to the keys' owners
//     once the sides merge), and takes a new incarnation. The majority side
//     restores those partitions from their replicas; when the network
//     heals, this member rejoins as a new member with no custody, and the
//     debts bring the two histories together: what the majority restored,
//     what it admitted since, and what this side admitted beyond it.
//
// What the majority may lack (owed): a key's admissions beyond the copy its
// backup acknowledged, when that backup is presumed on the majority side (a
// counted member missing from the fencing view); everything the key counts
// when it is not (the backup is on this side of the split, departed, or
// never acknowledged a copy). Keys frozen in a handover not yet
// acknowledged are owed the same way: the taker may never have installed
// them. Owing too much charges a key twice (fewer admissions later, never
// more than the limit); owing too little would lose admissions. The
// replicas this member holds for others are kept: one may be the last copy
// of a partition whose custodian crashed.

// ErrMinority is returned (wrapped) by Do while this member cannot reach a
// majority of the membership: the caller falls back, as for a transfer
// still pending.
var ErrMinority = fmt.Errorf("no majority of the cluster's members reachable: %w", ErrTransferPending)

const (
	// heartbeatInterval is how often the mandate is checked, and a member
	// not heard from within heartbeatQuiet is pinged.
	heartbeatInterval = 100 * time.Millisecond
	heartbeatQuiet    = 200 * time.Millisecond
)

// mandateTerm is how long a member may go without hearing from a majority
// before it stops deciding: the peer liveness interval plus slack for a
// few heartbeats.
func (n *Node) mandateTerm() time.Duration { return n.cfg.Forward.Liveness + 4*heartbeatInterval }

// FenceSink receives, for one key, what this member admitted (or was
// charged) since the key's last acknowledged replication, when it fences
// itself: requests and tokens, the latest at time at.
type FenceSink func(key string, requests, tokens int64, at time.Time)

// OnFence sets where fenced keys' unreplicated admissions go (the router's
// debts). Set it before Join.
func (n *Node) OnFence(sink FenceSink) { n.fenceSink.Store(&sink) }

// Fenced reports whether this member is fenced off: its last view had no
// majority, or it has not rejoined as a new incarnation yet.
func (n *Node) Fenced() bool { return n.fenced.Load() }

// Mandated reports whether this member holds the majority's mandate now:
// it has heard from a majority of the membership counted within
// mandateTerm. The mandate ends at a moment fixed when it was last
// extended (mandateUntil, on the
// process's monotonic clock), so a process that stalls stops deciding the
// moment it wakes, before its heartbeat runs again. Always true for a
// member not joined through gossip.
func (n *Node) Mandated() bool {
	return !n.gossiped.Load() || n.mono() < n.mandateUntil.Load()
}

// mono is the process's monotonic clock, in nanoseconds since New.
func (n *Node) mono() int64 { return n.cfg.Clock.Mono() }

// Sharers is how many members may be answering from their fallback shares
// at once, which the shares divide by: the membership the majority rule
// counts, which keeps members that died or were cut off (so the side of a
// split that saw the others go one by one does not give itself bigger
// shares), and at least the ring's members.
func (n *Node) Sharers() int {
	n.tmu.Lock()
	defer n.tmu.Unlock()
	s := n.quorum.Counted()
	if r := n.ring.Load(); r != nil {
		s = max(s, len(r.Members()))
	}
	return s
}

// heartbeat pings the counted members not heard from lately and extends
// the mandate. Before letting a held mandate lapse it asks the silent members once
// more and waits a moment for their answers: under load, answers already
// received may not have been read yet.
//
// It also watches for stalls of this process: the time since the last
// heartbeat ended. A stall longer than the mandate's term has let the
// mandate end (Mandated is false from the moment the process wakes); one longer than
// deadAfter may have made the others declare this member dead and
// restore what it holds, so it fences itself (stalled).
func (n *Node) heartbeat() {
	if !n.gossiped.Load() {
		return
	}
	start := n.mono()
	defer func() { n.lastBeat = n.mono() }()
	dead := n.deadAfter.Load()
	if gap := start - n.lastBeat; dead > 0 && gap > dead && n.stalled(time.Duration(gap)) {
		return // a stall since the last heartbeat
	}
	end, silent := n.mandateNow()
	for _, addr := range silent {
		n.peers.Heartbeat(addr)
	}
	if end <= n.mono() && n.Mandated() {
		ctx, cancel := context.WithTimeout(context.Background(), mandateRecheck)
		var wg sync.WaitGroup
		for _, addr := range silent {
			if n.cfg.Stepped { // one at a time: the simulation owns the order
				_, _ = n.peers.Call(ctx, addr, &Call{Op: peer.OpPing})
				continue
			}
			wg.Go(func() { _, _ = n.peers.Call(ctx, addr, &Call{Op: peer.OpPing}) })
		}
		wg.Wait()
		cancel()
		end, _ = n.mandateNow()
	}
	// A majority heard again after a silence longer than dead (a cut, then
	// a stall shorter than dead: the others may have declared this member
	// dead meanwhile) fences it rather than renew its mandate. The silence
	// is measured from the last heartbeat that heard a majority, so
	// answers that waited out a stall in the socket do not hide it. A
	// member already fenced (a cut's minority view) waits to rejoin as a
	// new member instead, and a cut it merely sits out fences it once, by
	// its view.
	if gap := n.mono() - n.majorityAt.Load(); dead > 0 && end > n.mono() && !n.fenced.Load() && gap > dead && n.stalled(time.Duration(gap)) {
		return
	}
	n.mandateUntil.Store(end)
	if from := end - int64(n.mandateTerm()); end > 0 && from > n.majorityAt.Load() {
		n.majorityAt.Store(from)
	}
	if ok := end > n.mono(); ok != n.wasMandated {
		n.wasMandated = ok
		if ok {
			n.log.Info("a majority of the members is reachable again: deciding here again")
		} else {
			n.log.Warn("no majority of the members heard from lately: not deciding here, callers fall back", "mandate_term", n.mandateTerm())
		}
	}
}

// stalled fences this member after its process stalled for gap, longer than
// the others take to declare a silent member dead (a long GC pause, a
// frozen VM, SIGSTOP). They may have restored its partitions from their
// backups and admitted since; memberlist refutes its death when it wakes,
// under the same name and boot id, and its own view may never have
// changed. So it must not decide again on the state it held: it gives up
// custody as a fenced minority does, owing each key what it counted beyond
// the copy its backups acknowledged (the copy the others restored from),
// and rejoins as a new member, which the others hand back exactly what
// they hold. A member already fenced, waiting to rejoin, gives up the
// incarnation it announced too (the others may have declared it dead in
// turn) and announces another. A member its gossip shows alone has nobody
// to be declared dead by, and carries on (the views it installed may lag
// behind its gossip: members may have joined through it just before the
// stall). It reports whether it fenced.
func (n *Node) stalled(gap time.Duration) bool {
	if f := n.gossipMembers.Load(); f == nil || (*f)() < 2 {
		return false
	}
	n.tmu.Lock()
	defer n.tmu.Unlock()
	n.log.Warn("this process stalled longer than the cluster takes to declare a member dead: rejoining as a new member",
		"stall", gap.Round(time.Millisecond), "dead_after", time.Duration(n.deadAfter.Load()), "boot_id", n.announced)
	n.abandon(n.announced)
	n.fence([]custody.Member{{Member: ring.Member{Name: n.cfg.Name}}}, "stalled")
	select {
	case n.reincarnate <- struct{}{}:
	default:
	}
	return true
}

// heardFrom is when a call last arrived from the member at peer address
// addr: the peer server's record, or, over a Config.Transport, the
// transport's when it keeps one (an InboundTransport).
func (n *Node) heardFrom(addr string) time.Time {
	if n.server != nil {
		return n.server.HeardFrom(addr)
	}
	if in, ok := n.peers.(InboundTransport); ok {
		return in.HeardFrom(addr)
	}
	return time.Time{}
}

// InboundTransport is a Config.Transport that also says when a call last
// arrived from a peer (peer.Server.HeardFrom does over TCP): such calls
// count as hearing from it for the mandate.
type InboundTransport interface {
	peer.Transport
	HeardFrom(addr string) time.Time
}

// abandon gives up the incarnation boot for good: views showing it are not
// installed. Callers hold tmu.
func (n *Node) abandon(boot string) {
	if n.abandoned == nil {
		n.abandoned = map[string]bool{}
	}
	n.abandoned[boot] = true
}

// mandateRecheck is how long a lapsing mandate waits for the silent members'
// answers to one more ping.
const mandateRecheck = 500 * time.Millisecond

// mandateNow returns when the mandate that what was heard so far gives
// ends, on the mono clock (at or before now: no majority heard within the
// mandate's term), and the counted members not heard from lately.
func (n *Node) mandateNow() (end int64, silent []string) {
	now, mono := n.cfg.Clock.Now(), n.mono()
	n.tmu.Lock()
	defer n.tmu.Unlock()
	addrs := make(map[string]string, len(n.members))
	for _, m := range n.members {
		addrs[m.Name] = m.Peer
	}
	until := n.quorum.MandateEnd(n.cfg.Name, now, n.mandateTerm(), func(name string) (time.Time, bool) {
		addr := addrs[name]
		if addr == "" {
			return time.Time{}, false
		}
		at := n.peers.HeardAt(addr)
		if now.Sub(at) > heartbeatQuiet {
			silent = append(silent, addr)
		}
		// Its own calls to us count too: under load our pings may wait
		// behind our work, while its forwards keep coming.
		if in := n.heardFrom(addr); in.After(at) {
			at = in
		}
		return at, true
	})
	if until.IsZero() {
		return 0, silent
	}
	return mono + int64(until.Sub(now)), silent
}

// fence gives up custody of everything this member holds, after its view
// (members) lost the majority, or after a stall (why says which): every partition stops admitting here, and
// what the majority may lack of each key goes to the fence sink. The
// replicas held for others stay (see the top of this file). The caller
// takes a new incarnation next. Callers hold tmu.
func (n *Node) fence(members []custody.Member, why string) {
	if n.fenced.Swap(true) {
		return
	}
	n.fences.Add(1)
	var keys, debts int
	if t := n.tr.Load(); t != nil {
		// A backup's copy is on the majority side only if its member is
		// counted (not departed) and missing from this side's view.
		keys, debts = t.retire(n.quorum.Elsewhere(members))
		n.retired = append(n.retired, t)
	}
	n.dirty.Drain()
	n.log.Warn("fenced: serving degraded shares as debts until this process rejoins as a new member",
		"why", why, "keys", keys, "keys_owed", debts)
}

// retire stops the custody machine for good (after a fence): every
// partition's route becomes custody.RouteFenced (custody.Fence), and the table and
// the snapshots frozen for a handover are emptied, each key's owed admissions going to the
// fence sink (see owed). It returns how many keys there were and how many
// owed something.
func (t *transfer) retire(elsewhere func(member string) bool) (keys, debts int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := range t.gates {
		t.gates[p].mu.Lock()
	}
	defer func() {
		for p := range t.gates {
			t.gates[p].mu.Unlock()
		}
	}()
	frozen := t.m.Fence()
	t.apply() // publishes every partition's fenced route
	n := t.n
	var sink FenceSink
	if s := n.fenceSink.Load(); s != nil {
		sink = *s
	}
	owe := func(key string, state []byte) {
		keys++
		if sink != nil && n.owed(key, state, elsewhere, sink) {
			debts++
		}
	}
	now := n.cfg.Now()
	n.table.Range(func(key string) bool {
		if state, ok := n.takeOut(key, now); ok {
			owe(key, state)
		}
		return true
	})
	for _, f := range frozen {
		err := peer.DecodeEntries(f.State, func(key string, state []byte) error { owe(key, state); return nil })
		if err != nil {
			n.log.Error("fence: bad frozen partition", "partition", f.Part, "err", err)
		}
	}
	n.acked.Clear()
	return keys, debts
}

// owed hands to sink what key's state counts that the majority side may
// lack, summed, at the latest bucket's time: beyond the copy its backup
// acknowledged when elsewhere says that backup is on the majority side,
// else all of it. It reports whether there was anything.
func (n *Node) owed(key string, state []byte, elsewhere func(member string) bool, sink FenceSink) bool {
	lim, pol := n.cfg.LimitsFor(key), &n.cfg.Policy
	cur, err := limiter.RestoreBudget(state, lim, pol)
	if err != nil {
		return false
	}
	var base *limiter.Budget
	if ack, ok := n.acked.Get(key); ok && slices.ContainsFunc(ack.By, elsewhere) {
		base, _ = limiter.RestoreBudget(ack.State, lim, pol) // unreadable: everything counts
	}
	var req, tok int64
	var at time.Time
	cur.Since(base, func(t time.Time, r, k int64) {
		req, tok, at = req+r, tok+k, t
	})
	if req == 0 && tok == 0 {
		return false
	}
	sink(key, req, tok, at)
	return true
}
