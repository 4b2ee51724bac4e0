package router

// The decision API on an event loop (internal/http1's Config.Quick): a
// call is answered on the loop's thread only when nothing it does can
// wait, which is when every key it touches is decided at this node, now.

import (
	"context"

	"github.com/tokenring/tokenring/internal/http1"
)

// immediate is a Cluster that tells which keys it decides at once
// (*node.Node).
type immediate interface {
	// Immediate reports whether a call for key, without wait_ms, would
	// now be decided here without waiting on anything.
	Immediate(key string) bool
}

// ServeQuick is the decision API's http1 Quick handler, run on an event
// loop's thread. It takes what ServePlain takes, and answers it exactly
// as ServePlain does, when it is decided at this node at once. An acquire
// without a pool is asked of the cluster as such (node.Call.Now): decided
// by the key's owner here or from this node's slice of a hot key's budget,
// or refused by the node having changed nothing. A request touching two
// keys or more (an acquire with a pool, a lease of both, a batch of
// acquires) is taken only when each is decided here at once
// (node.Node.Immediate), and a batch only of acquires. It declines, having
// changed nothing, everything else: a call forwarded to its owner, the LLM
// proxy's requests, a batch with a complete or a renew (their calls run on
// goroutines of their own), and every request when the cluster cannot
// tell (no Immediate).
func (r *Router) ServeQuick(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	if r.quick == nil {
		return false
	}
	return r.servePlain(ctx, req, resp, true)
}

// nowKey marks nowCtx.
type nowKey struct{}

// nowCtx is the context of ServeQuick's acquires: the cluster calls they
// make ask for a decision at once (node.Call.Now). It never ends.
var nowCtx = context.WithValue(context.Background(), nowKey{}, true)

// decidingNow reports whether ctx is (or derives from) nowCtx.
func decidingNow(ctx context.Context) bool {
	now, _ := ctx.Value(nowKey{}).(bool)
	return now
}

// Aside is the decision API's http1 Aside: a decision call ServeQuick
// declines (one forwarded to its owner, most often) is answered by
// ServePlain beside the loop, its connection taken back after; it never
// watches its client. The LLM proxy's requests, which do, leave the loop
// with their connection.
func (r *Router) Aside(req *http1.Request) bool {
	switch string(req.Path) {
	case "/v1/acquire", "/v1/complete", "/v1/renew", "/v1/batch":
		return true
	}
	return false
}

// immediateAcquire reports whether an acquire of tenant for model may be
// asked for at once: one without a pool always (the node refuses it, as
// node.Call.Now says, if it cannot), one with a pool when both keys are
// decided here at once (the pool's refusal would come after the tenant's
// admission).
func (r *Router) immediateAcquire(tenant, model string) bool {
	pool, ok := r.cfg.PoolFor(model)
	return !ok || r.quick.Immediate(TenantKey(tenant)) && r.quick.Immediate(PoolKey(pool))
}

// immediateLease reports whether a complete or renew of in touches only
// keys decided here at once. A call whose lease does not parse is a 4xx
// answered at once.
func (r *Router) immediateLease(in *completeRequest) bool {
	l, err := r.parseLeaseRequest(in)
	if err != nil {
		return true
	}
	for _, s := range l.sides() {
		if !s.fallback && !r.quick.Immediate(s.key) {
			return false
		}
	}
	return true
}

// immediateBatch reports whether a batch whose calls the fast decoder read
// (pre) holds acquires only, each decided here at once (here).
func (r *Router) immediateBatch(pre []decodedCall) bool {
	for i := range pre {
		c := &pre[i]
		if !c.ok || c.acquire.Op != "acquire" || c.acquire.WaitMS != 0 || !r.here(TenantKey(c.acquire.Tenant)) {
			return false
		}
		if pool, ok := r.cfg.PoolFor(c.acquire.Model); ok && !r.here(PoolKey(pool)) {
			return false
		}
	}
	return true
}

// here reports whether key is owned here by this node's ring (as
// acquireHere asks) and decided here at once.
func (r *Router) here(key string) bool {
	return r.ownedHere(key) && r.quick.Immediate(key)
}
