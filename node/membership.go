package node

import (
	"context"
	"fmt"

	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/ring"
)

// Join starts gossip with cfg, builds the first ring from the members it
// found, and keeps rebuilding the ring from every membership snapshot until
// the gossip cluster shuts down or the node closes. The node is Ready once
// the first ring is installed. The caller leaves and shuts the returned
// cluster down.
func (n *Node) Join(ctx context.Context, cfg gossip.Config) (*gossip.Cluster, error) {
	if cfg.Name != n.cfg.Name {
		return nil, fmt.Errorf("join: gossip name %q differs from node name %q", cfg.Name, n.cfg.Name)
	}
	c, err := gossip.Start(cfg)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if err := n.follow(gossip.Snapshot{Reason: "start", Members: c.Members()}); err != nil {
		c.Shutdown()
		return nil, err
	}
	n.ready.Store(true)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case <-n.stop:
				return
			case <-ctx.Done():
				return
			case snap, ok := <-c.Events():
				if !ok {
					return
				}
				if err := n.follow(snap); err != nil {
					n.log.Error("membership change ignored", "reason", snap.Reason, "err", err)
				}
			}
		}
	}()
	return c, nil
}

// follow installs the ring for one membership snapshot. After Handoff the
// node keeps the ring without itself.
func (n *Node) follow(snap gossip.Snapshot) error {
	if n.leaving.Load() {
		return nil
	}
	members := make([]ring.Member, 0, len(snap.Members))
	for _, m := range snap.Members {
		members = append(members, ring.Member{Name: m.Name, HTTP: m.Meta.HTTP, Peer: m.Meta.Peer, Gossip: m.Addr})
	}
	next, err := ring.New(n.ringConfig(), members)
	if err != nil {
		return fmt.Errorf("ring for %d members: %w", len(members), err)
	}
	prev := n.ring.Load()
	if prev != nil && prev.Version() == next.Version() {
		return nil
	}
	moves := ring.Moves(prev, next)
	n.SetRing(next)
	n.log.Info("ring changed", "reason", snap.Reason, "members", len(members), "version", next.Version(), "partitions_moved", len(moves))
	return nil
}

func (n *Node) ringConfig() ring.Config { return n.cfg.Ring }

// Ready reports whether the node has joined and built its ring.
func (n *Node) Ready() bool { return n.ready.Load() }
