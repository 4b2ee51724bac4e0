package test

// A stalled owner (SIGSTOP, as a long GC pause, a frozen VM or a starved
// neighbour would) comes back: whatever the stall's length, against failure
// detection (about 5 s on a LAN) and the cluster's reconnect interval, no
// tenant is admitted beyond its limit, and clients see no error except on
// the stalled node's own connections. ARCHITECTURE.md "Stalls".

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestStalledOwnerReturns(t *testing.T) {
	needFull(t)
	const limit, tenantsN = 100, 30
	c := NewCluster(t, daemon, 3, fmt.Sprintf(`
limits:
  default: {rpm: %d, tpm: 1000000000, concurrency: 1000000}
  window: 600s
`, limit))
	tenants := tenantNames("stall", tenantsN)
	owners := ownerMap(t, c.Live(), tenants)
	perOwner := map[string]int{}
	for _, o := range owners {
		perOwner[o]++
	}
	victim := c.Procs[0]
	for _, p := range c.Procs {
		if perOwner[p.Name] > perOwner[victim.Name] {
			victim = p
		}
	}
	// Every tenant at its limit, through every node.
	fill := StartLoad(LoadConfig{Clients: 16, Tenants: tenants, Targets: c.Nodes,
		MaxRequests: limit * tenantsN, MaxDuration: time.Minute}).Wait()
	for _, tn := range tenants {
		if tl := fill.Tenants[tn]; tl.Allowed != limit || tl.Errors != 0 || tl.Fallbacks != 0 {
			t.Fatalf("filling %s: %v, want %d allowed and nothing else\n%s", tn, *tl, limit, fill.Summary())
		}
	}
	// From here on every acquire must be refused. A client gives up on an
	// answer after 3 s (above the 2 s a node waits for a slow owner), as a
	// gateway would, and moves on: only the stalled node's connections may
	// fail.
	d := StartLoad(LoadConfig{Clients: 16, Tenants: tenants, Targets: c.Nodes,
		RequestTimeout: 3 * time.Second, MaxRequests: 2_000_000, MaxDuration: 4 * time.Minute})
	defer d.Stop()
	for _, stall := range []time.Duration{3 * time.Second, 8 * time.Second, 15 * time.Second, 30 * time.Second} {
		c.Pause(victim)
		time.Sleep(stall) // the stall itself (SIGSTOP to SIGCONT): its length is what is under test
		c.Resume(victim)
		resumed := time.Now()
		what := func() string {
			return fmt.Sprintf("%s ready again (in the clients' rotation) after a %v stall\n%s", victim.Name, stall, d.Tally().Summary())
		}
		eventually(t, 45*time.Second, what, func() bool { return slices.Contains(d.Live(), victim.Name) })
		converged := c.WaitConverged(45 * time.Second)
		d.Mark()
		if !d.WaitEachRefused(5, 2*time.Second, 30*time.Second) {
			t.Errorf("after the %v stall, the clients did not drive every tenant 5 more times within 30 s", stall)
		}
		t.Logf("stall %v of %s (owner of %d of %d tenants): ready again %v after SIGCONT, ring converged %v after that",
			stall, victim.Name, perOwner[victim.Name], tenantsN, time.Since(resumed).Round(time.Millisecond), converged.Round(time.Millisecond))
	}
	res := d.Stop()
	t.Logf("clients: %s", res.Summary())
	var over []string
	for _, tn := range tenants {
		if tl := res.Tenants[tn]; tl.Allowed != 0 {
			over = append(over, fmt.Sprintf("%s (owner %s before): %v", tn, owners[tn], *tl))
		}
	}
	if len(over) > 0 {
		sort.Strings(over)
		t.Errorf("%d of %d tenants admitted beyond their limit of %d across the stalls:\n  %s", len(over), tenantsN, limit, strings.Join(over, "\n  "))
	}
	for name, nt := range res.Nodes {
		if name != victim.Name && nt.Errors > 0 {
			t.Errorf("%d client errors via %s, which never stalled: %v", nt.Errors, name, res.FirstErrors)
		}
	}
	for _, p := range c.Live() {
		if nt := res.Nodes[p.Name]; nt == nil || nt.Refused == 0 {
			t.Errorf("%s refused no acquire: its errors and admissions were not put to the test", p.Name)
		}
	}
	// A status asked while a partition is still on its way back to the
	// returning member falls back (503): read once every owner answers.
	var final map[string]tenantStatus
	took := eventually(t, 30*time.Second, "every tenant's owner answers its status", func() bool {
		final = map[string]tenantStatus{}
		for _, tn := range tenants {
			var st tenantStatus
			p := c.Live()[len(final)%len(c.Live())]
			if err := GetJSON(p.URL()+"/v1/tenants/"+tn, &st); err != nil {
				return false
			}
			final[tn] = st
		}
		return true
	})
	t.Logf("every tenant's status answered by its owner %v after the clients stopped", took.Round(time.Millisecond))
	for tn, st := range final {
		if st.Limits.Requests.Remaining != 0 {
			t.Errorf("%s: GET /v1/tenants says %d requests remaining, want 0 (the window lost history)", tn, st.Limits.Requests.Remaining)
		}
	}
}
