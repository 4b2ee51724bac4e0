package node

import (
	"context"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/node/custody"
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
	n.deadAfter.Store(int64(cfg.DeadAfter()))
	members := func() int { return len(c.Members()) }
	n.gossipMembers.Store(&members)
	n.mandateUntil.Store(n.mono() + int64(n.mandateTerm()))
	n.lastBeat = n.mono()
	n.wasMandated = true
	n.gossiped.Store(true)
	if err := n.followSnapshot(gossip.Snapshot{Reason: "start", Members: c.Members()}); err != nil {
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
			case <-n.reincarnate:
				// Fenced: come back as a new member. Peers see the new
				// boot id once the network lets them.
				boot, err := c.Reincarnate(time.Second)
				n.tmu.Lock()
				n.announced = boot
				n.tmu.Unlock()
				if err != nil {
					n.log.Warn("new incarnation not announced yet; gossip carries it later", "boot_id", boot, "err", err)
				}
			case snap, ok := <-c.Events():
				if !ok {
					return
				}
				if err := n.followSnapshot(snap); err != nil {
					n.log.Error("membership change ignored", "reason", snap.Reason, "err", err)
				}
			}
		}
	}()
	return c, nil
}

// followSnapshot installs the membership of one gossip snapshot.
func (n *Node) followSnapshot(snap gossip.Snapshot) error {
	members := make([]custody.Member, 0, len(snap.Members))
	for _, m := range snap.Members {
		members = append(members, custody.Member{
			Member:   ring.Member{Name: m.Name, HTTP: m.Meta.HTTP, Peer: m.Meta.Peer, Gossip: m.Addr, LimitsHash: m.Meta.LimitsHash},
			Boot:     m.Meta.BootID,
			Leaving:  m.Meta.Leaving || m.Meta.Departed, // Departed comes with Leaving; be safe
			Departed: m.Meta.Departed,
		})
	}
	if err := n.follow(members); err != nil {
		return err
	}
	n.log.Info("membership changed", "reason", snap.Reason, "members", len(members), "version", n.ring.Load().Version())
	return nil
}

func (n *Node) ringConfig() ring.Config { return n.cfg.Ring }

// Ready reports whether the node has joined, built its ring, and, the first
// time, received the state of every partition it owns: what /readyz
// answers, so a load balancer sends nothing to a joiner that would make its
// callers wait for a handoff. Once ready it stays ready: a later handoff
// (another node leaving) makes calls wait a moment, but taking every node
// out of rotation for it would turn a wait into errors.
func (n *Node) Ready() bool {
	if !n.ready.Load() {
		return false
	}
	if n.settled.Load() {
		return true
	}
	if t := n.tr.Load(); t != nil {
		for p := range t.gates {
			if t.gates[p].hop.Load().mode == custody.RouteAwait {
				return false
			}
		}
	}
	n.settled.Store(true)
	return true
}
