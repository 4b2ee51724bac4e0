package admin

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A member's health and its recent history, as /admin/stats reports them.

// healthJSON is what a member says of its own health.
type healthJSON struct {
	Ready      bool      `json:"ready"`       // what /readyz answers
	Mandated   bool      `json:"mandated"`    // it holds the majority's lease and decides (tokenring_quorum_leased)
	Fenced     bool      `json:"fenced"`      // fenced off, deciding nothing (tokenring_fenced)
	LimitsHash string    `json:"limits_hash"` // the limits version it admits with, as its ring entry publishes it
	Fences     int64     `json:"fences"`      // tokenring_fences_total
	Debts      debtsJSON `json:"debts"`
}

// debtsJSON are the fallback's debts at this member (the
// tokenring_fallback_debts_* metrics).
type debtsJSON struct {
	Outstanding int64 `json:"outstanding"` // keys owing now
	Recorded    int64 `json:"recorded"`    // fallback admissions recorded as debts, since start
	Repaid      int64 `json:"repaid"`      // debts charged to their owners, since start
	Expired     int64 `json:"expired"`     // debts dropped unpaid (their window passed), since start
}

// healthMetrics are the metrics healthJSON reads from the node's registry.
var healthMetrics = []string{"tokenring_fences_total", "tokenring_fallback_debts_outstanding",
	"tokenring_fallback_debts_recorded_total", "tokenring_fallback_debts_repaid_total", "tokenring_fallback_debts_expired_total"}

// mandator is implemented by a Cluster that tells its mandate and fence
// (*node.Node).
type mandator interface {
	Mandated() bool
	Fenced() bool
}

// health is this node's healthJSON. Without a Gatherer the counters are 0;
// a cluster that does not tell its mandate is taken as mandated and not
// fenced (a node alone).
func (a *Server) health() healthJSON {
	h := healthJSON{Ready: a.cfg.Ready(), Mandated: true}
	if m, ok := a.cluster.(mandator); ok {
		h.Mandated, h.Fenced = m.Mandated(), m.Fenced()
	}
	if self, ok := a.member(a.cluster.Name()); ok {
		h.LimitsHash = self.LimitsHash
	}
	v := metricValues(a.cfg.Gatherer, healthMetrics)
	h.Fences = int64(v["tokenring_fences_total"])
	h.Debts = debtsJSON{Outstanding: int64(v["tokenring_fallback_debts_outstanding"]),
		Recorded: int64(v["tokenring_fallback_debts_recorded_total"]), Repaid: int64(v["tokenring_fallback_debts_repaid_total"]),
		Expired: int64(v["tokenring_fallback_debts_expired_total"])}
	return h
}

// metricValues sums every series of each of names in g (counters and
// gauges); a name g lacks is absent. Nil g gives none.
func metricValues(g prometheus.Gatherer, names []string) map[string]float64 {
	out := map[string]float64{}
	if g == nil {
		return out
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return out
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, mf := range mfs {
		if !want[mf.GetName()] {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				out[mf.GetName()] += m.Counter.GetValue()
			case m.Gauge != nil:
				out[mf.GetName()] += m.Gauge.GetValue()
			}
		}
	}
	return out
}

// seriesPoints is how many seconds of history a node keeps: one point a
// second, the oldest dropped (fixed memory: seriesPoints × pointJSON).
const seriesPoints = 120

// poolPeriod is how many samples (seconds) a period of the router's pool
// counts lasts (router.Activity.RotatePools): a pool's top tenants are
// those of the last one to two minutes.
const poolPeriod = 60

// pointJSON is one second of a node's decisions: what its counters
// (tokenring_decisions_total, tokenring_fallback_decisions_total) grew by
// from the sample before to the sample at T.
type pointJSON struct {
	T         int64 `json:"t"` // the sample's time, Unix seconds
	Allowed   int64 `json:"allowed"`
	Refused   int64 `json:"refused"`
	Fallbacks int64 `json:"fallbacks"`
}

// series is a node's last seriesPoints samples, a ring.
type series struct {
	mu      sync.Mutex
	pts     [seriesPoints]pointJSON
	n       int      // samples taken
	last    [3]int64 // the counters at the last sample: allowed, refused, fallbacks
	stop    chan struct{}
	stopped sync.WaitGroup
}

// sample takes this node's counters at now and appends their growth since
// the last sample as a point (the first sample only sets the base).
func (a *Server) sample(now time.Time) {
	d := sumBy(a.counters.Decisions, "result")
	f := sumBy(a.counters.Fallbacks, "result")
	cur := [3]int64{d["allowed"], d["refused"], f["allowed"] + f["refused"]}
	s := &a.series
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n > 0 {
		s.pts[(s.n-1)%seriesPoints] = pointJSON{T: now.Unix(), Allowed: cur[0] - s.last[0], Refused: cur[1] - s.last[1],
			Fallbacks: cur[2] - s.last[2]}
	}
	s.last = cur
	s.n++
	if a.cfg.Activity != nil && s.n%poolPeriod == 0 {
		a.cfg.Activity.RotatePools()
	}
}

// points returns the points kept, oldest first.
func (a *Server) points() []pointJSON {
	s := &a.series
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := max(0, min(s.n-1, seriesPoints))
	out := make([]pointJSON, 0, kept)
	for i := s.n - 1 - kept; i < s.n-1; i++ {
		out = append(out, s.pts[i%seriesPoints])
	}
	return out
}

// Start begins sampling this node's counters once a second, for the
// console's history (/admin/stats "series") and the periods of the pools'
// top tenants. Close stops it. Without Start the series stays empty.
func (a *Server) Start() {
	s := &a.series
	s.mu.Lock()
	if s.stop != nil {
		s.mu.Unlock()
		return
	}
	s.stop = make(chan struct{})
	stop := s.stop
	s.mu.Unlock()
	a.sample(a.cfg.Now())
	s.stopped.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				a.sample(a.cfg.Now())
			}
		}
	})
}

// Close stops what Start started and waits for it. Safe to call more
// than once, and without Start.
func (a *Server) Close() {
	s := &a.series
	s.mu.Lock()
	if s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
	s.mu.Unlock()
	s.stopped.Wait()
}
