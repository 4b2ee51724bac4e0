package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
)

// UpstreamLatencyBoundsMS are the upper bounds, in milliseconds, of the
// buckets UpstreamStats counts the time to an upstream's answer headers in;
// a last bucket counts what is slower than all of them.
var UpstreamLatencyBoundsMS = [...]int64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000}

// UpstreamStats are the proxy's charged calls to its upstreams since it
// started (the endpoints passed through uncharged are not counted), for
// the admin console: how many were sent, how each that failed failed, and
// how long the answers' headers took.
type UpstreamStats struct {
	Calls       int64 // requests sent (or tried) upstream
	Unreachable int64 // no answer: the connection failed or was cut before the headers
	Timeouts    int64 // no headers within the upstream's response_header timeout
	Canceled    int64 // the client went away before the headers
	Status4xx   int64 // answered 4xx other than 429
	Status429   int64 // answered 429
	Status5xx   int64 // answered 5xx
	// LatencyMS[i] counts the answers whose headers came within
	// UpstreamLatencyBoundsMS[i] ms and above the bound before; the last
	// one those slower than every bound. SumMS is their total, in ms.
	LatencyMS [len(UpstreamLatencyBoundsMS) + 1]int64
	SumMS     int64
}

// upstreamRecorder counts UpstreamStats with atomics: fixed memory, no lock.
type upstreamRecorder struct {
	calls, unreachable, timeouts, canceled, s4xx, s429, s5xx, sumUS atomic.Int64
	latency                                                         [len(UpstreamLatencyBoundsMS) + 1]atomic.Int64
}

// observe counts one upstream call that took d to its answer's headers
// (resp) or to failing (err); ctx is the call's context, whose cause tells
// an upstream timeout (upstreamTimeout) and creq the client's request
// context, done when the client went away.
func (u *upstreamRecorder) observe(ctx, creq context.Context, d time.Duration, resp *http.Response, err error) {
	u.calls.Add(1)
	if err != nil {
		var late *upstreamTimeout
		switch {
		case errors.As(context.Cause(ctx), &late):
			u.timeouts.Add(1)
		case creq.Err() != nil:
			u.canceled.Add(1)
		default:
			u.unreachable.Add(1)
		}
		return
	}
	switch c := resp.StatusCode; {
	case c == http.StatusTooManyRequests:
		u.s429.Add(1)
	case c >= 500:
		u.s5xx.Add(1)
	case c >= 400:
		u.s4xx.Add(1)
	}
	u.sumUS.Add(d.Microseconds())
	ms, i := d.Milliseconds(), 0
	for i < len(UpstreamLatencyBoundsMS) && ms > UpstreamLatencyBoundsMS[i] {
		i++
	}
	u.latency[i].Add(1)
}

// Upstream returns the counts of the proxy's upstream calls so far.
func (s *Server) Upstream() UpstreamStats {
	u := &s.upstream
	out := UpstreamStats{Calls: u.calls.Load(), Unreachable: u.unreachable.Load(), Timeouts: u.timeouts.Load(),
		Canceled: u.canceled.Load(), Status4xx: u.s4xx.Load(), Status429: u.s429.Load(), Status5xx: u.s5xx.Load(),
		SumMS: u.sumUS.Load() / 1000}
	for i := range u.latency {
		out.LatencyMS[i] = u.latency[i].Load()
	}
	return out
}
