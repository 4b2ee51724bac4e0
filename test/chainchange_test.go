package test

// Chains through membership changes: tenants under two teams under one
// org, each level an ordinary key on its own owner, charged all or
// nothing while a node joins, one leaves by SIGTERM and one is SIGKILLed
// and started again, under traffic through every live node, sync
// replication, shipped defaults otherwise. With hot-key slices off every
// level holds exactly what was admitted through it. With them on (the
// default), a SIGKILLed node takes with it the admissions of its slices it
// had not handed out: they stay counted at the owner (capacity lost, never
// a limit passed), at most a slice a level (a hundredth of the limit).

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

const chainChangeConfig = `
limits:
  default: {rpm: 1000000, tpm: 1000000000, concurrency: 1000000}
  window: 600s
  tenants:
    ch-0: {rpm: 400, parent: team-x}
    ch-1: {rpm: 400, parent: team-x}
    ch-2: {rpm: 400, parent: team-y}
    ch-3: {rpm: 400, parent: team-y}
  groups:
    team-x: {rpm: 600, parent: org}
    team-y: {rpm: 700, parent: org}
    org: {rpm: 1200}
replication: {mode: sync}
`

// chainParents are each chain tenant's groups, nearest first.
var chainParents = map[string][]string{
	"ch-0": {"team-x", "org"}, "ch-1": {"team-x", "org"},
	"ch-2": {"team-y", "org"}, "ch-3": {"team-y", "org"},
}

func TestChainExactThroughMembershipChanges(t *testing.T) {
	needFull(t)
	t.Run("slices off", func(t *testing.T) { testChainThroughChanges(t, "hot_key_rate: 0\n", false) })
	t.Run("shipped defaults", func(t *testing.T) { testChainThroughChanges(t, "", true) })
}

// testChainThroughChanges runs the changes with chainChangeConfig plus
// extra; sliced says a killed holder's slices may stay counted.
func testChainThroughChanges(t *testing.T, extra string, sliced bool) {
	c := NewCluster(t, daemon, 3, chainChangeConfig+extra)
	tenants := []string{"ch-0", "ch-1", "ch-2", "ch-3"}
	// 16 clients, one acquire each 200 ms: the org's 1,200 last about 15 s,
	// the time the changes below take.
	d := StartLoad(LoadConfig{Clients: 16, Tenants: tenants, Targets: c.Nodes, Pace: 200 * time.Millisecond,
		MaxRequests: 1_000_000, MaxDuration: 2 * time.Minute})
	defer d.Stop()
	step := func(what string, change func()) {
		t0 := time.Now()
		change()
		took := c.WaitConverged(45 * time.Second)
		t.Logf("%s: %v, ring converged %v later; %d admitted so far", what, time.Since(t0).Round(time.Millisecond), took.Round(time.Millisecond), admittedSoFar(d))
	}
	step("a fourth node joins", func() { c.Start() })
	step("n2 leaves (SIGTERM)", func() { c.Stop(c.Procs[1]) })
	victim := c.Procs[2]
	step("n3 SIGKILLed and started again", func() {
		c.Kill(victim)
		eventually(t, 10*time.Second, "the clients drop the killed node", func() bool { return !slices.Contains(d.Live(), victim.Name) })
		c.launch(victim)
		c.waitReady(victim, 30*time.Second)
	})
	d.Mark()
	if !d.WaitEachRefused(20, time.Second, time.Minute) {
		t.Fatalf("the clients did not drive every chain past its limits within a minute: %s", d.Tally().Summary())
	}
	res := d.Stop()
	t.Logf("clients: %s", res.Summary())
	waitSlicesEnded() // a hot level's unused slices count at its owner until given back

	// What each level holds, read through a live node.
	used := map[string]int64{}
	limit := map[string]int64{}
	for _, tn := range tenants {
		var st struct {
			Levels []struct {
				Level  string
				Limits struct {
					Requests struct{ Limit, Remaining int64 }
				}
			}
		}
		if err := GetJSON(c.Live()[0].URL()+"/v1/tenants/"+tn, &st); err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Levels {
			used[l.Level] = l.Limits.Requests.Limit - l.Limits.Requests.Remaining
			limit[l.Level] = l.Limits.Requests.Limit
		}
	}
	// What each level admitted, by the clients' count: a tenant's own, and
	// a group's the sum of its tenants'. An acquire whose answer died with
	// the killed process may be counted everywhere without the client
	// knowing: at most the errors on its connections.
	// A lost answer counts at every level of its chain, the tenant's too:
	// a group holding more than its tenants' admissions and their own
	// excess holds a partial charge.
	through, excess := map[string]int64{}, map[string]int64{}
	for _, tn := range tenants {
		tl := res.Tenants[tn]
		for _, level := range append([]string{"tenant:" + tn}, prefixed("group:", chainParents[tn])...) {
			through[level] += int64(tl.Allowed)
		}
		for _, g := range chainParents[tn] {
			excess["group:"+g] += used["tenant:"+tn] - int64(tl.Allowed)
		}
	}
	lost := int64(res.Nodes[victim.Name].Errors)
	var wrong []string
	for level, u := range used {
		bound := lost
		if strings.HasPrefix(level, "group:") {
			bound = excess[level]
		}
		if sliced {
			bound += (limit[level] + 99) / 100 // the killed holder's slice
		}
		if u > limit[level] || u < through[level] || u > through[level]+bound {
			wrong = append(wrong, fmt.Sprintf("%s holds %d of %d, admitted through it %d (at most %d more from answers lost)", level, u, limit[level], through[level], bound))
		}
	}
	if used["group:org"] != limit["group:org"] {
		wrong = append(wrong, fmt.Sprintf("the org, the level that binds, holds %d of %d", used["group:org"], limit["group:org"]))
	}
	sort.Strings(wrong)
	if len(wrong) > 0 {
		t.Errorf("levels that do not add up (a partial charge, a lost or doubled count):\n  %s", strings.Join(wrong, "\n  "))
	}
	for name, nt := range res.Nodes {
		if name != victim.Name && nt.Errors > 0 {
			t.Errorf("%d client errors via %s, which was never killed: %v", nt.Errors, name, res.FirstErrors)
		}
	}
	t.Logf("levels: used %v; admitted through %v", used, through)
}

// prefixed is each of names with prefix in front.
func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

// admittedSoFar is how many acquires d's clients were admitted so far.
func admittedSoFar(d *LoadDriver) int {
	n := 0
	for _, tl := range d.Tally().Tenants {
		n += tl.Allowed
	}
	return n
}
