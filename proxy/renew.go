package proxy

// Renewal of an admitted request's lease while the upstream works on it: a
// lease that is not renewed expires after its TTL, and a long answer
// (a stream, most often) would lose its slot before it is settled.

import (
	"context"
	"sync"
	"time"

	"github.com/tokenring/tokenring/internal/alarm"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// renewEvery renews l every interval until the returned stop is called; stop
// returns once no renewal is running and none will start. Between renewals
// nothing runs: an alarm (Server.alarms) calls renewer.renew when one is due, so
// a request that ends within the interval (most do) costs no goroutine and
// no runtime timer.
func (s *Server) renewEvery(l router.Lease, every time.Duration) (stop func()) {
	rn := &renewer{s: s, l: l, every: every}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.t = s.alarms.After(every, rn.renew)
	return rn.stop
}

// renewer renews one lease on an alarm (see Server.renewEvery).
type renewer struct {
	s     *Server
	l     router.Lease
	every time.Duration

	mu      sync.Mutex
	t       *alarm.Alarm // the next renewal's
	stopped bool
	cancel  context.CancelFunc // cancels the renewal running, if any
	running sync.WaitGroup     // the renewal running, if any
}

// renew renews the lease once and sets the alarm for the next renewal,
// every after this one was due.
func (rn *renewer) renew() {
	due := time.Now()
	rn.mu.Lock()
	if rn.stopped {
		rn.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn.cancel = cancel
	rn.running.Add(1)
	rn.mu.Unlock()
	defer rn.running.Done()
	defer cancel()
	if ok, _, _ := rn.s.r.LeaseCall(ctx, rn.l, node.OpRenew, limiter.Usage{}); !ok && ctx.Err() == nil {
		rn.s.log.Warn("proxy: renewing a streaming request's lease failed; its slot may expire", "tenant", rn.l.Tenant)
	}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if !rn.stopped {
		rn.t = rn.s.alarms.After(max(time.Until(due.Add(rn.every)), 0), rn.renew)
	}
}

// stop ends the renewals: it cancels the one running, if any, and waits
// for it to return.
func (rn *renewer) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.t.Stop()
	if rn.cancel != nil {
		rn.cancel()
	}
	rn.mu.Unlock()
	rn.running.Wait()
}
