package node

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/ring"
)

// Handoff around custody (custody/machine.go, transfer.go): what happens to keys
// when their custodian crashed, and how a node leaves gracefully.

// fetchKey fetches key, of a partition restored because its custodian
// crashed, from the newest copy the custodian left: the backup's replica or
// the checkpoint. The restore installs nothing itself (bar the preloaded
// checkpoint, restorePartition): each key is fetched once, on first use,
// while the partition's fetch hint lasts; no gate is held during its network I/O, and the key is installed
// only while this node still decides for its partition.
func (n *Node) fetchKey(ctx context.Context, g *gate, h *fetchHint, key string) {
	if n.cfg.Now().After(h.until) {
		g.fetch.CompareAndSwap(h, nil)
		return
	}
	if n.table.Peek(key, func(*limiter.Budget) {}) {
		return
	}
	mu := &n.stripes[maphash.String(n.seed, key)%uint64(len(n.stripes))]
	mu.Lock()
	defer mu.Unlock()
	if n.table.Peek(key, func(*limiter.Budget) {}) {
		return // fetched by a concurrent call
	}
	state, from := n.repl.Fetch(ctx, key, h.backups, !h.preloaded)
	if len(state) == 0 {
		return
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.hop.Load().mode != custody.RouteLocal || n.table.Peek(key, func(*limiter.Budget) {}) {
		return
	}
	if err := n.table.Put(key, state, n.cfg.Now()); err != nil {
		n.log.Error("fetch: bad state", "key", key, "from", from, "err", err)
		return
	}
	if from == "checkpoint" {
		n.counts.fromCheckpoint.Add(1)
	} else {
		n.counts.fromReplica.Add(1)
	}
	n.dirty.Mark(key) // replicate to this key's new backup
}

// Drain hands every partition this node holds to its owner in the ring
// without this node, for a graceful leave, and returns once every taker has
// acknowledged (or ctx ends, with an error saying how many partitions are
// still here). The node keeps serving meanwhile: calls for a partition
// being handed on are forwarded to its taker, which waits for it. Call it
// after the other members were told (gossip's SetLeaving), before leaving
// the gossip cluster; membership changes after it keep this node out of
// the ring. The slices of hot keys this node holds go back to their
// owners first, and it asks for none after.
func (n *Node) Drain(ctx context.Context) error {
	n.leaving.Store(true)
	n.returnSlices()
	t := n.tr.Load()
	if t == nil {
		return nil
	}
	n.tmu.Lock()
	members := n.members
	n.tmu.Unlock()
	if err := n.follow(members); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		held := t.held()
		if held == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain %s: %d partitions not acknowledged: %w", n.cfg.Name, held, ctx.Err())
		case <-tick.C:
		}
	}
}

// follow installs a membership, keeping members marked leaving (and this
// node, once draining) out of the ring.
func (n *Node) follow(members []custody.Member) error {
	var inRing []ring.Member
	self := n.cfg.Name
	var boot string
	members = slices.Clone(members)
	for i := range members {
		m := &members[i]
		if m.Name == self {
			boot = m.Boot
			if n.leaving.Load() {
				m.Leaving = true
			}
		}
		if !m.Leaving {
			inRing = append(inRing, m.Member)
		}
	}
	r, err := ring.New(n.cfg.Ring, inRing)
	if err != nil {
		return fmt.Errorf("ring for %d members: %w", len(inRing), err)
	}
	ids := make([]string, 0, len(members))
	for _, m := range members {
		// The flags count: a departure announced changes the quorum's
		// membership counted though it leaves the ring as it was.
		ids = append(ids, fmt.Sprintf("%s@%s/%t/%t", custody.MemberID(m.Name, m.Boot), m.Peer, m.Leaving, m.Departed))
	}
	slices.Sort(ids)
	sig := r.Version() + " " + strings.Join(ids, ",")
	n.tmu.Lock()
	same := sig == n.viewSig
	n.viewSig = sig
	n.tmu.Unlock()
	if !same { // a metadata refresh that changes nothing is not a new view
		n.setMembers(r, members, boot)
	}
	return nil
}
