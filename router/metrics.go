package router

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/node"
)

// metrics are the router's Prometheus collectors, registered on the injected
// registry (none are global).
type metrics struct {
	decisions *prometheus.CounterVec   // by result and reason
	fallbacks *prometheus.CounterVec   // by policy and result
	calls     *prometheus.HistogramVec // by op and where it was decided
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenring_decisions_total",
			Help: "Acquire decisions by result (allowed, refused), the refusing side (tenant, pool) and reason, and whether the fallback decided.",
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

func (m *metrics) decision(side, reason string, fallback bool) {
	result := "allowed"
	if reason != "" {
		result = "refused"
	}
	m.decisions.WithLabelValues(result, side, reason, fmt.Sprint(fallback)).Inc()
}

func (m *metrics) fallback(p FallbackPolicy, allowed bool) {
	result := "refused"
	if allowed {
		result = "allowed"
	}
	m.fallbacks.WithLabelValues(string(p), result).Inc()
}

func (m *metrics) observe(op node.Op, where string, d time.Duration) {
	m.calls.WithLabelValues(op.String(), where).Observe(d.Seconds())
}
