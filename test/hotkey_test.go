package test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// hotConfig: two tenants far busier than hot_key_rate (100 acquires a
// second forwarded by one node), one limited in requests, one in slots
// (its leases are never completed).
const hotConfig = `
limits:
  default: {rpm: 1000000, tpm: 1000000000, concurrency: 1000000}
  tenants:
    hot-rpm: {rpm: 3000, tpm: 1000000000, concurrency: 1000000}
    hot-conc: {rpm: 1000000, tpm: 1000000000, concurrency: 2000}
  window: 60s
  lease_ttl: 120s
hot_key_rate: 100
`

// A hot tenant sent through all three processes at once is decided by each
// from slices its owner allotted, and exactly its limit is admitted: during
// the load, and in all once the slices not handed out went back to the
// owner at their bucket's end.
func TestHotTenantThroughEveryNodeIsExact(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, hotConfig)
	allotted := func() (sum float64) {
		for _, p := range c.Procs {
			v, _, err := metricValue(p, "tokenring_allotted_total")
			if err != nil {
				t.Fatalf("read tokenring_allotted_total on %s: %v", p.Name, err)
			}
			sum += v
		}
		return sum
	}
	for _, tc := range []struct {
		tenant string
		limit  int
	}{{"hot-rpm", 3000}, {"hot-conc", 2000}} {
		before := allotted()
		res := StartLoad(LoadConfig{
			Clients:     48,
			Tenants:     []string{tc.tenant},
			Targets:     c.Nodes,
			MaxRequests: 3 * tc.limit,
			MaxDuration: time.Minute,
			Pace:        10 * time.Millisecond, // about 5,000 a second: the key turns hot before its limit is spent
		}).Wait()
		tl := res.Tenants[tc.tenant]
		if tl.Allowed > tc.limit || tl.Errors != 0 || tl.Fallbacks != 0 {
			t.Fatalf("%s: %d admitted of %d sent, limit %d; %d errors, %d fallback answers\n%s",
				tc.tenant, tl.Allowed, res.Sent, tc.limit, tl.Errors, tl.Fallbacks, res.Summary())
		}
		fromSlices := allotted() - before
		if fromSlices == 0 {
			t.Fatalf("%s: no acquire was served from a slice\n%s", tc.tenant, res.Summary())
		}
		waitSlicesEnded() // every slice's bucket (1 s) has ended, the refill's too, and the rest is given back
		after := drainTenant(t, c, tc.tenant)
		if got := tl.Allowed + after; got != tc.limit {
			t.Fatalf("%s: %d admitted in all (%d under load, %d after), want exactly %d; %v from slices\n%s",
				tc.tenant, got, tl.Allowed, after, tc.limit, fromSlices, res.Summary())
		}
		t.Logf("%s: %d admitted of %d sent (%v from slices), %d more after the load: exactly %d", tc.tenant, tl.Allowed, res.Sent, fromSlices, after, tc.limit)
	}
}

// drainTenant acquires for tenant through each node in turn until all of
// them refuse, and returns how many it admitted.
func drainTenant(t *testing.T, c *Cluster, tenant string) (allowed int) {
	t.Helper()
	body := fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tenant)
	for refusedBy := 0; refusedBy < len(c.Procs); {
		refusedBy = 0
		for _, p := range c.Procs {
			code, out, err := Post(context.Background(), http.DefaultClient, p.URL()+"/v1/acquire", body)
			switch {
			case err != nil:
				t.Fatalf("drain %s via %s: %v", tenant, p.Name, err)
			case code == http.StatusOK:
				allowed++
			case code == http.StatusTooManyRequests:
				refusedBy++
			default:
				t.Fatalf("drain %s via %s: %d %v", tenant, p.Name, code, out)
			}
		}
	}
	return allowed
}
