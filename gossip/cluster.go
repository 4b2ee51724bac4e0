// Package gossip is tokenring's cluster membership: it joins a
// hashicorp/memberlist cluster, gossips this node's metadata (its addresses
// and boot id), and reports the set of live members as a stream of
// snapshots. Nothing else in tokenring imports memberlist.
//
// memberlist calls its delegates with its own locks held, and a delegate
// that blocks stalls failure detection for the whole node. So this package
// never lets a consumer block it: every change produces a Snapshot of the
// whole membership, and the Events channel holds only the newest one; a
// slow consumer skips intermediate snapshots but always ends up with the
// current membership.
//
// With Config.Secrets, all gossip is encrypted and authenticated
// (memberlist's AES-GCM keyring): a process without one of the secrets
// cannot join, read or inject. Every packet also carries Config.Label, so
// another product's gossip on the port is refused.
package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrNameConflict is wrapped by the error of Start when another live member
// already uses the name.
var ErrNameConflict = errors.New("node name already in use")

// ErrShutdown is returned by Leave after Shutdown.
var ErrShutdown = errors.New("gossip: cluster is shut down")

// MemberState is one live member as this node sees it.
type MemberState struct {
	Name string // unique node name
	Addr string // gossip address, host:port
	Meta Meta
}

// Snapshot is the membership at one moment: every live member, sorted by
// name. Live means not known to be dead or departed; a member suspected of
// failure stays live until the suspicion is confirmed.
type Snapshot struct {
	// Seq numbers snapshots from 1, increasing by one per membership
	// change; a gap means the consumer skipped snapshots, which is fine
	// because each holds the whole membership.
	Seq uint64

	// Reason describes the change that produced this snapshot, for logs:
	// "join n2", "update n2" (its metadata changed, for instance a new
	// BootID after a restart) or "leave n2" (it left gracefully or was
	// declared dead: memberlist does not tell its delegates which).
	// Compare snapshots rather than parse it: skipped snapshots had
	// reasons too.
	Reason string

	// Members are the live members, sorted by name. The slice belongs to
	// the receiver.
	Members []MemberState
}

// departure is a member that left the membership, and where it was.
type departure struct {
	addr string
	at   time.Time
}

// Cluster is this node's membership in a gossip cluster. Its methods are
// safe for concurrent use.
type Cluster struct {
	cfg Config // defaults filled, BootID set
	log *slog.Logger
	ml  *memberlist.Memberlist
	// transport is memberlist's, with the inbound stream budget.
	transport *budgetTransport
	local     MemberState
	events    chan Snapshot // capacity 1: at most the newest snapshot, never blocks a sender

	mu       sync.Mutex    // guards the fields below, and sends on events
	members  []MemberState // live members sorted by name
	seq      uint64        // Seq of the last snapshot
	closed   bool          // events is closed: apply does nothing
	conflict error         // first conflict on our own name, wraps ErrNameConflict

	delegate *delegate
	departed map[string]departure // by name: members seen leaving or dying; guarded by mu
	stop     chan struct{}        // closed by Shutdown: ends the reconnect loop
	loops    sync.WaitGroup

	lifecycle sync.Mutex // serialises Leave and Shutdown; guards shut
	shut      bool
}

// Start creates this node's memberlist, listening on cfg.BindAddr and
// cfg.BindPort, and joins the members at cfg.Join, trying JoinRetries more
// times, JoinRetryInterval apart, if none answers or the name is in use. It
// returns once joined (at once with an empty Join), or with an error, having
// released everything, if cfg is invalid, the port is taken, or every join
// attempt failed; the error wraps ErrNameConflict if the last one failed
// because a live member at another address has the name.
func Start(cfg Config) (*Cluster, error) {
	cfg = cfg.withDefaults()
	if cfg.Meta.BootID == "" {
		cfg.Meta.BootID = newBootID()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Cluster{
		cfg:    cfg,
		log:    cfg.Logger.With("component", "gossip", "node", cfg.Name),
		events: make(chan Snapshot, 1),
	}
	d := &delegate{c: c, meta: cfg.Meta.encode()}
	c.delegate = d
	mcfg, err := cfg.memberlistConfig(d)
	if err != nil {
		return nil, fmt.Errorf("gossip: start %s: %w", cfg.Name, err)
	}
	where := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort))
	if c.transport, mcfg.BindPort, err = newBudgetTransport(cfg, mcfg.Logger); err != nil {
		return nil, fmt.Errorf("gossip: start %s on %s: %w", cfg.Name, where, err)
	}
	if cfg.BindPort == 0 {
		mcfg.AdvertisePort = mcfg.BindPort
	}
	mcfg.Transport = c.transport
	ml, err := memberlist.Create(mcfg)
	if err != nil {
		_ = c.transport.Shutdown()
		return nil, fmt.Errorf("gossip: start %s on %s: %w", cfg.Name, where, err)
	}
	c.ml = ml
	c.local = MemberState{Name: cfg.Name, Addr: ml.LocalNode().Address(), Meta: cfg.Meta}
	c.departed = make(map[string]departure)
	c.stop = make(chan struct{})
	c.log.Info("gossip started", "addr", c.local.Addr, "boot_id", cfg.Meta.BootID)

	if len(cfg.Join) > 0 {
		if err := c.join(); err != nil {
			// No Leave: with a name conflict it would announce the
			// departure of the other node of that name.
			_ = ml.Shutdown()
			c.closeEvents()
			return nil, err
		}
	}
	if cfg.ReconnectInterval > 0 {
		c.loops.Add(1)
		go c.reconnectLoop()
	}
	return c, nil
}

// reconnectLoop tries, every ReconnectInterval, to join the members that
// departed within ReconnectHorizon and the Join seeds: after a network
// partition heals, whichever side tries first merges the cluster again
// (memberlist itself never contacts a member it declared dead). A join to a
// member that really is gone fails fast and costs a refused connection.
func (c *Cluster) reconnectLoop() {
	defer c.loops.Done()
	t := time.NewTicker(c.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		addrs := c.reconnectAddrs(time.Now())
		if len(addrs) == 0 {
			continue
		}
		n, err := c.ml.Join(addrs)
		if n > 0 {
			c.log.Info("gossip reconnected", "contacted", n, "tried", len(addrs))
		} else {
			c.log.Debug("gossip reconnect found nobody", "tried", len(addrs), "err", err)
		}
	}
}

// reconnectAddrs lists the departed members' addresses still within the
// horizon (forgetting older ones) and the seeds that are not a member's
// address, without our own.
func (c *Cluster) reconnectAddrs(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]bool{c.local.Addr: true}
	for _, m := range c.members {
		live[m.Addr] = true
	}
	var addrs []string
	for name, d := range c.departed {
		if now.Sub(d.at) > c.cfg.ReconnectHorizon {
			delete(c.departed, name)
			continue
		}
		if !live[d.addr] {
			addrs = append(addrs, d.addr)
		}
	}
	for _, seed := range c.cfg.Join {
		if !live[seed] && !slices.Contains(addrs, seed) {
			addrs = append(addrs, seed)
		}
	}
	slices.Sort(addrs)
	return addrs
}

// join joins cfg.Join, with retries. A name conflict is retried too: it
// goes away when the member holding the name is the previous incarnation of
// this node, restarted at another address, once the cluster has declared it
// dead (see DeadNodeReclaimTime).
func (c *Cluster) join() error {
	attempts := c.cfg.JoinRetries + 1
	var err error
	for i := range attempts {
		if i > 0 {
			time.Sleep(c.cfg.JoinRetryInterval)
		}
		var n int
		n, err = c.ml.Join(c.cfg.Join)
		// The push/pull of a join merges the remote state before Join
		// returns, so a conflict on our name is known by now.
		c.mu.Lock()
		conflict := c.conflict
		c.conflict = nil
		c.mu.Unlock()
		if conflict != nil {
			err = conflict
		} else if err == nil {
			c.log.Info("gossip joined", "join", c.cfg.Join, "contacted", n, "attempts", i+1, "members", c.NumMembers())
			return nil
		}
		c.log.Warn("gossip join failed", "join", c.cfg.Join, "attempt", i+1, "of", attempts, "err", err)
	}
	return fmt.Errorf("gossip: join %v as %s: gave up after %d attempts: %w", c.cfg.Join, c.cfg.Name, attempts, err)
}

// Events returns the channel of membership snapshots. It holds at most one,
// the newest: a new snapshot replaces one not yet received. One is waiting
// as soon as Start returns. Shutdown closes the channel. All calls return
// the same channel; with several receivers each snapshot goes to one.
func (c *Cluster) Events() <-chan Snapshot { return c.events }

// Members returns the live members, sorted by name: the Members of the
// newest snapshot.
func (c *Cluster) Members() []MemberState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// NumMembers returns the number of live members, this node included.
func (c *Cluster) NumMembers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members)
}

// LocalName returns this node's name.
func (c *Cluster) LocalName() string { return c.cfg.Name }

// Local returns this node as other members see it: its advertised gossip
// address (with the actual port when BindPort was 0) and its metadata (with
// the BootID Start generated, if any).
func (c *Cluster) Local() MemberState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local
}

// SetLeaving marks this node as draining in its gossiped metadata (see
// Meta.Leaving) and broadcasts the change, waiting up to timeout for it to
// go out. Every member then rebuilds its ring without this node, while it
// stays a member until Leave.
func (c *Cluster) SetLeaving(timeout time.Duration) error {
	return c.announce("leaving", timeout, func(m *Meta) { m.Leaving = true })
}

// SetDeparted marks this node as done draining in its gossiped metadata
// (see Meta.Departed; it sets Leaving too) and broadcasts the change,
// waiting up to timeout for it to go out. Call it once everything was
// handed on, just before Leave: the members that see it stop counting
// this node in the membership a majority is counted of, at once, instead
// of keeping it counted like a crashed member when it is then gone.
func (c *Cluster) SetDeparted(timeout time.Duration) error {
	return c.announce("departure", timeout, func(m *Meta) { m.Leaving, m.Departed = true, true })
}

// SetLimitsHash publishes hash as the limits this node admits with (see
// Meta.LimitsHash), after a config reload changed them, and broadcasts it,
// waiting up to timeout for it to go out.
func (c *Cluster) SetLimitsHash(hash string, timeout time.Duration) error {
	return c.announce("limits", timeout, func(m *Meta) { m.LimitsHash = hash })
}

// announce changes this node's metadata with set (the change is kept by a
// later Reincarnate) and broadcasts it, waiting up to timeout for it to go
// out.
func (c *Cluster) announce(what string, timeout time.Duration, set func(*Meta)) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	if c.shut {
		return ErrShutdown
	}
	set(&c.cfg.Meta)
	c.delegate.mu.Lock()
	c.delegate.meta = c.cfg.Meta.encode()
	c.delegate.mu.Unlock()
	c.mu.Lock()
	c.local.Meta = c.cfg.Meta
	c.mu.Unlock()
	if err := c.ml.UpdateNode(timeout); err != nil {
		return fmt.Errorf("gossip: announce %s: %w", what, err)
	}
	return nil
}

// Reincarnate gives this node a new BootID and broadcasts it, waiting up
// to timeout for it to go out, and returns it. Peers then see a new
// incarnation of the member: a node that was fenced off on the minority
// side of a network split (it gave up all it held) comes back as a new
// member, not as the holder of what the majority restored meanwhile.
func (c *Cluster) Reincarnate(timeout time.Duration) (string, error) {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	if c.shut {
		return "", ErrShutdown
	}
	c.cfg.Meta.BootID = newBootID()
	c.delegate.mu.Lock()
	c.delegate.meta = c.cfg.Meta.encode()
	c.delegate.mu.Unlock()
	c.mu.Lock()
	c.local.Meta.BootID = c.cfg.Meta.BootID
	c.mu.Unlock()
	c.log.Info("gossip: new incarnation", "boot_id", c.cfg.Meta.BootID)
	if err := c.ml.UpdateNode(timeout); err != nil {
		return c.cfg.Meta.BootID, fmt.Errorf("gossip: announce new incarnation: %w", err)
	}
	return c.cfg.Meta.BootID, nil
}

// Leave announces to the cluster that this node is leaving, and waits until
// the announcement has been sent to at least one member or timeout has
// passed (zero means no limit). The others then drop this node at once,
// instead of after failure detection. The node keeps gossiping until
// Shutdown, which should follow. Calling Leave twice is harmless; after
// Shutdown it returns ErrShutdown.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	if c.shut {
		return ErrShutdown
	}
	c.log.Info("gossip leaving", "timeout", timeout)
	if err := c.ml.Leave(timeout); err != nil {
		return fmt.Errorf("gossip: leave %s: %w", c.cfg.Name, err)
	}
	return nil
}

// Shutdown stops gossip, closes the listeners and the Events channel. Without
// a Leave first, the others see this node as crashed, and drop it after
// failure detection. It is safe to call more than once.
func (c *Cluster) Shutdown() error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	if c.shut {
		return nil
	}
	c.shut = true
	close(c.stop)
	c.loops.Wait() // a Join under way ends within TCPTimeout
	// Not under c.mu: memberlist may be inside a delegate waiting for it.
	err := c.ml.Shutdown()
	c.closeEvents()
	c.log.Info("gossip shut down")
	if err != nil {
		return fmt.Errorf("gossip: shutdown %s: %w", c.cfg.Name, err)
	}
	return nil
}

// closeEvents closes the events channel; later delegate calls are ignored.
func (c *Cluster) closeEvents() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.events)
	}
}

// apply records a change and publishes the new snapshot, replacing one not
// yet received. st nil removes the member called name. It never blocks for
// long: it takes only c.mu, which no one holds while calling memberlist or
// sending to a channel that can be full.
func (c *Cluster) apply(name string, st *MemberState, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	i, found := slices.BinarySearchFunc(c.members, name, func(m MemberState, n string) int {
		return strings.Compare(m.Name, n)
	})
	switch {
	case st != nil && found:
		c.members[i] = *st
	case st != nil:
		c.members = slices.Insert(c.members, i, *st)
	case found:
		c.members = slices.Delete(c.members, i, i+1)
	default:
		return // a departure of a member we never listed
	}
	c.seq++
	snap := Snapshot{Seq: c.seq, Reason: reason, Members: slices.Clone(c.members)}
	select {
	case <-c.events: // drop the stale snapshot
	default:
	}
	// Only apply sends, under c.mu, and the buffer is now empty: this
	// cannot block.
	c.events <- snap
}

// delegate receives memberlist's callbacks. memberlist calls them from its
// own goroutines, often with its node lock held: each converts its input
// into our values and returns at once.
type delegate struct {
	c    *Cluster
	mu   sync.Mutex // guards meta
	meta []byte     // encoded c.cfg.Meta
}

// memberState converts a memberlist node.
func memberState(n *memberlist.Node) (MemberState, error) {
	meta, err := decodeMeta(n.Meta)
	if err != nil {
		return MemberState{}, err
	}
	return MemberState{Name: n.Name, Addr: n.Address(), Meta: meta}, nil
}

// NodeMeta returns this node's encoded metadata (memberlist.Delegate).
func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.meta
}

// NotifyMsg ignores user messages: we send none (memberlist.Delegate).
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts returns no user broadcasts (memberlist.Delegate).
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState returns no user state for push/pull (memberlist.Delegate).
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState ignores remote user state (memberlist.Delegate).
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyAlive refuses a node whose metadata is not ours to decode, a member
// of another kind of memberlist cluster or a tokenring of an incompatible
// version, so that it never becomes a member (memberlist.AliveDelegate).
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if _, err := decodeMeta(n.Meta); err != nil {
		return fmt.Errorf("node %s at %s: %w", n.Name, n.Address(), err)
	}
	return nil
}

// NotifyJoin adds a node (memberlist.EventDelegate).
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.put(n, "join")
}

// NotifyUpdate replaces a node whose metadata changed
// (memberlist.EventDelegate).
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.put(n, "update")
}

// put adds or replaces n.
func (d *delegate) put(n *memberlist.Node, what string) {
	st, err := memberState(n)
	if err != nil { // NotifyAlive keeps such nodes out; be safe anyway
		d.c.log.Warn("gossip ignored member", "member", n.Name, "addr", n.Address(), "err", err)
		return
	}
	d.c.log.Info("gossip member changed", "change", what, "member", st.Name, "addr", st.Addr,
		"http", st.Meta.HTTP, "peer", st.Meta.Peer, "boot_id", st.Meta.BootID)
	d.c.apply(st.Name, &st, what+" "+st.Name)
}

// NotifyLeave removes a node that left or was declared dead
// (memberlist.EventDelegate).
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	// memberlist does not say here whether n left or was declared dead:
	// n.State is not kept up to date, and asking memberlist would deadlock
	// (it holds its node lock while calling us).
	const what = "leave"
	d.c.log.Info("gossip member changed", "change", what, "member", n.Name, "addr", n.Address())
	d.c.mu.Lock()
	if n.Name != d.c.cfg.Name && d.c.departed != nil {
		d.c.departed[n.Name] = departure{addr: n.Address(), at: time.Now()}
	}
	d.c.mu.Unlock()
	d.c.apply(n.Name, nil, what+" "+n.Name)
}

// NotifyConflict records that other claims the name of existing, a live
// member at another address (memberlist.ConflictDelegate). memberlist keeps
// existing and ignores other; if existing is this node during Start, the
// join attempt fails.
func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.c.log.Error("gossip name conflict", "member", existing.Name,
		"addr", existing.Address(), "other_addr", other.Address())
	if existing.Name != d.c.cfg.Name {
		return
	}
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if d.c.conflict == nil {
		d.c.conflict = fmt.Errorf("%w: %q is used by the member at %s", ErrNameConflict, existing.Name, other.Address())
	}
}
