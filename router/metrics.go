package router

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// metrics are the router's Prometheus collectors, registered on the injected
// registry (none are global).
type metrics struct {
	decisions *prometheus.CounterVec   // by result and reason
	fallbacks *prometheus.CounterVec   // by policy and result
	calls     *prometheus.HistogramVec // by op and where it was decided

	// The children of decisions and calls met so far, by their labels:
	// a lookup here is a fraction of WithLabelValues's hashing.
	decisionChildren sync.Map // decisionLabels → prometheus.Counter
	callChildren     sync.Map // callLabels → prometheus.Observer

	// The children every admission meets, resolved once: allowed[1] when
	// the fallback decided, and acquire calls decided here (no lookup).
	allowed      [2]prometheus.Counter
	localAcquire prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenring_decisions_total",
			Help: "Acquire decisions by result (allowed, refused), the refusing side (tenant, pool; none when allowed) and reason (requests, tokens, concurrency, ...; none when allowed), and whether the fallback decided.",
		}, []string{"result", "side", "reason", "fallback"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenring_fallback_decisions_total",
			Help: "Acquires decided by the fallback policy because the key's owner was unreachable.",
		}, []string{"policy", "result"}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tokenring_call_seconds",
			Help:    "Latency of calls to key owners, by op and by where they were decided (local, forwarded, or failed: the owner was unreachable).",
			Buckets: []float64{1e-6, 5e-6, 2e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1.5e-2, 5e-2, 0.25, 1, 5},
		}, []string{"op", "where"}),
	}
	m.allowed = [2]prometheus.Counter{m.decisions.WithLabelValues("allowed", "none", "none", "false"),
		m.decisions.WithLabelValues("allowed", "none", "none", "true")}
	m.localAcquire = m.calls.WithLabelValues(node.OpAcquire.String(), "local")
	// Series the dashboard and the alerts read exist at 0 from the start
	// (deploy/monitoring_test.go checks): a counter with labels otherwise
	// has none until its first use, a panel shows "No data" instead of 0,
	// and a rate misses the first increase.
	for _, side := range []string{"tenant", "pool"} {
		for _, reason := range []limiter.Dimension{limiter.Requests, limiter.Tokens, limiter.Concurrency} {
			m.decisions.WithLabelValues("refused", side, reason.String(), "false")
		}
	}
	for _, p := range []fallback.Policy{fallback.Degraded, fallback.Open, fallback.Closed} {
		for _, result := range []string{"allowed", "refused"} {
			m.fallbacks.WithLabelValues(string(p), result)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.decisions, m.fallbacks, m.calls} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("router metrics: %w", err)
		}
	}
	return m, nil
}

// decision counts an acquire decision: refused by side ("tenant" or
// "pool") for reason, or allowed when reason is empty. No label is ever
// empty: an allowed decision's side and reason are "none".
func (m *metrics) decision(side, reason string, fallback bool) {
	if reason == "" {
		m.allowed[b2i(fallback)].Inc()
		return
	}
	k := decisionLabels{"refused", side, reason, fallback}
	c, ok := m.decisionChildren.Load(k)
	if !ok {
		c, _ = m.decisionChildren.LoadOrStore(k, m.decisions.WithLabelValues(k.result, k.side, k.reason, strconv.FormatBool(fallback)))
	}
	c.(prometheus.Counter).Inc()
}

// b2i is 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// decisionLabels and callLabels are the label values of a child of
// decisions and calls.
type decisionLabels struct {
	result, side, reason string
	fallback             bool
}

type callLabels struct {
	op    node.Op
	where string
}

func (m *metrics) fallback(p fallback.Policy, allowed bool) {
	result := "refused"
	if allowed {
		result = "allowed"
	}
	m.fallbacks.WithLabelValues(string(p), result).Inc()
}

func (m *metrics) observe(op node.Op, where string, d time.Duration) {
	if op == node.OpAcquire && where == "local" {
		m.localAcquire.Observe(d.Seconds())
		return
	}
	k := callLabels{op, where}
	o, ok := m.callChildren.Load(k)
	if !ok {
		o, _ = m.callChildren.LoadOrStore(k, m.calls.WithLabelValues(op.String(), where))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// Counters are the router's counters that the admin page sums: acquire
// decisions by result (tokenring_decisions_total), the fallback's by result
// (tokenring_fallback_decisions_total) and calls to owners by where they
// were decided (tokenring_call_seconds).
type Counters struct {
	Decisions, Fallbacks, Calls prometheus.Collector
}

// Counters returns r's counters.
func (r *Router) Counters() Counters {
	return Counters{Decisions: r.metrics.decisions, Fallbacks: r.metrics.fallbacks, Calls: r.metrics.calls}
}
