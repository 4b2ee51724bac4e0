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
// as ServePlain does, when every key the request touches is decided at
// this node at once (node.Node.Immediate): every key of an acquire's chain;
// a complete's or renew's lease's sides; every call of a batch that holds
// acquires only. It declines, having changed nothing, everything else: a
// call forwarded to its owner, the LLM proxy's requests, a batch with a
// complete or a renew (their calls run on goroutines of their own), and
// every request when the cluster cannot tell (no Immediate).
func (r *Router) ServeQuick(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	if r.quick == nil {
		return false
	}
	return r.servePlain(ctx, req, resp, true)
}

// immediateAcquire reports whether an acquire of tenant for model touches
// only keys (every key of its chain, sidesOf) decided here at once.
func (r *Router) immediateAcquire(tenant, model string) bool {
	if !r.chained(tenant, model) { // as before chains: no key stored, none allocated twice
		if !r.quick.Immediate(TenantKey(tenant)) {
			return false
		}
		pool, ok := r.cfg.PoolFor(model)
		return !ok || r.quick.Immediate(PoolKey(pool))
	}
	var ss sideSet
	r.sidesOf(tenant, model, &ss)
	for _, s := range ss.s[:ss.n] {
		if !r.quick.Immediate(s.Key) {
			return false
		}
	}
	return true
}

// ownedAcquire reports whether this node's ring owns every key an
// acquire of tenant for model touches (ownedHere).
func (r *Router) ownedAcquire(tenant, model string) bool {
	if !r.chained(tenant, model) {
		if !r.ownedHere(TenantKey(tenant)) {
			return false
		}
		pool, ok := r.cfg.PoolFor(model)
		return !ok || r.ownedHere(PoolKey(pool))
	}
	var ss sideSet
	r.sidesOf(tenant, model, &ss)
	for _, s := range ss.s[:ss.n] {
		if !r.ownedHere(s.Key) {
			return false
		}
	}
	return true
}

// immediateLease reports whether a complete or renew of in touches only
// keys decided here at once. A call whose lease does not parse is a 4xx
// answered at once.
func (r *Router) immediateLease(in *completeRequest) bool {
	l, err := r.parseLeaseRequest(in)
	if err != nil {
		return true
	}
	for _, s := range l.Sides() {
		if !s.Fallback && !r.quick.Immediate(s.Key) {
			return false
		}
	}
	return true
}

// immediateBatch reports whether a batch whose calls the fast decoder read
// (pre) holds acquires only, each decided here at once (and, as
// acquireHere asks, owned here by this node's ring).
func (r *Router) immediateBatch(pre []decodedCall) bool {
	for i := range pre {
		c := &pre[i]
		if !c.ok || c.acquire.Op != "acquire" || c.acquire.WaitMS != 0 || !r.ownedAcquire(c.acquire.Tenant, c.acquire.Model) ||
			!r.immediateAcquire(c.acquire.Tenant, c.acquire.Model) {
			return false
		}
	}
	return true
}
