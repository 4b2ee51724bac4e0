package peer

import (
	"context"
	"time"
)

// Transport carries a member's calls to its peers, named by peer address.
// Pool is the production one (TCP, batched, sealed); a simulation supplies
// its own (node's sim_test.go: an in-memory network with a simulated clock).
// Implementations are safe for concurrent use.
type Transport interface {
	// Call sends c to the peer at addr and waits for its answer. A peer
	// that cannot be reached fails with an error wrapping ErrPeerDown;
	// the call may then still have been executed there (its answer lost).
	Call(ctx context.Context, addr string, c *Call) (Answer, error)
	// Heartbeat pings the peer at addr without waiting; its answer, like
	// any, moves HeardAt.
	Heartbeat(addr string)
	// HeardAt is when anything last arrived from the peer at addr (the
	// transport's creation if nothing has).
	HeardAt(addr string) time.Time
	// Up reports whether a connection to the peer at addr is open now.
	Up(addr string) bool
	// Keep forgets the peers whose address live does not hold.
	Keep(live map[string]bool)
	// Close forgets every peer; calls after it make connections anew.
	Close()
}

var _ Transport = (*Pool)(nil)

// Call sends c to the peer at addr (Client.Call).
func (p *Pool) Call(ctx context.Context, addr string, c *Call) (Answer, error) {
	return p.Get(addr).Call(ctx, c)
}

// Heartbeat pings the peer at addr in the background (Client.Heartbeat).
func (p *Pool) Heartbeat(addr string) { p.Get(addr).Heartbeat() }

// HeardAt is when a frame last arrived from the peer at addr (Client.HeardAt).
func (p *Pool) HeardAt(addr string) time.Time { return p.Get(addr).HeardAt() }
