package node

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/replica"
	"github.com/tokenring/tokenring/ring"
)

// Restart from the checkpoint: a node that starts reads the whole
// checkpoint once (Preload), before it joins, and keeps the snapshots
// grouped by partition. A partition restored here because its custodian
// died and nobody alive holds it (a whole cluster restarted) gets its
// preloaded keys installed before it is admitted (restorePartition): a
// checkpointed key counts from its checkpoint even if nobody asks for it,
// and without a Redis read on the decision path.
//
// The preload describes the checkpoint as it was when the node started, so
// it only serves the restores of the node's start: once every partition
// this node owns has arrived (the node is settled, as Ready reports), a
// later restore comes from a crash after the start, whose keys have newer
// copies (the backup's replica, the checkpoint) that fetchKey finds key
// by key. The preload is dropped then, when the node closes, or when its
// newest snapshot is older than HandoffHorizon, whichever comes first; a
// partition's entries are dropped as soon as it is restored.

// Preload reads every snapshot of the configured checkpoint (none: it does
// nothing) into memory, grouped by partition, for the partitions this node
// will restore because nobody alive holds them: call it before Join. It
// returns how many keys it holds, snapshots already older than
// HandoffHorizon left out. On an error (the store failed or ctx ended) the
// keys read so far are kept, and the rest are looked up one by one on
// first use as without a preload.
func (n *Node) Preload(ctx context.Context) (int, error) {
	if n.cfg.Checkpoint == nil {
		return 0, nil
	}
	select {
	case <-n.stop:
		return 0, fmt.Errorf("preload %s: %w", n.cfg.Name, ErrClosed)
	default:
	}
	r, err := ring.New(n.cfg.Ring, nil) // partitions only: the same hash on every ring of this config
	if err != nil {
		return 0, fmt.Errorf("preload %s: %w", n.cfg.Name, err)
	}
	pl, keys, scanErr := replica.ScanCheckpoint(ctx, n.cfg.Checkpoint, r.Partition, n.cfg.Now(), n.cfg.HandoffHorizon)
	if pl != nil {
		if old := n.preload.Swap(pl); old != nil {
			old.Drop() // a second Preload replaces the first
		}
		n.wg.Add(1)
		go n.expirePreload(pl)
	}
	if scanErr != nil {
		return keys, fmt.Errorf("preload %s: %d keys read: %w", n.cfg.Name, keys, scanErr)
	}
	return keys, nil
}

// restorePartition installs, before partition p is admitted here again, the
// keys of p that this node preloaded from the checkpoint at startup (a whole
// cluster restarted: nobody holds the partition, and no replica survives).
// Keys not preloaded are still looked up one by one on first use
// (fetchKey). It runs under the custody lock; gate is p's gate, not held.
func (n *Node) restorePartition(gate *gate, p int) {
	pl := n.preload.Load()
	if pl == nil {
		return
	}
	if n.settled.Load() {
		// A restore after the start: the preload is older than what the
		// dead custodian left.
		n.dropPreload(pl, "settled")
		return
	}
	keys, left := pl.Take(p)
	if h := gate.fetch.Load(); h != nil && pl.Whole() {
		// The partition's checkpointed keys are all here now: a key
		// missing from the table costs no Redis read on first use. With
		// no backup to ask either (a cluster of one), nothing is left to
		// look up: the hint goes, and a new key is decided at once (on an
		// event loop, inline on a peer connection), not after the
		// HandoffHorizon.
		if len(h.backups) == 0 {
			gate.fetch.Store(nil)
		} else {
			hint := *h
			hint.preloaded = true
			gate.fetch.Store(&hint)
		}
	}
	if left == 0 {
		n.preload.CompareAndSwap(pl, nil)
	}
	if len(keys) == 0 {
		return
	}
	now := n.cfg.Now()
	installed, stale := 0, 0
	gate.mu.Lock()
	defer gate.mu.Unlock()
	for key, e := range keys {
		if now.Sub(e.At) > n.cfg.HandoffHorizon {
			stale++
			continue
		}
		if n.table.Peek(key, func(*limiter.Budget) {}) {
			continue // a newer copy is here already
		}
		if err := n.table.Put(key, e.State, now); err != nil {
			n.log.Error("restore: bad checkpoint state", "key", key, "partition", p, "err", err)
			continue
		}
		installed++
		n.dirty.Mark(key) // replicate to its backup, checkpoint again
	}
	n.counts.fromCheckpoint.Add(int64(installed))
	n.log.Debug("restore: partition from the preloaded checkpoint", "partition", p, "keys", installed, "expired", stale)
}

// dropPreload forgets pl, if it is still n's preload.
func (n *Node) dropPreload(pl *replica.Preload, why string) {
	n.preload.CompareAndSwap(pl, nil)
	if left := pl.Drop(); left > 0 {
		n.log.Info("restore: preloaded checkpoint dropped", "reason", why, "unused_keys", left)
	}
}

// expirePreload drops pl once the node has started up (every partition it
// owns arrived), its snapshots are past HandoffHorizon, or the node closes.
func (n *Node) expirePreload(pl *replica.Preload) {
	defer n.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-n.stop:
			n.dropPreload(pl, "closed")
			return
		case <-tick.C:
		}
		if n.preload.Load() != pl {
			return // used up, or replaced
		}
		switch {
		case n.startedUp():
			n.dropPreload(pl, "settled")
			return
		case !n.cfg.Now().Before(pl.Until()):
			n.dropPreload(pl, "expired")
			return
		}
	}
}

// startedUp reports whether every partition this node owns has arrived
// once since it started: from then on, a restore follows a crash.
func (n *Node) startedUp() bool {
	if n.settled.Load() {
		return true
	}
	t := n.tr.Load()
	if t == nil {
		return false
	}
	for p := range t.gates {
		if t.gates[p].hop.Load().mode == custody.RouteAwait {
			return false
		}
	}
	return true
}
