package fallback

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// debtMetrics count the fallback debts (Debts): each is one fallback
// admission, or one request a fenced member admitted.
type debtMetrics struct {
	recordedTotal prometheus.Counter
	repaidTotal   prometheus.Counter
	expiredTotal  prometheus.Counter
	outstanding   prometheus.Gauge
	failures      prometheus.Counter
}

func newDebtMetrics(reg prometheus.Registerer) (*debtMetrics, error) {
	m := &debtMetrics{
		recordedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokenring_fallback_debts_recorded_total",
			Help: "Fallback admissions (degraded or open policy) recorded as debts owed to their key's owner.",
		}),
		repaidTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokenring_fallback_debts_repaid_total",
			Help: "Fallback debts charged to their key's window at its owner and acknowledged.",
		}),
		expiredTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokenring_fallback_debts_expired_total",
			Help: "Fallback debts dropped unpaid because they were older than their key's window (the owner would not count them any more).",
		}),
		outstanding: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tokenring_fallback_debts_outstanding",
			Help: "Fallback debts recorded on this node and not yet repaid or expired.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tokenring_fallback_debt_charge_failures_total",
			Help: "Charges of fallback debts that the key's owner did not acknowledge (unreachable, in transfer); retried.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.recordedTotal, m.repaidTotal, m.expiredTotal, m.outstanding, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("router metrics: %w", err)
		}
	}
	return m, nil
}

func (m *debtMetrics) recorded(n int64) {
	m.recordedTotal.Add(float64(n))
	m.outstanding.Add(float64(n))
}

func (m *debtMetrics) repaid(n int64) {
	m.repaidTotal.Add(float64(n))
	m.outstanding.Sub(float64(n))
}

func (m *debtMetrics) expired(n int64) {
	m.expiredTotal.Add(float64(n))
	m.outstanding.Sub(float64(n))
}

func (m *debtMetrics) chargeFailed() { m.failures.Inc() }
