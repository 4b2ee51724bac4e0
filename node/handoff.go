package node

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/ring"
)

// Handoff: a key's state lives on exactly one node at a time.
//
// When a partition moves to this node (a join, a leave, or bounded load
// reshuffling old members), the node remembers where the partition was: a
// hint per partition. The first call for a key of that partition that finds
// no state here pulls it from the previous holder (OpTake) before deciding,
// so the key continues from its real window, leases and slots instead of
// from zero. The giver removes the key atomically and keeps a tombstone: a
// call that still reaches it (its ring is behind) is forwarded to the taker,
// so at most one node admits against a key at any moment.
//
// A node leaving gracefully (Handoff) pushes every key it still holds to its
// new owner (OpPut, installed only where the key is not held yet) and serves
// pulls until it exits. A crashed node's keys restart from zero: replication
// is not built yet.

// hint says where a partition's keys were before they moved here.
type hint struct {
	from   string    // the previous owner's peer address
	backup string    // where the previous owner replicated the partition's keys
	until  time.Time // after this, state left there has expired anyway
}

// tomb marks a key given away: calls for it go to the taker.
type tomb struct {
	to    string    // the taker's peer address
	state []byte    // a pushed snapshot not yet acknowledged, served to pulls meanwhile
	until time.Time // tombstones outlive a lagging ring only briefly
}

// handoff is the node's handoff bookkeeping. Its zero value is ready.
type handoff struct {
	hints atomic.Pointer[[]hint] // by partition; replaced whole on each ring change

	mu    sync.Mutex // guards gone
	gone  map[string]tomb
	ngone atomic.Int32 // len(gone), read without mu on the hot path

	seed    maphash.Seed
	stripes [64]sync.Mutex // serialise pulls and puts of the same key
}

const tombTTL = 10 * time.Second

func (h *handoff) stripe(key string) *sync.Mutex {
	return &h.stripes[maphash.String(h.seed, key)%uint64(len(h.stripes))]
}

// updateHints records, for each partition that moved to self between prev
// and next, where its keys were. Partitions that left self lose their hint.
func (n *Node) updateHints(prev, next *ring.Ring) {
	now := n.cfg.Now()
	if prev == nil {
		// The first ring: this node (new, or restarted with empty RAM)
		// joins members who placed the keys by the ring they had
		// without us.
		var others []ring.Member
		for _, m := range next.Members() {
			if m.Name != n.cfg.Name {
				others = append(others, m)
			}
		}
		prev = nil
		if len(others) > 0 {
			prev, _ = ring.New(next.Config(), others)
		}
	}
	old := n.hand.hints.Load()
	hints := make([]hint, next.PartitionCount())
	if old != nil && len(*old) == len(hints) {
		copy(hints, *old)
	}
	if prev != nil && prev.PartitionCount() != next.PartitionCount() {
		prev = nil
	}
	for _, mv := range ring.Moves(prev, next) {
		switch {
		case mv.To == n.cfg.Name && mv.From != "" && prev != nil:
			from, _ := prev.PartitionOwner(mv.Partition)
			backup, _ := prev.PartitionBackup(mv.Partition)
			hints[mv.Partition] = hint{from: from.Peer, backup: backup.Peer, until: now.Add(n.cfg.HandoffHorizon)}
		case mv.From == n.cfg.Name:
			hints[mv.Partition] = hint{}
		}
	}
	n.hand.hints.Store(&hints)
	// A key that comes back to this node is no longer gone from it.
	if n.hand.ngone.Load() > 0 {
		n.hand.mu.Lock()
		for key := range n.hand.gone {
			if m, ok := next.Owner(key); ok && m.Name == n.cfg.Name {
				n.forgetTomb(key)
			}
		}
		n.hand.mu.Unlock()
	}
}

// hintFor returns where key's state may still be, if its partition moved
// here within the handoff horizon.
func (n *Node) hintFor(key string) (hint, bool) {
	hp := n.hand.hints.Load()
	r := n.ring.Load()
	if hp == nil || r == nil {
		return hint{}, false
	}
	h := (*hp)[r.Partition(key)]
	if h.from == "" || h.from == n.PeerAddr() || n.cfg.Now().After(h.until) {
		return hint{}, false
	}
	return h, true
}

// goneTo returns the taker of a key this node gave away.
func (n *Node) goneTo(key string) (string, bool) {
	if n.hand.ngone.Load() == 0 {
		return "", false
	}
	n.hand.mu.Lock()
	defer n.hand.mu.Unlock()
	t, ok := n.hand.gone[key]
	if !ok {
		return "", false
	}
	if n.cfg.Now().After(t.until) {
		n.forgetTomb(key)
		return "", false
	}
	return t.to, true
}

// setTomb records that key went to addr. Callers hold n.hand.mu.
func (n *Node) setTomb(key string, t tomb) {
	if n.hand.gone == nil {
		n.hand.gone = make(map[string]tomb)
	}
	if _, ok := n.hand.gone[key]; !ok {
		n.hand.ngone.Add(1)
	}
	n.hand.gone[key] = t
}

// forgetTomb drops key's tombstone. Callers hold n.hand.mu.
func (n *Node) forgetTomb(key string) {
	if _, ok := n.hand.gone[key]; ok {
		delete(n.hand.gone, key)
		n.hand.ngone.Add(-1)
	}
}

// ensure makes sure a key whose partition moved here has its state before
// this node decides for it: when the key is not held and a hint names the
// previous holder, pull it from there. A failed pull (the holder crashed)
// leaves the key to start from zero.
func (n *Node) ensure(ctx context.Context, key string, hops uint8) {
	h, ok := n.hintFor(key)
	if !ok || n.table.Peek(key, func(*limiter.Budget) {}) {
		return
	}
	mu := n.hand.stripe(key)
	mu.Lock()
	defer mu.Unlock()
	if n.table.Peek(key, func(*limiter.Budget) {}) {
		return // pulled by a concurrent call
	}
	from := h.from
	state, err := n.pull(ctx, key, from, hops)
	if err != nil {
		// The previous owner is gone: take the newest copy it left, from
		// its backup or the checkpoint store.
		if state, from = n.recover(ctx, key, h.backup); len(state) == 0 {
			n.log.Warn("handoff: previous owner unreachable and no copy; the key starts from zero here",
				"key", key, "from", h.from, "backup", h.backup, "err", err)
			return
		}
		if from == "checkpoint" {
			n.stats.fromCheckpoint.Add(1)
		} else {
			n.stats.restored.Add(1)
		}
	}
	if len(state) == 0 {
		return
	}
	if err := n.table.Put(key, state); err != nil {
		n.log.Error("handoff: bad state received", "key", key, "from", from, "err", err)
		return
	}
	n.dirty.mark(key) // replicate to this key's new backup
	n.stats.pulled.Add(1)
}

// recover returns the newest copy of a crashed owner's key: the replica at
// backup or the checkpoint, and where it came from; nil when there is none.
func (n *Node) recover(ctx context.Context, key, backup string) ([]byte, string) {
	rep, repAt, err := n.replica(ctx, key, backup)
	if err != nil {
		n.log.Warn("handoff: replica unavailable", "key", key, "backup", backup, "err", err)
	}
	if n.cfg.Checkpoint == nil {
		return rep, backup
	}
	cctx, cancel := context.WithTimeout(ctx, n.cfg.PullTimeout)
	defer cancel()
	cp, cpAt, ok, err := n.cfg.Checkpoint.Load(cctx, key)
	if err != nil {
		n.log.Warn("handoff: checkpoint unavailable", "key", key, "err", err)
	}
	if ok && (len(rep) == 0 || cpAt.After(repAt)) {
		return cp, "checkpoint"
	}
	return rep, backup
}

// replica fetches the backup copy of key from addr (this node or a peer)
// and when the backup received it.
func (n *Node) replica(ctx context.Context, key, addr string) ([]byte, time.Time, error) {
	if addr == "" {
		return nil, time.Time{}, nil
	}
	if addr == n.PeerAddr() {
		rep, _ := n.replicas.take(key)
		return rep.state, rep.at, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.PullTimeout)
	defer cancel()
	a, err := n.peer(addr).call(ctx, &Call{Op: OpReplica, Key: key, From: n.PeerAddr()})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("replica of %q from %s: %w", key, addr, err)
	}
	return a.State, a.Expires, nil
}

// pull asks the node at addr for key's state.
func (n *Node) pull(ctx context.Context, key, addr string, hops uint8) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.PullTimeout)
	defer cancel()
	a, err := n.peer(addr).call(ctx, &Call{Op: OpTake, Key: key, From: n.PeerAddr(), Hops: hops + 1})
	if err != nil {
		return nil, fmt.Errorf("pull %q from %s: %w", key, addr, err)
	}
	return a.State, nil
}

// take gives key's state to the caller: the held budget (its waiters are
// refused so their clients retry at the new owner), or a pushed snapshot
// not yet acknowledged, or, when this node itself only has a hint, the state
// pulled from there. The key is then gone from here: calls that still reach
// this node for it are forwarded to the taker.
func (n *Node) take(ctx context.Context, c *Call) (Answer, error) {
	a := Answer{Owner: n.cfg.Name}
	mu := n.hand.stripe(c.Key)
	mu.Lock()
	defer mu.Unlock()
	state, held := n.takeKey(c.Key)
	if !held {
		n.hand.mu.Lock()
		if t, ok := n.hand.gone[c.Key]; ok && t.state != nil {
			state = t.state
		}
		n.hand.mu.Unlock()
	}
	if state == nil && int(c.Hops) < n.cfg.MaxHops {
		if h, ok := n.hintFor(c.Key); ok && h.from != c.From {
			var err error
			if state, err = n.pull(ctx, c.Key, h.from, c.Hops); err != nil {
				n.log.Warn("handoff: chained pull failed", "key", c.Key, "from", h.from, "err", err)
			}
		}
	}
	if state != nil {
		n.hand.mu.Lock()
		n.setTomb(c.Key, tomb{to: c.From, until: n.cfg.Now().Add(tombTTL)})
		n.hand.mu.Unlock()
		n.stats.given.Add(1)
	}
	a.State = state
	return a, nil
}

// takeKey removes key from the table, refusing its waiters first.
func (n *Node) takeKey(key string) ([]byte, bool) {
	var grants []limiter.Grant
	now := n.cfg.Now()
	n.table.Peek(key, func(b *limiter.Budget) { grants = b.DrainWaiters(now, nil) })
	n.local.deliver(key, grants)
	state, ok := n.table.Take(key)
	n.local.refuseAll(key) // any waiter that queued between the drain and the take
	return state, ok
}

// put installs a pushed key unless this node holds it already (it pulled it
// first, or decided for it since).
func (n *Node) put(c *Call) (Answer, error) {
	a := Answer{Owner: n.cfg.Name}
	mu := n.hand.stripe(c.Key)
	mu.Lock()
	defer mu.Unlock()
	n.hand.mu.Lock()
	n.forgetTomb(c.Key)
	n.hand.mu.Unlock()
	if n.table.Peek(c.Key, func(*limiter.Budget) {}) {
		return a, nil
	}
	if err := n.table.Put(c.Key, c.State); err != nil {
		return a, fmt.Errorf("put %q: %w", c.Key, err)
	}
	n.dirty.mark(c.Key)
	n.stats.pulled.Add(1)
	a.OK = true
	return a, nil
}

// Handoff hands every key this node holds to its owner in the ring without
// this node, for a graceful leave: call it after leaving the gossip cluster
// and before closing. From then on the node forwards every call. It returns
// how many keys were pushed and the first error.
func (n *Node) Handoff(ctx context.Context) (int, error) {
	n.leaving.Store(true)
	cur := n.ring.Load()
	if cur == nil {
		return 0, nil
	}
	var others []ring.Member
	for _, m := range cur.Members() {
		if m.Name != n.cfg.Name {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return 0, nil // the last member: nobody to hand to
	}
	next, err := ring.New(cur.Config(), others)
	if err != nil {
		return 0, fmt.Errorf("handoff: ring without %s: %w", n.cfg.Name, err)
	}
	n.SetRing(next)

	var keys []string
	n.table.Range(func(k string) bool { keys = append(keys, k); return true })
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, 32)
		pushed   atomic.Int64
		firstErr error
		errMu    sync.Mutex
	)
	for _, key := range keys {
		owner, ok := next.Owner(key)
		if !ok {
			continue
		}
		mu := n.hand.stripe(key)
		mu.Lock()
		state, held := n.takeKey(key)
		if held {
			n.hand.mu.Lock()
			n.setTomb(key, tomb{to: owner.Peer, state: state, until: n.cfg.Now().Add(tombTTL)})
			n.hand.mu.Unlock()
		}
		mu.Unlock()
		if !held {
			continue // pulled meanwhile
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := n.peer(owner.Peer).call(ctx, &Call{Op: OpPut, Key: key, From: n.PeerAddr(), State: state})
			if err != nil {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("handoff %s to %s: %w", key, owner.Name, err)
				}
				errMu.Unlock()
				return
			}
			pushed.Add(1)
			n.hand.mu.Lock()
			if t, ok := n.hand.gone[key]; ok {
				t.state = nil // acknowledged: pulls now get nothing here
				n.hand.gone[key] = t
			}
			n.hand.mu.Unlock()
		}()
	}
	wg.Wait()
	return int(pushed.Load()), firstErr
}
