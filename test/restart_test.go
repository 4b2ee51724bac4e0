package test

// Membership changes under a lifecycle load (acquire, hold 0-20 ms,
// complete), with sync replication: a sixth node joins five, one leaves
// by SIGTERM, one is SIGKILLed and started again under the same name and
// ports. No client sees an error from a ready node (a node restart never
// answers 503: a call for a partition still on its way falls back, as a
// debt), and every tenant's requests, tokens and slots add up exactly.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestRestartUnderLifecycleLoadIsExact(t *testing.T) {
	needFull(t)
	const (
		rpm, tpm, slots = 1_000_000, 1_000_000_000, 4
		reserve, used   = 30, 15 // tokens reserved by an acquire, and used by its complete
	)
	c := NewCluster(t, daemon, 5, fmt.Sprintf(`
limits:
  default: {rpm: %d, tpm: %d, concurrency: %d}
  window: 600s
replication: {mode: sync}
`, rpm, tpm, slots))
	tenants := tenantNames("life", 20)
	var victim *Proc // SIGKILLed and started again: not the first node, which the others joined
	d := StartLoad(LoadConfig{Clients: 16, Tenants: tenants, Targets: c.Nodes,
		Body:        func(tn string) string { return fmt.Sprintf(`{"tenant":%q,"prompt_tokens":10,"max_tokens":20}`, tn) },
		Hold:        20 * time.Millisecond,
		Usage:       `{"prompt_tokens":10,"completion_tokens":5}`,
		MaxRequests: 2_000_000, MaxDuration: 3 * time.Minute})
	defer d.Stop()
	// underLoad waits until the load has run through the ring as it is:
	// every live node has answered 10 more acquires, and every tenant
	// completed 10 more leases, than when it was called.
	underLoad := func() time.Duration {
		t.Helper()
		base, t0 := d.Tally(), time.Now()
		waitAnswered(t, d, base, c.Live(), 10, 30*time.Second)
		eventually(t, 30*time.Second, func() string { return "10 more leases completed by every tenant: " + d.Tally().TenantReport() }, func() bool {
			r := d.Tally()
			for _, tn := range tenants {
				if r.Tenants[tn].Completed-base.Tenants[tn].Completed < 10 {
					return false
				}
			}
			return true
		})
		return time.Since(t0)
	}
	step := func(what string, change func()) {
		t0 := time.Now()
		change()
		took := c.WaitConverged(45 * time.Second)
		after := underLoad()
		t.Logf("%s: %v, ring converged %v later, under load through every node %v after that",
			what, time.Since(t0).Round(time.Millisecond), took.Round(time.Millisecond), after.Round(time.Millisecond))
	}
	underLoad() // before the first change
	step("a sixth node joins", func() { c.Start() })
	step("n2 leaves (SIGTERM)", func() { c.Stop(c.Procs[1]) })
	victim = c.Procs[2]
	var killedAt time.Duration
	step("n3 SIGKILLed and started again", func() {
		c.Kill(victim)
		killedAt = time.Since(d.start)
		eventually(t, 10*time.Second, "the clients stop sending to "+victim.Name+" (its health checks fail)", func() bool {
			return !slices.Contains(d.Live(), victim.Name)
		})
		c.launch(victim)
		c.waitReady(victim, 30*time.Second)
	})
	res := d.Stop()
	t.Logf("clients: %s", res.Summary())
	t.Logf("%s killed at +%.3fs", victim.Name, killedAt.Seconds())

	// Errors: only on the killed process's own connections at its kill.
	for name, nt := range res.Nodes {
		if name != victim.Name && nt.Errors > 0 {
			t.Errorf("%d client errors via %s: %v", nt.Errors, name, res.FirstErrors)
		}
	}
	for _, p := range c.Live() {
		if nt := res.Nodes[p.Name]; nt == nil || nt.Allowed+nt.Refused == 0 {
			t.Errorf("%s answered no acquire: its errors were not put to the test", p.Name)
		}
	}
	unknown := res.Nodes[victim.Name].Errors // acquires whose answer died with the process (at most)
	var wrong []string
	for tn, st := range statuses(t, c.Live(), tenants) {
		tl := res.Tenants[tn]
		inUse := int(st.Limits.Concurrency.Limit - st.Limits.Concurrency.Remaining)
		counted := int(st.Limits.Requests.Limit - st.Limits.Requests.Remaining)
		tokens := int(st.Limits.Tokens.Limit - st.Limits.Tokens.Remaining)
		// Every allowed acquire was completed. One whose answer was lost
		// with the killed process is counted (sync replication), with its
		// reservation and its slot until the lease's TTL; so is a lease
		// whose complete was answered {"settled":false} (its owner out of
		// reach at that moment: the settle is not carried over, the slot
		// comes back at the lease's TTL). A complete that failed (only on
		// the killed process's connections) may or may not have settled
		// before the answer was lost: its slot is held or free, its tokens
		// the reservation or the usage.
		lost := counted - tl.Allowed
		if tl.MaxHeld > slots || tl.Completed+tl.CompleteErrors != tl.Allowed || lost < 0 || lost > unknown ||
			inUse < lost || inUse > lost+tl.CompleteErrors+tl.Unsettled ||
			tokens < used*tl.Completed || tokens > used*(tl.Completed+tl.CompleteErrors)+reserve*inUse {
			wrong = append(wrong, fmt.Sprintf("%s: clients %v; node: %d requests counted, %d tokens, %d slots in use (lost answers %d)",
				tn, *tl, counted, tokens, inUse, lost))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Errorf("%d of %d tenants do not add up (want requests counted = allowed + answers lost, %d tokens a completed lease and at most %d a held one, slots in use = leases still held, at most %d held at once):\n  %s",
			len(wrong), len(tenants), used, reserve, slots, strings.Join(wrong, "\n  "))
	}
}
