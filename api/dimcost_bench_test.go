package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// BenchmarkDimensionDecision is one acquire for a model and its complete
// (with cached prompt tokens) through the decision API, the router and one
// node in this process, over 10,000 tenants, in the same run:
//
//   - plain: the tenant's requests, tokens and slots;
//   - budget: the tenant with a month's budget, the model priced;
//   - pool: the tenant and its model's pool, first come, first served;
//   - pool/fair: the pool shared fairly by its 10,000 tenants (at most
//     limiter.MaxFlows tracked), uncontended;
//   - pool/fair/contended: the same, with a refusal noted every 1,000
//     operations, so each admission computes its tenant's share.
//
// cpu-ns/op is the process's CPU per acquire and complete.
func BenchmarkDimensionDecision(b *testing.B) {
	for _, c := range []struct {
		name               string
		budget, pool, fair bool
		contended          bool
	}{
		{name: "plain"}, {name: "budget", budget: true}, {name: "pool", pool: true},
		{name: "pool/fair", pool: true, fair: true}, {name: "pool/fair/contended", pool: true, fair: true, contended: true},
	} {
		b.Run(c.name, func(b *testing.B) {
			limits := func(key string) limiter.Limits {
				l := limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, LeaseTTL: time.Minute}
				if c.budget && strings.HasPrefix(key, "t:") {
					l.Spend, l.Period = limiter.MaxSpend, limiter.Period{Unit: limiter.PeriodMonth}
				}
				l.Fair = c.fair && key == router.PoolKey("gpt")
				return l
			}
			n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { n.Close() })
			rc := router.Config{Limits: limits,
				Price: func(string) (limiter.Price, bool) {
					return limiter.Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}, true
				},
				Budgeted: func() bool { return c.budget },
				Weight:   func(string) int64 { return 2 }}
			if c.pool {
				rc.PoolFor = func(string) (string, bool) { return "gpt", true }
			}
			r := newAPI(b, n, rc, Config{})
			var seq atomic.Int64
			cpu := processCPU()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := seq.Add(1)
					tenant := fmt.Sprintf("t%d", i%10000)
					if c.contended && i%1000 == 0 {
						refuseOnce(b, n)
					}
					rec := httptest.NewRecorder()
					r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/acquire",
						strings.NewReader(`{"tenant":"`+tenant+`","model":"gpt-4o","prompt_tokens":100,"max_tokens":100}`)))
					body := rec.Body.String()
					j := strings.Index(body, `"lease":"`)
					if rec.Code != 200 || j < 0 {
						b.Fatalf("%d %s", rec.Code, body)
					}
					lease := body[j+9:]
					lease = lease[:strings.IndexByte(lease, '"')]
					rec = httptest.NewRecorder()
					r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/complete", strings.NewReader(
						`{"tenant":"`+tenant+`","lease":"`+lease+`","usage":{"prompt_tokens":100,"completion_tokens":40,"cached_tokens":50}}`)))
					if rec.Code != 200 {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// refuseOnce makes the pool contended: an acquire of a flow of its own
// that no limit can admit (more requests than it allows), refused and
// noted as wanted.
func refuseOnce(b *testing.B, n *node.Node) {
	a, err := n.Do(b.Context(), node.Call{Op: node.OpAcquire, Key: router.PoolKey("gpt"),
		Req: limiter.Request{Reserve: 1, Hits: 1 << 41, Flow: "greedy"}})
	if err != nil || a.Decision.Allowed {
		b.Fatalf("the greedy acquire: %+v %v", a, err)
	}
}
