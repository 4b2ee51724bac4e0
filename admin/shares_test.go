package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// sharer holds one fair pool's state.
type sharer struct{ b *limiter.Budget }

func (s sharer) Shares(key string, now time.Time) ([]limiter.FlowShare, bool) {
	if key != router.PoolKey("gpt") {
		return nil, false
	}
	return s.b.Shares(now), true
}

// TestPoolSharesCollector: each tenant active on a pool this node holds
// is reported with its use and its share of each limited dimension;
// pools held elsewhere report nothing.
func TestPoolSharesCollector(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := limiter.NewBudget(limiter.Limits{Requests: 60, Window: time.Minute, Fair: true}, nil, t0)
	for i := range 100 { // a (weight 1) and b (weight 2) ask past the limit: contended
		b.Acquire(t0, limiter.Request{Reserve: 1, Flow: []string{"a", "b"}[i%2], Weight: int64(1 + i%2)})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(PoolSharesCollector(sharer{b}, func() []string { return []string{"gpt", "elsewhere"} }, func() time.Time { return t0 }))
	want := `
# HELP tokenring_pool_share What a tenant active on a pool this node holds may use of it now: its weighted fair share while the pool is contended, the whole limit while not.
# TYPE tokenring_pool_share gauge
tokenring_pool_share{dimension="requests",pool="gpt",tenant="a"} 20
tokenring_pool_share{dimension="requests",pool="gpt",tenant="b"} 40
# HELP tokenring_pool_use What a tenant active on a pool this node holds uses of it: requests and tokens in the window, slots held.
# TYPE tokenring_pool_use gauge
tokenring_pool_use{dimension="requests",pool="gpt",tenant="a"} 30
tokenring_pool_use{dimension="requests",pool="gpt",tenant="b"} 30
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tokenring_pool_share", "tokenring_pool_use"); err != nil {
		t.Fatal(err)
	}
}
