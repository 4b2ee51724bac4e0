package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// Sharer gives the fair shares of a key this node holds (*node.Node).
type Sharer interface {
	Shares(key string, now time.Time) ([]limiter.FlowShare, bool)
}

// PoolSharesCollector is tokenring_pool_use and tokenring_pool_share, by
// pool, tenant and dimension (requests, tokens, concurrency): what each
// tenant active on a pool uses of it in the window (slots held, for
// concurrency) and what it may use now (its weighted fair share while the
// pool is contended, the whole limit while not), read at each scrape from
// the pools this node holds (pools names them; now is the clock). A pool
// reports at most its limiter.MaxFlows tenants.
func PoolSharesCollector(s Sharer, pools func() []string, now func() time.Time) prometheus.Collector {
	return &poolShares{s: s, pools: pools, now: now,
		use: prometheus.NewDesc("tokenring_pool_use", "What a tenant active on a pool this node holds uses of it: requests and tokens in the window, slots held.",
			[]string{"pool", "tenant", "dimension"}, nil),
		share: prometheus.NewDesc("tokenring_pool_share", "What a tenant active on a pool this node holds may use of it now: its weighted fair share while the pool is contended, the whole limit while not.",
			[]string{"pool", "tenant", "dimension"}, nil),
	}
}

type poolShares struct {
	s          Sharer
	pools      func() []string
	now        func() time.Time
	use, share *prometheus.Desc
}

func (p *poolShares) Describe(ch chan<- *prometheus.Desc) { ch <- p.use; ch <- p.share }

func (p *poolShares) Collect(ch chan<- prometheus.Metric) {
	now := p.now()
	for _, pool := range p.pools() {
		shares, held := p.s.Shares(router.PoolKey(pool), now)
		if !held {
			continue
		}
		for _, f := range shares {
			for dim, name := range [...]string{"requests", "tokens", "concurrency"} {
				if f.Share[dim] == 0 {
					continue // unlimited
				}
				ch <- prometheus.MustNewConstMetric(p.use, prometheus.GaugeValue, float64(f.Used[dim]), pool, f.Flow, name)
				ch <- prometheus.MustNewConstMetric(p.share, prometheus.GaugeValue, float64(f.Share[dim]), pool, f.Flow, name)
			}
		}
	}
}
