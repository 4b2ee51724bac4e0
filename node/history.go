package node

import (
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// History calls fn, oldest first, for every bucket of key's windows that
// counts something (limiter.Budget.Since with no base), when this node's
// table holds key's state, and returns the key's window; held is false
// (and fn never called) otherwise. A bucket may lie before the window if
// nothing moved the key's head since: callers drop buckets older than
// now − window. fn runs under the key's shard lock: it must only copy.
func (n *Node) History(key string, fn func(at time.Time, requests, tokens int64)) (window time.Duration, held bool) {
	held = n.table.Peek(key, func(b *limiter.Budget) {
		window = b.Limits().Window
		b.Since(nil, fn)
	})
	return window, held
}
