package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// Membership is the feed of memberships a node follows: gossip's Cluster
// in production (Join), a simulation's scripted views otherwise (JoinFeed).
type Membership interface {
	// Members is the membership now, this member included.
	Members() []gossip.MemberState
	// Events delivers each membership change; closed when the feed stops.
	Events() <-chan gossip.Snapshot
	// Reincarnate announces this member under a new boot id (after a
	// fence), waiting at most timeout for the others to hear it.
	Reincarnate(timeout time.Duration) (string, error)
}

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
	if err := n.JoinFeed(ctx, c, cfg.DeadAfter()); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// JoinFeed follows feed as Join follows gossip: the majority rule applies
// from now on, deadAfter being the least silence after which the feed may
// declare this member dead (0: never), and the feed's current members are
// the first view. Unless the node is Stepped, a goroutine follows the
// feed's events until it closes, ctx ends or the node closes; a Stepped
// node follows them only when FollowFeed is called.
func (n *Node) JoinFeed(ctx context.Context, feed Membership, deadAfter time.Duration) error {
	n.deadAfter.Store(int64(deadAfter))
	members := func() int { return len(feed.Members()) }
	n.gossipMembers.Store(&members)
	n.mandateUntil.Store(n.mono() + int64(n.mandateTerm()))
	n.majorityAt.Store(n.mono())
	n.lastBeat = n.mono()
	n.wasMandated = true
	n.gossiped.Store(true)
	first := feed.Members()
	n.learnCounted(first)
	if err := n.followSnapshot(gossip.Snapshot{Reason: "start", Members: first}); err != nil {
		return err
	}
	n.ready.Store(true)
	if n.cfg.Stepped {
		return nil
	}
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
				n.reincarnateOn(feed)
			case snap, ok := <-feed.Events():
				if !ok {
					return
				}
				n.followEvent(snap)
			}
		}
	}()
	return nil
}

// learnCounted asks every other member of the first view for the
// membership its majority rule counts (peer.OpCounted), and counts it too
// before the first view is judged (custody.Quorum.Learn): a process that
// starts during a split, or while a member is down, then sees its first
// view as the minority it is, instead of as a majority of itself and the
// members it happens to reach. A member that does not answer in
// PullTimeout (or runs an older build) teaches nothing.
func (n *Node) learnCounted(first []gossip.MemberState) {
	var names []string
	for _, m := range first {
		if m.Name == n.cfg.Name || m.Meta.Peer == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.PullTimeout)
		a, err := n.peers.Call(ctx, m.Meta.Peer, &Call{Op: peer.OpCounted, From: n.addr})
		cancel()
		if err != nil || !a.OK {
			continue
		}
		for name := range strings.SplitSeq(string(a.State), "\n") {
			names = append(names, name)
		}
	}
	n.tmu.Lock()
	n.quorum.Learn(names, n.cfg.Now())
	n.tmu.Unlock()
	if len(names) > 0 {
		n.log.Info("learned the membership the others count", "counted", n.Sharers())
	}
}

// FollowFeed takes what a Stepped node's feed has for it now, without
// waiting: a new incarnation the last fence asked for, then every
// snapshot queued. It reports whether the feed is still open.
func (n *Node) FollowFeed(feed Membership) bool {
	select {
	case <-n.reincarnate:
		n.reincarnateOn(feed)
	default:
	}
	for {
		select {
		case snap, ok := <-feed.Events():
			if !ok {
				return false
			}
			n.followEvent(snap)
		default:
			return true
		}
	}
}

// reincarnateOn comes back as a new member after a fence: peers see the
// new boot id once the network lets them.
func (n *Node) reincarnateOn(feed Membership) {
	boot, err := feed.Reincarnate(time.Second)
	n.tmu.Lock()
	n.announced = boot
	n.tmu.Unlock()
	if err != nil {
		n.log.Warn("new incarnation not announced yet; gossip carries it later", "boot_id", boot, "err", err)
	}
}

// followEvent installs one membership change, logging a refusal.
func (n *Node) followEvent(snap gossip.Snapshot) {
	if err := n.followSnapshot(snap); err != nil {
		n.log.Error("membership change ignored", "reason", snap.Reason, "err", err)
	}
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
	version := "" // no view installed yet: the first had no majority
	if r := n.ring.Load(); r != nil {
		version = r.Version()
	}
	n.log.Info("membership changed", "reason", snap.Reason, "members", len(members), "version", version)
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
