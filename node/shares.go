package node

import (
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Shares returns the use and share of every flow of a fair key (a pool's
// tenants) at now, when this node's table holds key's state; held is
// false otherwise (limiter.Budget.Shares).
func (n *Node) Shares(key string, now time.Time) (shares []limiter.FlowShare, held bool) {
	held = n.table.Peek(key, func(b *limiter.Budget) { shares = b.Shares(now) })
	return shares, held
}
