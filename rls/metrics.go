package rls

import (
	"fmt"
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// metrics are the service's counters, registered on the injected registry
// (none are global). The five per-limit counters are the reference's
// (ratelimit.service.rate_limit.<stat key>.total_hits and so on, which its
// Prometheus mapping exports as ratelimit_service_rate_limit_total_hits
// and so on), each a series per domain and stat key: the stat key holds a
// request's values only where the files ask for it (detailed_metric,
// value_to_metric, share_threshold), so their number is bounded by the
// files, as the reference's.
type metrics struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec // by domain, key
	calls                                                    *prometheus.CounterVec // by code
	unknownDomain                                            prometheus.Counter
	unmatched                                                prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	perLimit := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenring_rls_" + name + "_total", Help: help}, []string{"domain", "key"})
	}
	m := &metrics{
		totalHits:   perLimit("total_hits", "Hits of a rate limit (the reference's total_hits): hits_addend summed over its descriptors, by domain and stat key."),
		overLimit:   perLimit("over_limit", "Hits over the limit (the reference's over_limit), shadow mode included."),
		nearLimit:   perLimit("near_limit", "Hits past 80% of the limit and within it, or up to it for a request that went over (the reference's near_limit)."),
		withinLimit: perLimit("within_limit", "Hits within the limit (the reference's within_limit)."),
		shadowMode:  perLimit("shadow_mode", "Hits over a limit in shadow mode, answered OK (the reference's shadow_mode)."),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tokenring_rls_calls_total",
			Help: "ShouldRateLimit calls by answer: OK, OVER_LIMIT, or the gRPC error code (INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED, UNAVAILABLE, ...)."}, []string{"code"}),
		unknownDomain: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenring_rls_domain_not_found_total",
			Help: "ShouldRateLimit calls for a domain no file of rls.config_dir declares (the reference's domain_not_found), answered NOT_FOUND."}),
		unmatched: prometheus.NewCounter(prometheus.CounterOpts{Name: "tokenring_rls_unmatched_settles_total",
			Help: "Stream-end calls whose reservation was not found (never admitted, already settled, or expired by its lease TTL with its reservation charged)."}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.totalHits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode, m.calls, m.unknownDomain, m.unmatched} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rls metrics: %w", err)
		}
	}
	return m, nil
}

// count adds item it of a request of domain to the counters, as the
// reference does (base_limiter.go): every hit to total_hits; an admitted
// hit to within_limit, and to near_limit past 80% of the limit; a refused
// one to over_limit for what lies beyond the limit and to near_limit for
// what lay below it, and to shadow_mode as well in shadow mode. The
// fractions are counted in the request dimension; a token limit's hits
// (requests at the start, tokens at the end) count whole.
func (m *metrics) count(domain string, it *item, res []router.HitResult) {
	if m == nil || it.stat == "" || it.hits == 0 || (it.kind != hit && it.kind != refuseAll) {
		return
	}
	labels := []string{domain, it.stat}
	hits := float64(it.hits)
	m.totalHits.WithLabelValues(labels...).Add(hits)
	var limit, before, after int64 // the request dimension, in hits
	refused := it.kind == refuseAll
	if it.kind == hit {
		r := &res[it.hit]
		if it.op == node.OpSettle && !r.Held {
			m.unmatched.Inc()
		}
		refused = r.Refused
		if d := r.Status.Requests; it.dim == dimRequests && d.Limit > 0 {
			limit = d.Limit
			if refused {
				before = d.Limit - d.Remaining
				after = before + it.hits
			} else {
				after = d.Limit - d.Remaining
				before = after - it.hits
			}
		}
	}
	if limit == 0 { // counted whole
		if refused {
			m.overLimit.WithLabelValues(labels...).Add(hits)
			if it.shadow {
				m.shadowMode.WithLabelValues(labels...).Add(hits)
			}
		} else {
			m.withinLimit.WithLabelValues(labels...).Add(hits)
		}
		return
	}
	near := int64(math.Floor(float64(limit) * nearLimitRatio))
	if !refused {
		m.withinLimit.WithLabelValues(labels...).Add(hits)
		if after > near {
			m.nearLimit.WithLabelValues(labels...).Add(float64(after - max(near, before)))
		}
		return
	}
	overBy := it.hits
	if before < limit {
		overBy = after - limit
		m.nearLimit.WithLabelValues(labels...).Add(float64(limit - max(near, before)))
	}
	m.overLimit.WithLabelValues(labels...).Add(float64(overBy))
	if it.shadow {
		m.shadowMode.WithLabelValues(labels...).Add(float64(overBy))
	}
}

// call counts one call's answer, by code.
func (m *metrics) call(code string) {
	if m != nil {
		m.calls.WithLabelValues(code).Inc()
	}
}
