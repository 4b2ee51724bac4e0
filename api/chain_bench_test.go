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

// BenchmarkChainDecision is one acquire and its complete through the
// router and one node in this process (no sockets), over 10,000 tenants,
// for chains of 1, 2 and 3 levels: the tenant alone; the tenant under a
// team; the tenant under a team under an org. Every tenant of a run
// shares its team and org, with limits no run reaches.
func BenchmarkChainDecision(b *testing.B) {
	for levels := 1; levels <= 3; levels++ {
		b.Run(fmt.Sprintf("levels=%d", levels), func(b *testing.B) {
			limits := func(string) limiter.Limits {
				return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, LeaseTTL: time.Minute}
			}
			n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
			if err != nil {
				b.Fatal(err)
			}
			defer n.Close()
			chain := func(string, string) router.Chain {
				return router.Chain{Groups: [router.MaxGroups]string{"team", "org"}, NGroups: levels - 1}
			}
			r := newAPI(b, n, router.Config{Limits: limits, Chain: chain}, Config{})
			defer r.router.Close()
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tenant := fmt.Sprintf("t%d", seq.Add(1)%10000)
					rec := benchAcquire(r, tenant)
					body := rec.Body.String()
					i := strings.Index(body, `"lease":"`)
					if rec.Code != 200 || i < 0 {
						b.Fatalf("%d %s", rec.Code, body)
					}
					lease := body[i+9:]
					lease = lease[:strings.IndexByte(lease, '"')]
					rec = httptest.NewRecorder()
					r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/complete",
						strings.NewReader(`{"tenant":"`+tenant+`","lease":"`+lease+`","usage":{"prompt_tokens":100,"completion_tokens":40}}`)))
					if rec.Code != 200 {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
		})
	}
}
