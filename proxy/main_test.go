package proxy

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/internal/testclock"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock shared by the node and the router.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock { return testclock.New() }

// tenantLease is a lease of tenant's key alone, with lease id id.
func tenantLease(tenant string, id uint64) router.Lease {
	l := router.Lease{Tenant: tenant}
	l.Add(router.TenantKey(tenant), id, false)
	return l
}

// newServer returns the proxy of a router deciding through cluster with
// rcfg (Limits defaulting to none), closed when the test ends.
func newServer(t testing.TB, cluster router.Cluster, rcfg router.Config, cfg Config, counter router.Counter) (*Server, *router.Router) {
	t.Helper()
	if rcfg.Limits == nil {
		rcfg.Limits = func(string) limiter.Limits { return limiter.Limits{} }
	}
	r, err := router.New(cluster, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(r, cfg, counter, 0, nil)
	t.Cleanup(func() {
		s.Close()
		_ = r.Close()
	})
	return s, r
}
