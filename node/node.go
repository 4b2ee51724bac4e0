package node

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/allot"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/node/replica"
	"github.com/tokenring/tokenring/ring"
)

// ErrNoOwner is returned when a call cannot reach a node that considers
// itself the key's owner within MaxHops.
var ErrNoOwner = errors.New("no owner within hop limit")

// Node is one cluster member. Its methods are safe for concurrent use.
type Node struct {
	cfg   Config
	table *limiter.Table
	local *local
	log   *slog.Logger

	ring      atomic.Pointer[ring.Ring] // nil until the first membership snapshot: everything is local
	ready     atomic.Bool               // joined and the first ring installed
	settled   atomic.Bool               // Ready once: every owned partition arrived
	leaving   atomic.Bool               // Drain ran: own nothing, hand everything on
	stripes   [64]sync.Mutex            // serialise fetches of the same key (fetchKey)
	seed      maphash.Seed
	tmu       sync.Mutex                      // guards tr's creation
	tr        atomic.Pointer[transfer]        // custody of partitions; nil until the first ring
	firstRing chan struct{}                   // closed once tr is set and its first view installed
	members   []custody.Member                // the last membership, for Drain; guarded by tmu
	viewSig   string                          // the last membership's ring version and members; guarded by tmu
	dirty     *replica.Dirty                  // keys changed since the last replication round
	preload   atomic.Pointer[replica.Preload] // the checkpoint as it was at start (restore.go); nil once dropped
	inflight  atomic.Int32                    // replication rounds under way
	replicas  *replica.Store                  // copies held for other owners
	acked     *replica.Acked                  // each key's state its backup last acknowledged (fence.go)
	repl      *replica.Replicator             // copies keys to their backups and the checkpoint, fetches a crashed owner's (replication.go)
	server    *peer.Server                    // the peer protocol's listener: calls forwarded here (serve.go); nil with Config.Transport
	peers     peer.Transport                  // the connections to peers this node forwards to
	addr      string                          // this node's peer address
	tasks     []*task                         // the periodic work (every); read-only after New
	peerStats peer.Stats                      // both's traffic
	counts    counters                        // what the node's own machinery did, for metrics (metrics.go)

	// Splits (fence.go, custody.Quorum): only for members joined through gossip.
	gossiped      atomic.Bool                 // Join ran: the quorum rules apply
	quorum        *custody.Quorum             // guarded by tmu
	mandateUntil  atomic.Int64                // mono when the majority's mandate ends (fence.go)
	majorityAt    atomic.Int64                // mono this member last heard from a majority, as of its last heartbeat (fence.go)
	lastBeat      int64                       // mono at the end of the last heartbeat; heartbeat's goroutine only
	wasMandated   bool                        // the last heartbeat's verdict, for its logs; heartbeat's goroutine only
	deadAfter     atomic.Int64                // the least silence (ns) after which gossip may declare this member dead; 0: never
	fenced        atomic.Bool                 // gave up custody; waiting to rejoin as a new incarnation
	abandoned     map[string]bool             // boot ids this process gave up (fenced, or stalled as): never a member again; guarded by tmu
	announced     string                      // the boot id gossip shows for this process; guarded by tmu
	gossipMembers atomic.Pointer[func() int]  // how many members gossip shows now, this one included (Join)
	retired       []*transfer                 // machines retired by fences; guarded by tmu
	reincarnate   chan struct{}               // fence asks Join's loop for a new boot id
	fenceSink     atomic.Pointer[FenceSink]   // where fenced keys' unreplicated admissions go
	releaseSink   atomic.Pointer[ReleaseSink] // where the statuses of keys leaving the table go
	fences        atomic.Int64                // fences so far

	stop      chan struct{}
	bgMu      sync.Mutex    // orders background's start against Close
	holder    *allot.Holder // this node's slices of hot keys (allot.go); nil when HotKeyRate is negative
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// ErrTransferPending is returned (wrapped) by Do when the call's key is in
// a partition whose state is on its way to this node and did not arrive
// within the transfer's deadline. The caller falls back, as for an
// unreachable owner: nobody admits against the key meanwhile.
var ErrTransferPending = errors.New("partition state in transfer")

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("node closed")

// New starts a node: the peer listener and the sweeper.
func New(cfg Config) (*Node, error) {
	if cfg.Name == "" {
		return nil, errors.New("node: Name is required")
	}
	if cfg.LimitsFor == nil {
		return nil, errors.New("node: LimitsFor is required")
	}
	cfg = cfg.withDefaults()
	auth, err := cfg.peerAuth()
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	var ln net.Listener
	if cfg.Transport == nil {
		if ln, err = cfg.Listen("tcp", cfg.PeerAddr); err != nil {
			return nil, fmt.Errorf("node %s: listen peer %s: %w", cfg.Name, cfg.PeerAddr, err)
		}
	}
	table := limiter.NewTable(cfg.Policy, cfg.LimitsFor)
	table.SetMaxKeys(cfg.MaxKeys)
	table.SetMaxClockSkew(cfg.MaxClockSkew)
	n := &Node{
		cfg:         cfg,
		table:       table,
		local:       newLocal(cfg.Name, table, cfg.Now),
		log:         cfg.Logger.With("node", cfg.Name),
		stop:        make(chan struct{}),
		firstRing:   make(chan struct{}),
		quorum:      custody.NewQuorum(custody.ForgetAfter),
		reincarnate: make(chan struct{}, 1),
	}
	n.mandateUntil.Store(n.mono() + int64(n.mandateTerm())) // a node starts mandated
	n.majorityAt.Store(n.mono())
	n.seed = maphash.MakeSeed()
	n.local.sweepEvery = cfg.SweepInterval
	n.local.changed = n.changed
	n.local.guard = n.guard
	n.dirty, n.acked = replica.NewDirty(), &replica.Acked{}
	n.replicas = &replica.Store{Check: n.checkReplica, Log: n.log}
	if ln != nil {
		n.addr = ln.Addr().String()
		n.peers = n.newPool(n.addr, auth)
	} else {
		n.addr, n.peers = cfg.PeerAddr, cfg.Transport
	}
	n.repl = n.newReplicator(n.addr)
	if cfg.HotKeyRate > 0 {
		n.holder = allot.NewHolder(cfg.HotKeyRate)
	}
	if ln != nil {
		n.server = n.newServer(ln, auth) // last: it serves at once
	}
	n.every(cfg.SweepInterval, n.sweep)
	n.every(transferTick, func() {
		if t := n.tr.Load(); t != nil {
			t.tick()
		}
	})
	n.every(heartbeatInterval, n.heartbeat)
	if n.holder != nil {
		n.every(allotSweepInterval, n.sweepAllotments)
		if !cfg.Stepped {
			n.wg.Go(n.refilling)
		}
	}
	if cfg.ReplicationInterval > 0 {
		n.every(cfg.ReplicationInterval, func() {
			n.replicateOnce()
			n.replicas.Expire(n.cfg.Now(), n.cfg.HandoffHorizon)
		})
	}
	return n, nil
}

// Name is this member's name.
func (n *Node) Name() string { return n.cfg.Name }

// PeerAddr is the address the peer protocol listens on.
func (n *Node) PeerAddr() string { return n.addr }

// Ring is the current ring, nil before the first membership snapshot.
func (n *Node) Ring() *ring.Ring { return n.ring.Load() }

// SetRing installs r as the membership: its members are alive, with no
// boot ids and none leaving. Join does this from gossip; tests call it.
func (n *Node) SetRing(r *ring.Ring) {
	members := make([]custody.Member, 0, len(r.Members()))
	for _, m := range r.Members() {
		members = append(members, custody.Member{Member: m})
	}
	n.setMembers(r, members, "")
}

// setMembers installs a membership: r is the ring of the members that are
// not leaving; self's boot id names this process to custody.
//
// A member joined through gossip installs only views that hold a majority
// of the membership (custody.Quorum); a view without one fences it (fence.go).
// A fenced member installs nothing until a majority view shows it under a
// new boot id, and then starts over as that new member.
func (n *Node) setMembers(r *ring.Ring, members []custody.Member, boot string) {
	n.tmu.Lock()
	defer n.tmu.Unlock()
	if n.gossiped.Load() && !n.quorum.Observe(members, n.cfg.Now()) {
		if !n.fenced.Load() {
			n.abandon(boot)
			n.fence(members, "no majority in view")
			select {
			case n.reincarnate <- struct{}{}:
			default:
			}
		}
		return // keep the last majority's ring and members: the degraded shares divide by them
	}
	if n.announced == "" {
		n.announced = boot // the first view; Join's loop records each new incarnation
	}
	t := n.tr.Load()
	if n.fenced.Load() {
		if n.abandoned[boot] {
			return // the majority still knows an incarnation given up: wait for the new one
		}
		t = nil
	}
	if t == nil {
		t = newTransfer(n, custody.MemberID(n.cfg.Name, boot), r.PartitionCount())
		n.tr.Store(t)
		if n.fenced.Swap(false) {
			n.majorityAt.Store(n.mono()) // a majority's view shows the new incarnation
			n.log.Info("rejoined as a new member after a fence", "boot_id", boot)
		} else {
			defer close(n.firstRing) // once the first view is installed
		}
	}
	n.members = members
	n.ring.Store(r)
	t.setView(r, members)
	live := make(map[string]bool, len(members))
	for _, m := range members {
		live[m.Peer] = true
	}
	n.peers.Keep(live) // close the connections to peers not in the membership
	if n.holder != nil {
		n.holder.Recall(n.cfg.Now()) // an owner may have crashed: give back again (allot.Holder.Recall)
	}
}

// LimitsChanged tells the node that Config.LimitsFor may now give other
// limits (a config reload): every key it holds takes them at its next
// decision, keeping what its window counted (limiter.Table.LimitsChanged).
func (n *Node) LimitsChanged() { n.table.LimitsChanged() }

// Keys reports how many keys this node holds state for.
func (n *Node) Keys() int { return n.table.Len() }

// Waiting reports how many requests are queued on this node.
func (n *Node) Waiting() int { return n.local.waiting() }

// Owner returns the member owning key and whether that is this node. With no
// ring yet, this node owns everything.
func (n *Node) Owner(key string) (ring.Member, bool) {
	r := n.ring.Load()
	if r == nil {
		return ring.Member{Name: n.cfg.Name, Peer: n.PeerAddr()}, true
	}
	m, ok := r.Owner(key)
	if !ok {
		return ring.Member{Name: n.cfg.Name, Peer: n.PeerAddr()}, true
	}
	return m, m.Name == n.cfg.Name
}

// Do executes call at its key's owner: here when this node is custodian of
// the key's partition, otherwise over the peer connection to the member
// that is (or is about to be). A call whose partition is on its way here
// waits for it, at most TransferWait, then fails with ErrTransferPending. A
// forward that cannot reach the owner fails with an error wrapping
// ErrPeerDown; ctx ending returns ctx's error. On those errors the caller
// decides the fallback; nothing was admitted. call is taken by value, so
// that a decision made here allocates no Call: Do's copy stays on its
// stack (a waiter that follows its key spends its wait on it), and a
// forward sends a copy of its own.
func (n *Node) Do(ctx context.Context, call Call) (Answer, error) {
	c := &call
	select {
	case <-n.stop:
		return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ErrClosed)
	default:
	}
	if n.fenced.Load() {
		return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ErrMinority)
	}
	if c.Op == peer.OpRun {
		return n.run(ctx, c)
	}
	t := n.tr.Load()
	if t == nil && c.Hops == 0 {
		return n.local.do(ctx, c) // no cluster: everything is here
	}
	if t == nil {
		// Forwarded here by a member that already knows of us, before
		// our own first membership arrived: deciding from an empty table
		// would count from zero what a custodian holds. Wait for it.
		var err error
		if t, err = n.awaitFirstRing(ctx); err != nil {
			return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, err)
		}
	}
	p := n.ring.Load().Partition(c.Key)
	g := &t.gates[p]
	var deadline <-chan time.Time
	for {
		h := g.hop.Load()
		switch {
		case h.mode == custody.RouteFenced || (h.mode == custody.RouteLocal && !n.Mandated()):
			return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ErrMinority)
		case h.mode == custody.RouteLocal:
			a, err := n.decideHere(ctx, t, p, c)
			if errors.Is(err, errMoved) || errors.Is(err, errNotHere) {
				continue // the partition left while we queued: follow it
			}
			return a, err
		case h.mode == custody.RouteAwait || (c.Handed && c.Hops > 0 && !h.handed):
			// Custody is on its way here (by our ring, or by the word of
			// the member that forwarded the call, whose ring may be
			// ahead): wait for it. A partition this node is itself
			// handing on is forwarded after it instead.
			if deadline == nil {
				wait := n.cfg.TransferWait
				if c.Hops > 0 {
					wait = min(wait, n.cfg.HopTimeout) // before the forwarder's own cap (HopTimeout)
				}
				timer := n.cfg.Clock.NewTimer(wait)
				defer timer.Stop()
				deadline = timer.C()
			}
			changed := *g.changed.Load()
			if g.hop.Load() != h {
				continue
			}
			select {
			case <-changed:
				continue
			case <-deadline:
				return Answer{}, fmt.Errorf("call %s %q at %s: partition %d: %w", c.Op, c.Key, n.cfg.Name, p, ErrTransferPending)
			case <-ctx.Done():
				return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ctx.Err())
			case <-n.stop:
				return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ErrClosed)
			}
		default:
			if int(c.Hops) >= n.cfg.MaxHops {
				return Answer{}, fmt.Errorf("call %s %q at %s: %w: %w", c.Op, c.Key, n.cfg.Name, ErrNoOwner, ErrTransferPending)
			}
			fwd := *c
			fwd.Hops++
			fwd.Handed = h.handed
			return n.allotted(c, h.addr, func() (Answer, error) { return n.forward(ctx, h.addr, &fwd) })
		}
	}
}

// Immediate reports whether a call for key without a wait (Request.Wait
// 0) would now be decided at this node without waiting on anything: the
// node has no cluster, or it is the key's custodian, holds the majority's
// mandate, need not first look the key up at its backup or the checkpoint
// (a key not yet in the table, shortly after custody came here), and does
// not replicate each admission before answering (ReplicationSync). It reads
// the partition's route without its gate: custody that moves in between
// makes the call wait after all (for the gate, or forwarded), never
// decides it wrongly. An event loop asks it before deciding on its own
// thread.
func (n *Node) Immediate(key string) bool {
	select {
	case <-n.stop:
		return false
	default:
	}
	if n.fenced.Load() || n.cfg.ReplicationSync {
		return false
	}
	t := n.tr.Load()
	if t == nil {
		return true // no cluster: everything is here (Do)
	}
	g := &t.gates[n.ring.Load().Partition(key)]
	if g.hop.Load().mode != custody.RouteLocal || !n.Mandated() {
		return false
	}
	// A key not in the table may first be looked up at its backup or the
	// checkpoint (fetchKey), while the partition's fetch hint lasts.
	h := g.fetch.Load()
	return h == nil || n.cfg.Now().After(h.until) || n.table.Peek(key, func(*limiter.Budget) {})
}

// awaitFirstRing waits, at most TransferWait, for this node's first
// membership (Join or SetRing) and returns its custody shell.
func (n *Node) awaitFirstRing(ctx context.Context) (*transfer, error) {
	timer := n.cfg.Clock.NewTimer(n.cfg.TransferWait)
	defer timer.Stop()
	select {
	case <-n.firstRing:
		return n.tr.Load(), nil
	case <-timer.C():
		return nil, fmt.Errorf("no membership yet: %w", ErrTransferPending)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.stop:
		return nil, ErrClosed
	}
}

// errNotHere: the partition left between reading its route and taking its
// gate; the call looks again.
var errNotHere = errors.New("partition not here")

// decideHere executes c at this node, the custodian of partition p: under
// the partition's gate, so custody cannot change mid-decision; a queued
// acquire waits after releasing it.
func (n *Node) decideHere(ctx context.Context, t *transfer, p int, c *Call) (Answer, error) {
	g := &t.gates[p]
	if h := g.fetch.Load(); h != nil {
		n.fetchKey(ctx, g, h, c.Key)
	}
	g.mu.RLock()
	if g.hop.Load().mode != custody.RouteLocal {
		g.mu.RUnlock()
		return Answer{}, errNotHere
	}
	var start time.Time
	if c.Req.Wait > 0 { // only a call that may queue needs its start
		start = n.cfg.Now()
	}
	a, ch, err := n.local.start(c)
	g.mu.RUnlock()
	if ch != nil && err == nil {
		if a, err = n.local.await(ctx, c.Key, a, ch); errors.Is(err, errMoved) {
			// The waiter follows its key with what is left of its wait.
			c.Req.Wait = max(0, c.Req.Wait-n.cfg.Now().Sub(start))
		}
	}
	if n.cfg.ReplicationSync && err == nil && (a.Decision.Allowed || a.OK) {
		n.replicateNow(ctx, c.Key)
	}
	return a, err
}

// guard holds key's partition gate for a background change, if this node
// decides for the key.
func (n *Node) guard(key string) (func(), bool) {
	t := n.tr.Load()
	if t == nil {
		return func() {}, true
	}
	g := &t.gates[n.ring.Load().Partition(key)]
	g.mu.RLock()
	if g.hop.Load().mode != custody.RouteLocal {
		g.mu.RUnlock()
		return nil, false
	}
	return g.mu.RUnlock, true
}

// task is one piece of a node's periodic work.
type task struct {
	interval time.Duration
	fn       func()
	mu       sync.Mutex // guards next
	next     int64      // Clock.Mono when it is due next (Stepped)
}

// every runs fn every interval until the node closes: on a goroutine of
// its own, or, Stepped, when RunDue finds it due.
func (n *Node) every(interval time.Duration, fn func()) {
	tk := &task{interval: interval, fn: fn, next: n.mono() + int64(interval)}
	n.tasks = append(n.tasks, tk)
	if n.cfg.Stepped {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-n.stop:
				return
			case <-t.C:
				select {
				case <-n.stop: // both were ready: stopping wins, no round after Close
					return
				default:
				}
				fn()
			}
		}
	}()
}

// RunDue runs, in the order they were set up, the periodic work (see
// Config.Stepped) that Clock.Mono says is due, each once however many of
// its intervals passed (as a ticker drops ticks), and the refill of hot
// keys' slices that is due. Only for a Stepped node; it does nothing after
// Close.
func (n *Node) RunDue() {
	select {
	case <-n.stop:
		return
	default:
	}
	for _, tk := range n.tasks {
		now := n.mono()
		tk.mu.Lock()
		due := now >= tk.next
		if due {
			tk.next = now + int64(tk.interval)
		}
		tk.mu.Unlock()
		if due {
			tk.fn()
		}
	}
	if n.holder != nil {
		n.refillSlices()
	}
}

// sweep frees expired slots and drops idle keys.
func (n *Node) sweep() {
	if dropped := n.table.Sweep(n.cfg.Now()); dropped > 0 {
		n.log.Debug("swept idle keys", "dropped", dropped, "keys", n.table.Len())
	}
	n.acked.Keep(func(key string) bool { return n.table.Peek(key, func(*limiter.Budget) {}) })
}

// Close stops the node: peer server, peer connections, timers, sweeper.
// Calls after Close fail with ErrClosed; a second Close does nothing.
func (n *Node) Close() error {
	first := false
	n.closeOnce.Do(func() { first = true; close(n.stop) })
	if !first {
		return nil
	}
	n.bgMu.Lock() // no background goroutine starts after this (background)
	n.bgMu.Unlock()
	if n.server != nil {
		n.server.Close()
	}
	n.peers.Close()
	n.local.close()
	n.wg.Wait()
	if t := n.tr.Load(); t != nil {
		t.sends.Wait()
	}
	n.tmu.Lock()
	retired := n.retired
	n.tmu.Unlock()
	for _, t := range retired {
		t.sends.Wait()
	}
	return nil
}

// Forwarded reports how many calls this node forwarded to peers and in how
// many frames: their ratio is the batching factor.
func (n *Node) Forwarded() (calls, frames int64) {
	return n.peerStats.Calls.Load(), n.peerStats.Frames.Load()
}
