package router

// Which calls are decided at this node at once: the decision API answers
// those on an event loop's thread (api.Server.ServeQuick), and runs the
// acquires a batch decides here on the batch's own goroutine.

// immediate is a Cluster that tells which keys it decides at once
// (*node.Node).
type immediate interface {
	// Immediate reports whether a call for key, without wait_ms, would
	// now be decided here without waiting on anything.
	Immediate(key string) bool
}

// Quick reports whether the cluster tells which keys it decides at once
// (node.Node.Immediate); when it does not, no call is known to be.
func (r *Router) Quick() bool { return r.quick != nil }

// ImmediateAcquire reports whether an acquire of tenant for model touches
// only keys (every key of its chain, sidesOf) decided here at once. Quick
// must be true.
func (r *Router) ImmediateAcquire(tenant, model string) bool {
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

// OwnedAcquire reports whether this node's ring owns every key an
// acquire of tenant for model touches (ownedHere).
func (r *Router) OwnedAcquire(tenant, model string) bool {
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

// ImmediateLease reports whether a complete or renew of l touches only
// keys decided here at once (the fallback's sides are always). Quick must
// be true.
func (r *Router) ImmediateLease(l Lease) bool {
	for _, s := range l.Sides() {
		if !s.Fallback && !r.quick.Immediate(s.Key) {
			return false
		}
	}
	return true
}

// ownedHere reports whether this node owns key by its current ring (a node
// without a ring owns every key).
func (r *Router) ownedHere(key string) bool {
	rg := r.cluster.Ring()
	if rg == nil {
		return true
	}
	m, ok := rg.Owner(key)
	return ok && m.Name == r.cluster.Name()
}
