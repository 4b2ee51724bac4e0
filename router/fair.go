package router

import "github.com/tokenring/tokenring/limiter"

// A pool's fair shares (limiter.Limits.Fair): the pool's acquires name
// their tenant as the flow that asks, with the tenant's weight.

// reqFor is req as side i of ss asks it: at a pool, of the tenant's flow
// with its weight.
func (ss *sideSet) reqFor(i int, req limiter.Request) limiter.Request {
	if ss.s[i].Kind == KeyPool {
		req.Flow, req.Weight = ss.s[0].Name, ss.weight
	}
	return req
}

// weigh sets ss's weight, the tenant's in its pool (Config.Weight), if ss
// charges a pool.
func (r *Router) weigh(ss *sideSet) {
	if r.cfg.Weight != nil && ss.n > 0 && ss.s[ss.n-1].Kind == KeyPool {
		ss.weight = r.cfg.Weight(ss.s[0].Name)
	}
}
