// Package node is one member of a tokenring cluster: it holds the limiter
// state of the keys it owns, executes decisions for them, forwards decisions
// for other keys to their owners over the peer protocol, and follows the
// cluster's membership.
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
	"github.com/tokenring/tokenring/ring"
)

// Config configures a Node. Zero fields take the documented defaults.
type Config struct {
	// Name is this member's unique name in the cluster. Required.
	Name string
	// PeerAddr is the address the peer protocol listens on. Empty means
	// 127.0.0.1 with a port chosen by the system; PeerAddr() tells which.
	PeerAddr string
	// Policy is shared by every key's budget.
	Policy limiter.Policy
	// LimitsFor gives the limits of a key the node has not seen yet. Required.
	LimitsFor func(key string) limiter.Limits
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Dial opens peer connections. Nil means a net.Dialer.
	Dial Dialer
	// Batch controls batching on peer connections, both directions.
	Batch BatchConfig
	// Forward says when a forwarded call counts its owner as unreachable.
	Forward ForwardConfig
	// SweepInterval is how often expired slots are reclaimed and idle keys
	// dropped. Zero means one second.
	SweepInterval time.Duration
	// MaxHops bounds how often a call is forwarded when members disagree
	// about its owner (gossip not yet converged). Zero means 2.
	MaxHops int
	// HopTimeout bounds a call this node forwards on a peer's behalf (plus
	// the call's wait), so a further hop to an unresponsive node cannot
	// pin the connection's goroutine. Zero means one second.
	HopTimeout time.Duration
	// HandoffHorizon is how long after a partition moved here its keys are
	// pulled from the previous holder on first use. State older than one
	// window plus one lease TTL has expired anyway. Zero means 3 minutes.
	HandoffHorizon time.Duration
	// PullTimeout bounds one handoff pull; a crashed previous holder refuses
	// at once, a hung one costs this much. Zero means 250ms.
	PullTimeout time.Duration
	// ReplicationInterval is how often the keys changed since the last
	// round are copied to their backups. It bounds what an owner's crash
	// loses. Zero means one second; negative disables replication.
	ReplicationInterval time.Duration
	// Checkpoint, if set, receives every replication round's snapshots
	// too, and is read when a crashed owner's key has no newer replica.
	Checkpoint Checkpoint
	// Ring configures the rings built from membership snapshots; zero
	// fields take ring's defaults (271 partitions).
	Ring ring.Config
	// Logger receives the node's logs. Nil discards them.
	Logger *slog.Logger
}

// ErrNoOwner is returned when a call cannot reach a node that considers
// itself the key's owner within MaxHops.
var ErrNoOwner = errors.New("no owner within hop limit")

// Node is one cluster member. Its methods are safe for concurrent use.
type Node struct {
	cfg   Config
	table *limiter.Table
	local *local
	log   *slog.Logger

	ring     atomic.Pointer[ring.Ring] // nil until the first membership snapshot: everything is local
	ready    atomic.Bool               // joined and the first ring installed
	leaving  atomic.Bool               // Handoff ran: ignore membership, forward everything
	hand     handoff
	dirty    dirtySet     // keys changed since the last replication round
	inflight atomic.Int32 // replication rounds under way
	replicas replicaStore // copies held for other owners
	server   *peerServer

	mu    sync.Mutex // guards peers
	peers map[string]*peerClient
	stats peerStats

	stop      chan struct{}
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = d.DialContext
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	if cfg.MaxHops <= 0 {
		cfg.MaxHops = 2
	}
	if cfg.HopTimeout <= 0 {
		cfg.HopTimeout = time.Second
	}
	if cfg.HandoffHorizon <= 0 {
		cfg.HandoffHorizon = 3 * time.Minute
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = 250 * time.Millisecond
	}
	if cfg.ReplicationInterval == 0 {
		cfg.ReplicationInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.PeerAddr == "" {
		cfg.PeerAddr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", cfg.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("node %s: listen peer %s: %w", cfg.Name, cfg.PeerAddr, err)
	}
	table := limiter.NewTable(cfg.Policy, cfg.LimitsFor)
	n := &Node{
		cfg:   cfg,
		table: table,
		local: newLocal(cfg.Name, table, cfg.Now),
		log:   cfg.Logger.With("node", cfg.Name),
		peers: make(map[string]*peerClient),
		stop:  make(chan struct{}),
	}
	n.hand.seed = maphash.MakeSeed()
	n.dirty.seed = maphash.MakeSeed()
	n.local.changed = n.dirty.mark
	n.server = &peerServer{
		ln:     ln,
		handle: n.serve,
		inline: n.inline,
		batch:  cfg.Batch,
		log:    n.log,
		conns:  make(map[net.Conn]struct{}),
	}
	n.server.wg.Add(1)
	go n.server.serve()
	n.every(cfg.SweepInterval, n.sweep)
	if cfg.ReplicationInterval > 0 {
		n.every(cfg.ReplicationInterval, func() {
			n.replicateOnce()
			n.replicas.expire(n.cfg.Now(), n.cfg.HandoffHorizon)
		})
	}
	return n, nil
}

// Name is this member's name.
func (n *Node) Name() string { return n.cfg.Name }

// PeerAddr is the address the peer protocol listens on.
func (n *Node) PeerAddr() string { return n.server.ln.Addr().String() }

// Ring is the current ring, nil before the first membership snapshot.
func (n *Node) Ring() *ring.Ring { return n.ring.Load() }

// SetRing installs a new ring built from the latest membership and notes
// which partitions moved here, and from where, for handoff.
func (n *Node) SetRing(r *ring.Ring) {
	prev := n.ring.Swap(r)
	if r != nil {
		n.updateHints(prev, r)
	}
	n.prunePeers(r)
}

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

// Do executes c at its key's owner: here when this node owns the key,
// otherwise over the peer connection to the owner. A forward that cannot
// reach the owner fails with an error wrapping ErrPeerDown (at once for a
// refused connection) or ctx's error; the caller decides the fallback.
func (n *Node) Do(ctx context.Context, c *Call) (Answer, error) {
	select {
	case <-n.stop:
		return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ErrClosed)
	default:
	}
	owner, self := n.Owner(c.Key)
	if self {
		if to, gone := n.goneTo(c.Key); gone && int(c.Hops) < n.cfg.MaxHops {
			// Handed to a node whose ring is ahead of ours.
			fwd := *c
			fwd.Hops++
			return n.peer(to).call(ctx, &fwd)
		}
		n.ensure(ctx, c.Key, c.Hops)
		return n.local.do(ctx, c)
	}
	if c.Hops > 0 && n.table.Peek(c.Key, func(*limiter.Budget) {}) {
		// Forwarded here by a member whose ring says we own the key, and
		// we hold its state (handed to us, or not yet pulled by the owner
		// our ring names): the state lives in one place, so deciding here
		// is exact, and it ends a ping-pong between lagging rings.
		return n.local.do(ctx, c)
	}
	if int(c.Hops) >= n.cfg.MaxHops {
		return Answer{}, fmt.Errorf("call %s %q at %s: %w", c.Op, c.Key, n.cfg.Name, ErrNoOwner)
	}
	fwd := *c
	fwd.Hops++
	return n.peer(owner.Peer).call(ctx, &fwd)
}

// serve executes a call that arrived from a peer: here, or one hop further
// within HopTimeout when this node's ring says another member owns the key.
// Handoff calls are addressed to this node, whoever owns the key.
func (n *Node) serve(ctx context.Context, c *Call) (Answer, error) {
	switch c.Op {
	case OpTake:
		return n.take(ctx, c)
	case OpPut:
		return n.put(c)
	case OpReplicate:
		n.replicas.put(c.Key, c.State, n.cfg.Now())
		return Answer{Owner: n.cfg.Name, OK: true}, nil
	case OpReplica: // Expires carries when the replica arrived
		rep, ok := n.replicas.take(c.Key)
		return Answer{Owner: n.cfg.Name, OK: ok, State: rep.state, Expires: rep.at}, nil
	}
	if _, self := n.Owner(c.Key); !self {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.HopTimeout+c.Req.Wait)
		defer cancel()
	}
	return n.Do(ctx, c)
}

// inline reports whether a forwarded call is cheap enough to run on the
// connection's reader goroutine: decided here, without waiting, pulling or
// forwarding.
func (n *Node) inline(c *Call) bool {
	switch {
	case c.Op == OpReplicate || c.Op == OpReplica:
		return true
	case c.Op == OpTake || c.Op == OpPut:
		return false
	case c.Op == OpAcquire && c.Req.Wait > 0:
		return false
	}
	if _, self := n.Owner(c.Key); !self {
		return false
	}
	if _, hinted := n.hintFor(c.Key); hinted {
		return false
	}
	_, gone := n.goneTo(c.Key)
	return !gone
}

func (n *Node) peer(addr string) *peerClient {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.peers[addr]
	if p == nil {
		p = newPeerClient(addr, n.cfg.Dial, n.cfg.Batch, n.cfg.Forward, n.log, &n.stats)
		n.peers[addr] = p
	}
	return p
}

// prunePeers closes connections to peers that are neither in r nor named
// by a handoff hint (a node that left gracefully still serves pulls).
func (n *Node) prunePeers(r *ring.Ring) {
	if r == nil {
		return
	}
	live := make(map[string]bool)
	for _, m := range r.Members() {
		live[m.Peer] = true
	}
	if hp := n.hand.hints.Load(); hp != nil {
		for _, h := range *hp {
			live[h.from] = true
		}
	}
	var gone []*peerClient
	n.mu.Lock()
	for addr, p := range n.peers {
		if !live[addr] {
			gone = append(gone, p)
			delete(n.peers, addr)
		}
	}
	n.mu.Unlock()
	for _, p := range gone {
		p.close()
	}
}

// every runs fn every interval on a goroutine of its own until the node
// closes.
func (n *Node) every(interval time.Duration, fn func()) {
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
				fn()
			}
		}
	}()
}

// sweep reclaims expired slots and drops idle keys.
func (n *Node) sweep() {
	if dropped := n.table.Sweep(n.cfg.Now()); dropped > 0 {
		n.log.Debug("swept idle keys", "dropped", dropped, "keys", n.table.Len())
	}
}

// Close stops the node: peer server, peer connections, timers, sweeper.
// Calls after Close fail with ErrClosed; a second Close does nothing.
func (n *Node) Close() error {
	first := false
	n.closeOnce.Do(func() { first = true; close(n.stop) })
	if !first {
		return nil
	}
	n.server.close()
	n.mu.Lock()
	peers := n.peers
	n.peers = map[string]*peerClient{}
	n.mu.Unlock()
	for _, p := range peers {
		p.close()
	}
	n.local.close()
	n.wg.Wait()
	return nil
}

// Forwarded reports how many calls this node forwarded to peers and in how
// many frames: their ratio is the batching factor.
func (n *Node) Forwarded() (calls, frames int64) {
	return n.stats.calls.Load(), n.stats.frames.Load()
}
