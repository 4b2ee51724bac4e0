package test

// Handoff tests: when the ring changes (a node joins, or leaves gracefully
// with SIGTERM) the moved keys' limiter state goes to their new owner, so no
// budget is reset and nothing is counted twice (ARCHITECTURE.md, "Custody").
// Crashes (SIGKILL) still lose the dead owner's state and are not tested here.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// handoffRPMConfig: every tenant may make 10 requests a window; tokens and
// concurrency never refuse. The shipped forward_timeout: a slow forward is
// waited for, not fallen back on.
const handoffRPMConfig = `
limits:
  default: {rpm: 10, tpm: 1000000000, concurrency: 1000000}
  window: 60s
  lease_ttl: 120s
`

// handoffConcConfig: every tenant may hold 5 slots; requests and tokens never
// refuse. lease_ttl is far beyond the test, so no slot expires on its own.
const handoffConcConfig = `
limits:
  default: {rpm: 1000000, tpm: 1000000000, concurrency: 5}
  window: 60s
  lease_ttl: 120s
`

const handoffWorkers = 64 // concurrent requests in flight at most

// parallel runs f(0..n-1) on at most handoffWorkers goroutines.
func parallel(n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(n, handoffWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				f(i)
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// problems collects unexpected answers (transport errors, 5xx, fallbacks) from
// many goroutines and reports the first few with one t.Errorf.
type problems struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if len(p.first) < 10 {
		p.first = append(p.first, fmt.Sprintf(format, args...))
	}
}

func (p *problems) report(t *testing.T, what string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n > 0 {
		t.Errorf("%s: %d unexpected answers (not about counts); first ones:\n  %s", what, p.n, strings.Join(p.first, "\n  "))
	}
}

// acqJob is one acquire for tenant sent to node.
type acqJob struct {
	tenant string
	node   *Proc
}

// acqResult is the answer to one acqJob.
type acqResult struct {
	ok      bool // a well-formed 200 or 429 came back
	allowed bool
	reason  string
	lease   string
	owner   string
}

// acquireJobs sends every job (at most handoffWorkers at once) and returns
// the answers in job order. Transport errors, answers other than 200/429 and
// fallback decisions are reported as test errors: every owner is up, so none
// of them is a matter of counting.
func acquireJobs(t *testing.T, client *http.Client, what string, jobs []acqJob) []acqResult {
	t.Helper()
	res := make([]acqResult, len(jobs))
	var bad problems
	parallel(len(jobs), func(i int) {
		j := jobs[i]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code, out, err := Post(ctx, client, j.node.URL()+"/v1/acquire",
			fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, j.tenant))
		switch {
		case err != nil:
			bad.add("%s via %s: %v", j.tenant, j.node.Name, err)
			return
		case code == http.StatusOK && out["allowed"] == true:
			lease, _ := out["lease"].(string)
			if lease == "" {
				bad.add("%s via %s: allowed without a lease: %v", j.tenant, j.node.Name, out)
			}
			res[i] = acqResult{ok: true, allowed: true, lease: lease}
		case code == http.StatusTooManyRequests && out["allowed"] == false:
			res[i] = acqResult{ok: true, reason: fmt.Sprint(out["reason"])}
		default:
			bad.add("%s via %s: %d %v", j.tenant, j.node.Name, code, out)
			return
		}
		res[i].owner, _ = out["owner"].(string)
		if out["fallback"] == true {
			bad.add("%s via %s fell back although every owner is up: %v", j.tenant, j.node.Name, out)
		}
	})
	bad.report(t, what)
	return res
}

// tally is what one tenant got from a batch of acquires.
type tally struct {
	allowed int
	refused map[string]int // by reason
	failed  int            // no well-formed answer
	leases  []string
}

func (tl tally) String() string {
	return fmt.Sprintf("allowed %d, refused %v, failed %d", tl.allowed, tl.refused, tl.failed)
}

func tallyByTenant(jobs []acqJob, res []acqResult) map[string]*tally {
	out := map[string]*tally{}
	for i, j := range jobs {
		tl := out[j.tenant]
		if tl == nil {
			tl = &tally{refused: map[string]int{}}
			out[j.tenant] = tl
		}
		switch r := res[i]; {
		case !r.ok:
			tl.failed++
		case r.allowed:
			tl.allowed++
			tl.leases = append(tl.leases, r.lease)
		default:
			tl.refused[r.reason]++
		}
	}
	return out
}

// owners asks, for every tenant, a node of procs (round robin) for the
// tenant's owner. The cluster must have converged, so every node agrees.
func owners(t *testing.T, procs []*Proc, tenants []string) map[string]string {
	t.Helper()
	got := make([]string, len(tenants))
	var bad problems
	parallel(len(tenants), func(i int) {
		var out struct {
			Owner string `json:"owner"`
		}
		p := procs[i%len(procs)]
		if err := GetJSON(p.URL()+"/admin/owner?tenant="+tenants[i], &out); err != nil || out.Owner == "" {
			bad.add("owner of %s via %s: %q %v", tenants[i], p.Name, out.Owner, err)
			return
		}
		got[i] = out.Owner
	})
	bad.report(t, "/admin/owner")
	if t.Failed() {
		t.FailNow()
	}
	m := make(map[string]string, len(tenants))
	for i, tn := range tenants {
		m[tn] = got[i]
	}
	return m
}

// tenantStatus is the answer of GET /v1/tenants/{tenant}.
type tenantStatus struct {
	Owner  string `json:"owner"`
	Limits struct {
		Requests    dimStatus `json:"requests"`
		Tokens      dimStatus `json:"tokens"`
		Concurrency dimStatus `json:"concurrency"`
	} `json:"limits"`
}

type dimStatus struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
	ResetMS   int64 `json:"reset_ms"`
}

// statuses GETs /v1/tenants/{t} for every tenant, each from a random node of
// procs. A tenant whose status could not be read is missing from the map
// (and reported as a test error).
func statuses(t *testing.T, procs []*Proc, tenants []string) map[string]tenantStatus {
	t.Helper()
	got := make([]*tenantStatus, len(tenants))
	var bad problems
	parallel(len(tenants), func(i int) {
		p := procs[rand.IntN(len(procs))]
		var st tenantStatus
		if err := GetJSON(p.URL()+"/v1/tenants/"+tenants[i], &st); err != nil {
			bad.add("status of %s via %s: %v", tenants[i], p.Name, err)
			return
		}
		got[i] = &st
	})
	bad.report(t, "GET /v1/tenants")
	m := map[string]tenantStatus{}
	for i, tn := range tenants {
		if got[i] != nil {
			m[tn] = *got[i]
		}
	}
	return m
}

func tenantNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// admitEach sends per acquires for every tenant, spread over procs, and
// requires every one of them to be allowed. It returns the leases by tenant.
func admitEach(t *testing.T, client *http.Client, procs []*Proc, tenants []string, per int) map[string][]string {
	t.Helper()
	var jobs []acqJob
	for i, tn := range tenants {
		for j := range per {
			jobs = append(jobs, acqJob{tn, procs[(i+j)%len(procs)]})
		}
	}
	byTenant := tallyByTenant(jobs, acquireJobs(t, client, "initial admissions", jobs))
	var wrong []string
	leases := map[string][]string{}
	for _, tn := range tenants {
		tl := byTenant[tn]
		if tl.allowed != per {
			wrong = append(wrong, fmt.Sprintf("%s: %v", tn, tl))
		}
		leases[tn] = tl.leases
	}
	if len(wrong) > 0 {
		t.Fatalf("before any ring change, %d of %d tenants did not get all %d acquires allowed (the test's setup is broken, not handoff); first ones:\n  %s",
			len(wrong), len(tenants), per, strings.Join(wrong[:min(10, len(wrong))], "\n  "))
	}
	return leases
}

// checkExactAfterChange sends more acquires per tenant round robin over procs
// and requires exactly want allowed, and the rest refused for "requests", for
// every tenant. group names each tenant's kind for the report (e.g. "moved to
// n4", "stayed"); before and after are the owners around the ring change.
func checkExactAfterChange(t *testing.T, client *http.Client, procs []*Proc, tenants []string, more, want int,
	group func(tn string) string, before, after map[string]string) {
	t.Helper()
	var jobs []acqJob
	for j := range more { // interleave tenants, so each node sees every tenant
		for i, tn := range tenants {
			jobs = append(jobs, acqJob{tn, procs[(i+j)%len(procs)]})
		}
	}
	byTenant := tallyByTenant(jobs, acquireJobs(t, client, "acquires after the ring change", jobs))

	type sums struct{ tenants, allowed, wrong int }
	groups := map[string]*sums{}
	var names []string
	var wrong []string
	for _, tn := range tenants {
		g := group(tn)
		s := groups[g]
		if s == nil {
			s = &sums{}
			groups[g] = s
			names = append(names, g)
		}
		tl := byTenant[tn]
		s.tenants++
		s.allowed += tl.allowed
		if tl.allowed != want || tl.refused["requests"] != more-want || tl.failed != 0 {
			s.wrong++
			wrong = append(wrong, fmt.Sprintf("%s (%s, owner %s -> %s): %v; want allowed %d, refused {requests:%d}",
				tn, g, before[tn], after[tn], tl, want, more-want))
		}
	}
	sort.Strings(names)
	var report strings.Builder
	total := 0
	for _, g := range names {
		s := groups[g]
		total += s.allowed
		fmt.Fprintf(&report, "\n  %-22s %3d tenants: allowed %4d (want exactly %4d = %d x %d), %3d tenants wrong",
			g, s.tenants, s.allowed, want*s.tenants, want, s.tenants, s.wrong)
	}
	fmt.Fprintf(&report, "\n  %-22s %3d tenants: allowed %4d (want exactly %4d)", "all", len(tenants), total, want*len(tenants))
	if len(wrong) > 0 {
		t.Errorf("after the ring change, %d of %d tenants were not allowed exactly %d of %d more acquires (their state was reset or double-counted):%s\nfirst mismatches:\n  %s",
			len(wrong), len(tenants), want, more, report.String(), strings.Join(wrong[:min(10, len(wrong))], "\n  "))
	} else {
		t.Logf("after the ring change, every tenant got exactly %d of %d more acquires:%s", want, more, report.String())
	}
}

// groupByMove names a tenant's kind by how its owner changed.
func groupByMove(before, after map[string]string, special string) func(string) string {
	return func(tn string) string {
		switch {
		case before[tn] == after[tn]:
			return "stayed"
		case after[tn] == special:
			return "moved to " + special
		case before[tn] == special:
			return "moved from " + special
		default:
			return "moved between others"
		}
	}
}

func TestHandoffOnJoinKeepsCounts(t *testing.T) {
	needFull(t)
	const (
		per   = 6  // admitted before the join
		limit = 10 // rpm
		more  = 10 // sent after the join
	)
	c := NewCluster(t, daemon, 3, handoffRPMConfig, steady...)
	client := newClient()
	defer client.CloseIdleConnections()
	tenants := tenantNames("h", 300)

	admitEach(t, client, c.Procs, tenants, per)
	before := owners(t, c.Procs, tenants)

	p4 := c.Start()
	took := c.WaitConverged(15 * time.Second)
	t.Logf("%s joined; ring converged %v later", p4.Name, took)
	after := owners(t, c.Live(), tenants)

	var moved []string
	betweenOld := 0
	for _, tn := range tenants {
		switch {
		case after[tn] == p4.Name:
			moved = append(moved, tn)
		case after[tn] != before[tn]:
			betweenOld++
		}
	}
	t.Logf("%d of %d tenants moved to %s, %d moved between the old members (bounded load)", len(moved), len(tenants), p4.Name, betweenOld)
	if len(moved) < 30 {
		t.Fatalf("only %d of %d tenants moved to the joiner %s, want at least 30 (about 25%% with 271 partitions and 4 members)", len(moved), len(tenants), p4.Name)
	}

	// Right after the join, the moved tenants' windows must still hold
	// their 6 requests: 10-6 = 4 remaining, answered by the new owner.
	checkStatus := func(when string, wantRemaining int64) {
		t.Helper()
		st := statuses(t, c.Live(), moved)
		var wrong []string
		for _, tn := range moved {
			s, ok := st[tn]
			if !ok {
				continue // reported by statuses
			}
			if s.Owner != p4.Name || s.Limits.Requests.Limit != limit || s.Limits.Requests.Remaining != wantRemaining {
				wrong = append(wrong, fmt.Sprintf("%s: owner %q, requests limit %d remaining %d; want owner %s, limit %d, remaining %d",
					tn, s.Owner, s.Limits.Requests.Limit, s.Limits.Requests.Remaining, p4.Name, limit, wantRemaining))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%s: GET /v1/tenants is wrong for %d of %d moved tenants; first ones:\n  %s",
				when, len(wrong), len(moved), strings.Join(wrong[:min(10, len(wrong))], "\n  "))
		}
	}
	checkStatus("right after the join", limit-per)

	checkExactAfterChange(t, client, c.Live(), tenants, more, limit-per,
		groupByMove(before, after, p4.Name), before, after)

	checkStatus("after the last acquires", 0)
}

func TestHandoffOnGracefulLeaveKeepsCounts(t *testing.T) {
	needFull(t)
	const (
		per   = 6
		limit = 10
		more  = 10
	)
	c := NewCluster(t, daemon, 4, handoffRPMConfig, steady...)
	client := newClient()
	defer client.CloseIdleConnections()
	tenants := tenantNames("h", 300)

	admitEach(t, client, c.Procs, tenants, per)
	before := owners(t, c.Procs, tenants)

	perOwner := map[string]int{}
	for _, o := range before {
		perOwner[o]++
	}
	var leaver *Proc
	for _, p := range c.Procs {
		if leaver == nil || perOwner[p.Name] > perOwner[leaver.Name] {
			leaver = p
		}
	}
	t.Logf("tenants per owner %v; stopping %s (SIGTERM) with %d tenants", perOwner, leaver.Name, perOwner[leaver.Name])
	if perOwner[leaver.Name] < 30 {
		t.Fatalf("the busiest owner %s has only %d of %d tenants: %v", leaver.Name, perOwner[leaver.Name], len(tenants), perOwner)
	}

	c.Stop(leaver)
	took := c.WaitConverged(15 * time.Second)
	survivors := c.Live()
	if len(survivors) != 3 {
		t.Fatalf("%d nodes live after stopping %s, want 3", len(survivors), leaver.Name)
	}
	t.Logf("%s left; ring converged %v after it exited", leaver.Name, took)
	after := owners(t, survivors, tenants)
	for _, tn := range tenants {
		if after[tn] == leaver.Name {
			t.Fatalf("%s is still owned by %s, which left", tn, leaver.Name)
		}
	}

	checkExactAfterChange(t, client, survivors, tenants, more, limit-per,
		groupByMove(before, after, leaver.Name), before, after)

	// The left node's tenants' windows are full at their new owners.
	var gone []string
	for _, tn := range tenants {
		if before[tn] == leaver.Name {
			gone = append(gone, tn)
		}
	}
	st := statuses(t, survivors, gone)
	var wrong []string
	for _, tn := range gone {
		if s, ok := st[tn]; ok && (s.Owner != after[tn] || s.Limits.Requests.Remaining != 0) {
			wrong = append(wrong, fmt.Sprintf("%s: owner %q remaining %d; want owner %s, remaining 0", tn, s.Owner, s.Limits.Requests.Remaining, after[tn]))
		}
	}
	if len(wrong) > 0 {
		t.Errorf("GET /v1/tenants is wrong for %d of %d tenants of %s; first ones:\n  %s",
			len(wrong), len(gone), leaver.Name, strings.Join(wrong[:min(10, len(wrong))], "\n  "))
	}
}

func TestHandoffKeepsLeases(t *testing.T) {
	needFull(t)
	const (
		conc = 5 // slots per tenant
		more = 3 // acquires after one slot is freed; exactly one may pass
	)
	c := NewCluster(t, daemon, 3, handoffConcConfig, steady...)
	client := newClient()
	defer client.CloseIdleConnections()
	tenants := tenantNames("l", 40)

	leases := admitEach(t, client, c.Procs, tenants, conc)
	before := owners(t, c.Procs, tenants)

	p4 := c.Start()
	took := c.WaitConverged(15 * time.Second)
	t.Logf("%s joined; ring converged %v later", p4.Name, took)
	live := c.Live()
	after := owners(t, live, tenants)
	group := groupByMove(before, after, p4.Name)
	moved := 0
	for _, tn := range tenants {
		if before[tn] != after[tn] {
			moved++
		}
	}
	t.Logf("%d of %d tenants changed owner (%d to %s)", moved, len(tenants), func() int {
		n := 0
		for _, tn := range tenants {
			if after[tn] == p4.Name {
				n++
			}
		}
		return n
	}(), p4.Name)
	if moved < 3 {
		t.Fatalf("only %d of %d tenants changed owner after the join: nothing to hand off", moved, len(tenants))
	}

	type row struct {
		sixth           string // "allowed" or the refusal's reason
		statusRemaining int64
		settled         bool
		completeErr     string
		allowedAfter    int
		refusedAfter    map[string]int
		failedAfter     int
	}
	rows := map[string]*row{}
	for _, tn := range tenants {
		rows[tn] = &row{statusRemaining: -1}
	}

	// Every tenant's 5 slots are still taken, wherever its owner now is.
	st := statuses(t, live, tenants)
	for tn, s := range st {
		rows[tn].statusRemaining = s.Limits.Concurrency.Remaining
	}

	// A 6th acquire is refused for concurrency.
	var sixth []acqJob
	for i, tn := range tenants {
		sixth = append(sixth, acqJob{tn, live[i%len(live)]})
	}
	for i, r := range acquireJobs(t, client, "6th acquire", sixth) {
		switch {
		case !r.ok:
			rows[sixth[i].tenant].sixth = "failed"
		case r.allowed:
			rows[sixth[i].tenant].sixth = "allowed"
		default:
			rows[sixth[i].tenant].sixth = r.reason
		}
	}

	// Complete one of the 5 leases (taken before the join), via any node.
	var bad problems
	parallel(len(tenants), func(i int) {
		tn := tenants[i]
		p := live[(i+1)%len(live)]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code, out, err := Post(ctx, client, p.URL()+"/v1/complete", fmt.Sprintf(`{"tenant":%q,"lease":%q}`, tn, leases[tn][0]))
		switch {
		case err != nil:
			bad.add("complete %s via %s: %v", tn, p.Name, err)
			rows[tn].completeErr = err.Error()
		case code != http.StatusOK:
			bad.add("complete %s via %s: %d %v", tn, p.Name, code, out)
			rows[tn].completeErr = fmt.Sprintf("%d %v", code, out)
		default:
			rows[tn].settled = out["settled"] == true
		}
	})
	bad.report(t, "POST /v1/complete")

	// Exactly one slot came free: of 3 more acquires, exactly 1 is allowed.
	var last []acqJob
	for j := range more {
		for i, tn := range tenants {
			last = append(last, acqJob{tn, live[(i+j+2)%len(live)]})
		}
	}
	for tn, tl := range tallyByTenant(last, acquireJobs(t, client, "acquires after one complete", last)) {
		rows[tn].allowedAfter, rows[tn].refusedAfter, rows[tn].failedAfter = tl.allowed, tl.refused, tl.failed
	}

	var wrong []string
	wrongByGroup := map[string]int{}
	for _, tn := range tenants {
		r := rows[tn]
		if r.statusRemaining == 0 && r.sixth == "concurrency" && r.settled &&
			r.allowedAfter == 1 && r.refusedAfter["concurrency"] == more-1 && r.failedAfter == 0 {
			continue
		}
		wrongByGroup[group(tn)]++
		wrong = append(wrong, fmt.Sprintf("%s (%s, owner %s -> %s): concurrency remaining %d (want 0), 6th acquire %q (want \"concurrency\"), complete settled %v %s(want true), then allowed %d refused %v failed %d (want exactly 1 allowed, %d refused for concurrency)",
			tn, group(tn), before[tn], after[tn], r.statusRemaining, r.sixth, r.settled, r.completeErr, r.allowedAfter, r.refusedAfter, r.failedAfter, more-1))
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		t.Errorf("leases not kept across the join for %d of %d tenants (by kind: %v); first ones:\n  %s",
			len(wrong), len(tenants), wrongByGroup, strings.Join(wrong[:min(10, len(wrong))], "\n  "))
	} else {
		t.Logf("all %d tenants (%d changed owner) kept their 5 slots across the join; one complete freed exactly one", len(tenants), moved)
	}
}
