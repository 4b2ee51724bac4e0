package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/router"
)

// LimitsMismatchCollector is the gauge tokenring_limits_mismatch_members:
// the members of c's ring that publish a limits hash other than c's own
// (those publishing none, older, do not count), read at each scrape; 0
// before c has joined. Register it next to the router's metrics.
func LimitsMismatchCollector(c router.Cluster) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tokenring_limits_mismatch_members",
		Help: "Members whose limits (limits, window, lease_ttl, pools, default_max_tokens) differ from this node's, by their published limits hash.",
	}, func() float64 {
		rg := c.Ring()
		if rg == nil {
			return 0
		}
		return float64(limitsMismatches(rg, c.Name()))
	})
}
