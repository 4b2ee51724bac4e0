package node

import (
	"context"
	"testing"

	"github.com/tokenring/tokenring/limiter"
)

// Limits a request sends are applied at the key's owner, whichever node
// the request reached, and the owner applies the newest it decided: two
// gateways sending different limits converge on the later one; a lowered
// limit refuses until the window drains. Hot-key slices do not serve such
// an acquire.
func TestSentLimitsAreAppliedAtTheOwner(t *testing.T) {
	c := newCluster(t, 2, func(string) limiter.Limits { return limiter.Limits{Requests: 1000} }, BatchConfig{},
		func(cfg *Config) { cfg.HotKeyRate = 1 })
	key := c.keyOwnedBy(t, 1)
	via := c.nodes[0] // forwards to the owner
	acquire := func(nd *Node, sent *limiter.Limits, n int) (allowed int) {
		t.Helper()
		for range n {
			a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{Reserve: 1}, Limits: sent})
			if err != nil {
				t.Fatal(err)
			}
			if a.Decision.Allowed {
				allowed++
			}
			if a.Owner != c.nodes[1].Name() {
				t.Fatalf("decided by %s, want the owner %s", a.Owner, c.nodes[1].Name())
			}
		}
		return allowed
	}
	gatewayA, gatewayB := &limiter.Limits{Requests: 30}, &limiter.Limits{Requests: 20}
	if got := acquire(via, gatewayA, 25); got != 25 {
		t.Fatalf("gateway A's rpm 30 through a forwarder: %d of 25 admitted", got)
	}
	if got := acquire(c.nodes[1], gatewayB, 5); got != 0 {
		t.Fatalf("gateway B lowers to rpm 20 with 25 counted: %d admitted, want 0", got)
	}
	if got := acquire(via, nil, 3); got != 0 {
		t.Fatalf("an acquire without limits after B's: %d admitted, want 0 (B's rpm 20 holds, not the owner's 1000)", got)
	}
	if got := acquire(via, gatewayA, 10); got != 5 {
		t.Fatalf("gateway A again, rpm 30 with 25 counted: %d of 10 admitted, want 5", got)
	}
	st, ok := c.nodes[1].Held(key)
	if !ok || st.Requests.Limit != 30 || st.Requests.Remaining != 0 {
		t.Fatalf("the owner holds %+v (held %v), want rpm 30 with nothing left", st, ok)
	}
}
