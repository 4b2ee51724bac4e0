package node

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/replica"
)

// Replication (node/replica): an owner's RAM dies with it, so every
// ReplicationInterval the owner sends the snapshots of the keys it changed
// since the last round to each key's backups (the next ReplicationCopies
// members for the key's partition), and to the checkpoint if there is
// one. A backup only stores them. When an owner crashes, the member that
// restores its partitions fetches each key, on first use, from the backups'
// replicas or the checkpoint (fetchKey) instead of starting from zero. What
// is lost is what the owner admitted after its last replication round: at
// most one interval's worth (plus the transfer time).

// newReplicator makes what copies this node's keys to their backups and
// fetches a crashed owner's, self being this node's peer address.
func (n *Node) newReplicator(self string) *replica.Replicator {
	return &replica.Replicator{
		Name:        n.cfg.Name,
		Self:        self,
		Copies:      n.cfg.ReplicationCopies,
		Checkpoint:  n.cfg.Checkpoint,
		PullTimeout: n.cfg.PullTimeout,
		Table:       n.table,
		Peers:       n.peers,
		Log:         n.log,
		Now:         n.cfg.Now,
		Dirty:       n.dirty,
		Acked:       n.acked,
		Backup:      n.replicas,
	}
}

// Replicas reports how many keys this node holds replicas of, as a backup.
func (n *Node) Replicas() int { return n.replicas.Len() }

// changed marks key for the next replication round, unless no round would
// copy it: without a checkpoint store, a node alone (or before its first
// ring) has no backup to copy to, and replicateOnce would drop the mark.
// A node that joins later gets the key's state on its next change, as it
// would have from a mark dropped by the round before the join.
func (n *Node) changed(key string) {
	if n.cfg.Checkpoint == nil {
		if r := n.ring.Load(); r == nil || r.Len() < 2 {
			return
		}
	}
	n.dirty.Mark(key)
}

// Unreplicated reports the changed keys not yet copied to their backup (and
// checkpoint), plus one for each replication round under way. Zero means
// every change made so far is copied.
func (n *Node) Unreplicated() int { return n.dirty.Len() + int(n.inflight.Load()) }

// replicateOnce sends the changed keys' snapshots to their backups, and to
// the checkpoint store if there is one (replica.Replicator.Round).
func (n *Node) replicateOnce() {
	r := n.ring.Load()
	n.inflight.Add(1) // covers the keys between drain and the end of the round
	defer n.inflight.Add(-1)
	keys := n.dirty.Drain()
	if r == nil || len(keys) == 0 {
		return
	}
	// The round ends when the node closes: Close waits for it, and a
	// checkpoint store that does not answer must not hold Close up.
	ctx, cancel := context.WithTimeout(context.Background(), max(n.cfg.ReplicationInterval, time.Second))
	defer cancel()
	roundDone := make(chan struct{})
	defer close(roundDone)
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-roundDone:
		}
	}()
	n.repl.Round(ctx, r, keys, func(key string) bool {
		t := n.tr.Load()
		return t == nil || t.gates[r.Partition(key)].hop.Load().mode == custody.RouteLocal
	})
}

// replicateNow copies key's state to its backups and waits until each
// holds it or cannot be reached (ReplicationSync).
func (n *Node) replicateNow(ctx context.Context, key string) {
	if r := n.ring.Load(); r != nil {
		n.repl.Sync(ctx, r, key)
	}
}

// checkReplica rejects a replica of key that would not decode
// (limiter.RestoreBudget), or whose times lie beyond now plus MaxClockSkew
// (limiter.Budget.CheckClock), so that a forged or corrupt copy cannot
// displace a good one, or later be fetched into a key refused for years.
// It builds no Budget (limiter.CheckSnapshot): a backup runs it for every
// key of every round.
func (n *Node) checkReplica(key string, state []byte, now time.Time) error {
	if err := limiter.CheckSnapshot(state, n.cfg.LimitsFor(key), now, n.cfg.MaxClockSkew); err != nil {
		return fmt.Errorf("replica of %q: %w", key, err)
	}
	return nil
}
