package router

// Renewal of an admitted request's lease while the upstream works on it: a
// lease that is not renewed expires after its TTL, and a long answer
// (a stream, most often) would lose its slot before it is settled.

import (
	"context"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// renewInterval is a third of the shortest lease TTL of the lease's keys.
func (r *Router) renewInterval(tl limiter.Limits, l lease) time.Duration {
	ttl := tl.LeaseTTL
	if ttl <= 0 {
		ttl = limiter.DefaultLeaseTTL
	}
	if l.Pool != "" {
		if pt := r.cfg.Limits(PoolKey(l.Pool)).LeaseTTL; pt > 0 {
			ttl = min(ttl, pt)
		}
	}
	return max(ttl/3, time.Millisecond)
}

// renewEvery renews l every interval until the returned stop is called; stop
// returns once the renewing goroutine has ended.
func (r *Router) renewEvery(l lease, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if ok, _, _ := r.leaseCall(ctx, l, node.OpRenew, limiter.Usage{}); !ok && ctx.Err() == nil {
					r.log.Warn("proxy: renewing a streaming request's lease failed; its slot may expire", "tenant", l.Tenant)
				}
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
