package node

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/tokenring/tokenring/internal/lazyctx"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/node/replica"
)

// newServer serves the peer protocol on ln, authenticated with auth (nil:
// plaintext): the calls peers forward here.
func (n *Node) newServer(ln net.Listener, auth *peer.Auth) *peer.Server {
	return peer.NewServer(ln, peer.ServerConfig{
		Handle:   n.handler(),
		Inline:   n.inline,
		Batch:    n.cfg.Batch,
		Log:      n.log,
		Auth:     auth,
		Limits:   n.peerLimits(),
		MaxConns: n.cfg.MaxPeerConns,
		Stats:    &n.peerStats,
	})
}

// newPool makes the pool of this node's connections to its peers, which
// it announces itself on as self, authenticated with auth.
func (n *Node) newPool(self string, auth *peer.Auth) *peer.Pool {
	return peer.NewPool(peer.PoolConfig{
		Self:    self,
		Dial:    n.cfg.Dial,
		Batch:   n.cfg.Batch,
		Forward: n.cfg.Forward,
		Log:     n.log,
		Stats:   &n.peerStats,
		Auth:    auth,
		Limits:  n.peerLimits(),
	})
}

// peerLimits bounds what every peer connection reads and writes.
func (n *Node) peerLimits() peer.Limits {
	return peer.Limits{MaxFrame: n.cfg.MaxFrame, ReadTimeout: n.cfg.PeerReadTimeout}
}

// serve executes a call that arrived from a peer.
func (n *Node) serve(ctx context.Context, c *Call) (Answer, error) {
	switch c.Op {
	case peer.OpTransfer:
		msgs, err := custody.DecodeMsgs(c.State)
		if err != nil {
			return Answer{}, err
		}
		if t := n.tr.Load(); t != nil {
			t.step(msgs)
		}
		return Answer{Owner: n.cfg.Name, OK: true}, nil
	case peer.OpReplicate:
		n.replicas.Put(c.Key, c.State, n.cfg.Now())
		return Answer{Owner: n.cfg.Name, OK: true}, nil
	case peer.OpReplicateMany:
		now := n.cfg.Now()
		err := peer.DecodeEntries(c.State, func(key string, state []byte) error {
			n.replicas.Put(key, state, now) // a rejected replica is logged, the others kept
			return nil
		})
		if err != nil {
			return Answer{}, fmt.Errorf("replicate from %s: %w", c.From, err)
		}
		return Answer{Owner: n.cfg.Name, OK: true}, nil
	case peer.OpReplica:
		rep, ok := n.replicas.Take(c.Key)
		if !ok {
			return Answer{Owner: n.cfg.Name}, nil
		}
		return Answer{Owner: n.cfg.Name, OK: true, State: replica.AppendCopy(nil, rep)}, nil
	case peer.OpCounted:
		n.tmu.Lock()
		names := n.quorum.Names()
		n.tmu.Unlock()
		return Answer{Owner: n.cfg.Name, OK: true, State: []byte(strings.Join(names, "\n"))}, nil
	case peer.OpTake, peer.OpPut, peer.OpPing:
		return Answer{}, fmt.Errorf("op %s is not served by this version", c.Op)
	}
	lazy, cancel := lazyctx.WithTimeout(ctx, n.cfg.HopTimeout+n.cfg.TransferWait+c.Req.Wait)
	defer cancel()
	return n.Do(lazy, *c)
}

// inline reports whether a forwarded call is cheap enough to run on the
// connection's reader goroutine: decided here at once, without waiting or
// forwarding. A call that may wait must not: the frames behind it on the
// connection (the ping that shows this node alive, the transfer the call
// waits for) would wait with it.
func (n *Node) inline(c *Call) bool {
	switch {
	case c.Op == peer.OpReplicate || c.Op == peer.OpReplicateMany || c.Op == peer.OpReplica || c.Op == peer.OpCounted:
		return true
	case c.Op == peer.OpTransfer, c.Op == OpAcquire && c.Req.Wait > 0:
		return false
	case c.Op == peer.OpRun:
		return n.runInline(c)
	case n.cfg.ReplicationSync:
		return false // a change is answered once its backup acknowledged it: a round trip on another connection
	}
	t := n.tr.Load()
	if t == nil {
		// Before our first ring a forwarded call waits for it (Do,
		// awaitFirstRing); only a call nobody forwarded is decided here.
		return c.Hops == 0
	}
	g := &t.gates[n.ring.Load().Partition(c.Key)]
	if g.hop.Load().mode != custody.RouteLocal {
		return false
	}
	// While the partition's fetch hint lasts (minutes after its last
	// custodian died, or after the cluster started), a key not yet here is
	// looked up over the network (fetchKey); a key here already is not.
	return g.fetch.Load() == nil || n.table.Peek(c.Key, func(*limiter.Budget) {})
}

// Serve executes a call a peer sent this node, as the peer server does
// with each call that arrives (under a span when tracing is on): the
// entry point of a Config.Transport's calls.
func (n *Node) Serve(ctx context.Context, c *Call) (Answer, error) { return n.handler()(ctx, c) }
