package api

import (
	"fmt"
	"testing"

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
			acquireComplete(b, benchChainRouter(b, func(string, string) router.Chain {
				return router.Chain{Groups: [router.MaxGroups]string{"team", "org"}, NGroups: levels - 1}
			}))
		})
	}
}
