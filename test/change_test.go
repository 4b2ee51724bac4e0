package test

// "Exact through change" (issue 6; ARCHITECTURE.md "Custody", "Drain"; docs/operations.md "Membership changes"):
// real tokenringd processes with the shipped defaults (15 ms forward_timeout,
// LAN gossip), clients sending through every live node before, during and
// after a ring change, every tenant driven past its limit. Each tenant must
// end at exactly its limit, counted on the clients' side, with no client
// error, no fallback answer, and no key started from zero while its previous
// holder was alive.

import (
	"bufio"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	changeLimit   = 100 // rpm of every tenant
	changeUsed    = 40  // admitted per tenant before the change
	changeTenants = 45

	// resetMetric counts keys a node started from zero although their
	// previous holder was alive (exported by node).
	resetMetric    = "tokenring_reset_while_holder_alive_total"
	fallbackMetric = "tokenring_fallback_decisions_total"
	// receivedMetric counts the partitions a node received from another
	// (handoff): resetMetric's 0 means something only if these moved.
	receivedMetric = "tokenring_handoff_received_total"
)

// changeConfig: every tenant may make 100 requests a window; tokens and
// concurrency never refuse. Everything else is the shipped default
// (forward_timeout 15 ms, drain 5 s, fallback degraded).
func changeConfig(window time.Duration) string {
	return fmt.Sprintf(`
limits:
  default: {rpm: %d, tpm: 1000000000, concurrency: 1000000}
  window: %s
  lease_ttl: 120s
`, changeLimit, window)
}

// metricValue sums the samples of a Prometheus metric on p's /metrics, and
// says whether the metric was there at all.
func metricValue(p *Proc, name string) (float64, bool, error) {
	resp, err := http.Get(p.URL() + "/metrics")
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, false, fmt.Errorf("metric line %q: %v", line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}

// resetCounter adds up resetMetric, and receivedMetric, over node
// processes, read at several moments (a node about to be restarted or
// stopped is read before, since its counters go with it). A node without
// the metric counts 0 and is logged.
type resetCounter struct {
	t        *testing.T
	total    float64
	received float64 // partitions handed over: the moves the reset check watched
	readings []string
}

func (r *resetCounter) read(p *Proc, when string) {
	r.t.Helper()
	v, found, err := metricValue(p, resetMetric)
	switch {
	case err != nil:
		r.t.Errorf("read %s on %s (%s): %v", resetMetric, p.Name, when, err)
	case !found:
		r.readings = append(r.readings, fmt.Sprintf("%s %s: not exported (counted as 0)", p.Name, when))
	default:
		r.total += v
		r.readings = append(r.readings, fmt.Sprintf("%s %s: %v", p.Name, when, v))
	}
	got, _, err := metricValue(p, receivedMetric)
	if err != nil {
		r.t.Errorf("read %s on %s (%s): %v", receivedMetric, p.Name, when, err)
	}
	r.received += got
}

func (r *resetCounter) check() {
	r.t.Helper()
	r.t.Logf("%s: %s; %v partitions handed over (%s)", resetMetric, strings.Join(r.readings, "; "), r.received, receivedMetric)
	if r.total != 0 {
		r.t.Errorf("%s = %v in all, want 0: keys started from zero while their previous holder was alive", resetMetric, r.total)
	}
	if r.received == 0 {
		r.t.Errorf("%s = 0 on every node: no partition changed hands, so %s's 0 shows nothing", receivedMetric, resetMetric)
	}
}

// changeTest is the common frame of the change tests.
type changeTest struct {
	t       *testing.T
	c       *Cluster
	window  time.Duration
	tenants []string
	setupAt time.Time         // when the first admission was sent
	setup   LoadResult        // the changeUsed admissions per tenant before the change
	before  map[string]string // owners before the change
}

// newChangeTest sends changeUsed acquires for every tenant, round robin
// through every node (all of them allowed: the limit is far), and records
// the owners. Fallback answers and client errors there are test errors,
// but the test goes on: what the clients were allowed before the change
// counts in each tenant's total.
func newChangeTest(t *testing.T, c *Cluster, window time.Duration, prefix string) *changeTest {
	t.Helper()
	ct := &changeTest{t: t, c: c, window: window, tenants: tenantNames(prefix, changeTenants), setupAt: time.Now()}
	ct.setup = StartLoad(LoadConfig{
		Clients:     16,
		Tenants:     ct.tenants,
		Targets:     c.Nodes,
		MaxRequests: changeUsed * len(ct.tenants),
		MaxDuration: time.Minute,
	}).Wait()
	var wrong []string
	for _, tn := range ct.tenants {
		if tl := ct.setup.Tenants[tn]; tl.Allowed != changeUsed || tl.Errors != 0 || tl.Fallbacks != 0 {
			wrong = append(wrong, fmt.Sprintf("%s: %v", tn, *tl))
		}
	}
	if len(wrong) > 0 || ct.setup.Sent != changeUsed*len(ct.tenants) {
		sort.Strings(wrong)
		t.Errorf("before any change, %d acquires per tenant through every node of a healthy, converged cluster: %d of %d tenants did not get all of them allowed without fallback or error:\n  %s\n%s",
			changeUsed, len(wrong), len(ct.tenants), strings.Join(wrong, "\n  "), ct.setup.Summary())
	} else {
		t.Logf("before the change: %s", ct.setup.Summary())
	}
	ct.before = ownerMap(t, c.Live(), ct.tenants)
	return ct
}

// ownerMap asks, for every tenant, a node of procs (round robin) for its
// owner. Unlike owners, it does not stop a test that already has errors.
func ownerMap(t *testing.T, procs []*Proc, tenants []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	var failed []string
	for i, tn := range tenants {
		var out struct {
			Owner string `json:"owner"`
		}
		p := procs[i%len(procs)]
		if err := GetJSON(p.URL()+"/admin/owner?tenant="+tn, &out); err != nil || out.Owner == "" {
			failed = append(failed, fmt.Sprintf("%s via %s: %q %v", tn, p.Name, out.Owner, err))
			continue
		}
		m[tn] = out.Owner
	}
	if len(failed) > 0 {
		t.Errorf("/admin/owner failed for %d tenants: %s", len(failed), strings.Join(failed, "; "))
	}
	return m
}

// load starts the clients: 16 goroutines sending back to back through
// targets (a few thousand acquires a second here, so every tenant reaches its
// limit within about a second and is refused from then on); bounded at
// 400,000 acquires and 3 minutes. It returns once every target has answered
// changeLead acquires, so the change starts under load with the tenants
// partly used (changeUsed of changeLimit by the setup, and more since).
func (ct *changeTest) load(targets func() []*Proc, noHealthCheck bool) *LoadDriver {
	d := StartLoad(LoadConfig{
		Clients:       16,
		Tenants:       ct.tenants,
		Targets:       targets,
		NoHealthCheck: noHealthCheck,
		MaxRequests:   400_000,
		MaxDuration:   3 * time.Minute,
	})
	waitAnswered(ct.t, d, LoadResult{}, targets(), changeLead, 30*time.Second)
	return d
}

// changeLead is how many acquires every target answers before the change
// starts: the clients are busy on each (about 7 more a tenant through three
// targets, well under changeLimit-changeUsed).
const changeLead = 100

// finish keeps the clients sending until every tenant has been refused at
// least 10 more times (at least 2 s) after the change, stops them, and checks
// exactness: every tenant allowed exactly changeLimit in all, on the clients'
// side and in GET /v1/tenants, no client error, no fallback answer.
func (ct *changeTest) finish(d *LoadDriver, what string) LoadResult {
	t := ct.t
	t.Helper()
	d.Mark()
	drove := d.WaitEachRefused(10, 2*time.Second, 30*time.Second)
	res := d.Stop()
	t.Logf("clients: %s", res.Summary())
	if !drove {
		t.Errorf("the clients did not drive every tenant past its limit (10 refusals each) within 30 s after %s: the load is too thin to judge", what)
	}
	if el := time.Since(ct.setupAt); el > ct.window-5*time.Second {
		t.Fatalf("the test ran %v since the first admissions, too close to the %v window: early admissions may have left it, so counts cannot be judged (a test problem, not a tokenring one)", el, ct.window)
	}

	live := ct.c.Live()
	after := ownerMap(t, live, ct.tenants)
	st := statuses(t, live, ct.tenants)
	moved := 0
	var wrong []string
	for _, tn := range ct.tenants {
		if ct.before[tn] != after[tn] {
			moved++
		}
		tl, pre := res.Tenants[tn], ct.setup.Tenants[tn]
		s, haveStatus := st[tn]
		total := pre.Allowed + tl.Allowed
		if total != changeLimit || tl.Errors != 0 || tl.Fallbacks != 0 || tl.Refused == 0 ||
			!haveStatus || s.Limits.Requests.Limit != changeLimit || s.Limits.Requests.Remaining != 0 {
			wrong = append(wrong, fmt.Sprintf("%s (owner %s -> %s): admitted %d in all (%d before + %d during and after), want exactly %d; before: %v; during and after: %v; status: limit %d remaining %d (want %d, 0)",
				tn, ct.before[tn], after[tn], total, pre.Allowed, tl.Allowed, changeLimit, *pre, *tl, s.Limits.Requests.Limit, s.Limits.Requests.Remaining, changeLimit))
		}
	}
	t.Logf("%d of %d tenants changed owner through %s", moved, len(ct.tenants), what)
	if res.Errors != 0 {
		t.Errorf("%s: %d client errors, want 0", what, res.Errors)
	}
	if res.Fallbacks != 0 {
		t.Errorf("%s: %d fallback answers, want 0; why, by the nodes' logs:\n%s", what, res.Fallbacks, ct.c.grepLogs("falling back", 6))
	}
	if res.NoTarget != 0 {
		t.Errorf("%s: every node failed /readyz at once (clients waited %d times for a live node; see the health changes): behind a load balancer that is an outage",
			what, res.NoTarget)
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		over, under, troubled := 0, 0, 0
		for _, tn := range ct.tenants {
			pre, tl := ct.setup.Tenants[tn], res.Tenants[tn]
			switch total := pre.Allowed + tl.Allowed; {
			case total > changeLimit:
				over++
			case total < changeLimit:
				under++
			}
			if tl.Errors+tl.Fallbacks > 0 {
				troubled++
			}
		}
		t.Errorf("%s: %d of %d tenants wrong: %d admitted over their limit of %d, %d under it, %d saw client errors or fallback answers:\n  %s\nper-tenant tallies during and after the change:%s",
			what, len(wrong), len(ct.tenants), over, changeLimit, under, troubled, strings.Join(wrong, "\n  "), res.TenantReport())
	}
	return res
}

// A fourth node joins a busy three-node cluster: the keys that move (to the
// joiner, and between old members under bounded load) keep their counts.
func TestJoinUnderLoadIsExact(t *testing.T) {
	needFull(t)
	start := time.Now()
	const window = 60 * time.Second
	c := NewCluster(t, daemon, 3, changeConfig(window))
	ct := newChangeTest(t, c, window, "join")
	resets := &resetCounter{t: t}

	d := ct.load(c.Nodes, false)
	t0 := time.Now()
	p4 := c.Start()
	ready := time.Since(t0)
	converged := c.WaitConverged(30 * time.Second)
	t.Logf("%s ready %v after exec, ring converged %v later; clients see live %v", p4.Name, ready, converged, d.Live())

	ct.finish(d, "a join")
	joined := 0
	after := ownerMap(t, c.Live(), ct.tenants)
	for _, tn := range ct.tenants {
		if after[tn] == p4.Name {
			joined++
		}
	}
	if joined == 0 {
		t.Errorf("no tenant moved to the joiner %s: nothing was handed over", p4.Name)
	}
	for _, p := range c.Live() {
		resets.read(p, "at the end")
	}
	resets.check()
	t.Logf("%d tenants moved to %s; test took %v", joined, p4.Name, time.Since(start))
}

// The node owning the most tenants leaves by SIGTERM under load: its
// /readyz fails first, clients stop choosing it, it drains and hands its
// keys over, and nobody sees an error or a reset.
func TestSigtermLeaveUnderLoadIsExact(t *testing.T) {
	needFull(t)
	start := time.Now()
	const window = 60 * time.Second
	c := NewCluster(t, daemon, 3, changeConfig(window))
	ct := newChangeTest(t, c, window, "leave")
	resets := &resetCounter{t: t}

	perOwner := map[string]int{}
	for _, o := range ct.before {
		perOwner[o]++
	}
	leaver := c.Procs[0]
	for _, p := range c.Procs {
		if perOwner[p.Name] > perOwner[leaver.Name] {
			leaver = p
		}
	}
	resets.read(leaver, "before SIGTERM")

	d := ct.load(c.Nodes, false)
	t0 := time.Now()
	c.Stop(leaver)
	stopped := time.Since(t0)
	converged := c.WaitConverged(30 * time.Second)
	t.Logf("%s (owner of %d of %d tenants) exited %v after SIGTERM; ring converged %v later; clients see live %v",
		leaver.Name, perOwner[leaver.Name], len(ct.tenants), stopped, converged, d.Live())

	ct.finish(d, "a SIGTERM leave")
	for _, p := range c.Live() {
		resets.read(p, "at the end")
	}
	resets.check()
	t.Logf("test took %v", time.Since(start))
}

// All three nodes are restarted one at a time (SIGTERM, start again with the
// same name and ports, wait for convergence) behind HAProxy in TCP mode that
// health-checks /readyz every 100 ms; clients send only through HAProxy,
// over keep-alive connections.
func TestRollingRestartThroughHAProxyIsExact(t *testing.T) {
	needFull(t)
	needCommand(t, "haproxy")
	start := time.Now()
	// The window is longer than the default here only because three
	// drains (5 s each) and restarts take a while: every admission must
	// still be in it when the counts are checked.
	const window = 120 * time.Second
	c := NewCluster(t, daemon, 3, changeConfig(window))
	lb, stats := startHAProxyWith(t, c.Procs, haproxyOptions{CheckReadyz: true, CheckInterval: 100 * time.Millisecond})
	lbProc := &Proc{Name: "haproxy", HTTP: strings.TrimPrefix(lb, "http://")}
	ct := newChangeTest(t, c, window, "roll")
	resets := &resetCounter{t: t}
	stats.waitAllUp(t, c.Procs, 10*time.Second) // every node in the rotation before the clients start

	d := ct.load(func() []*Proc { return []*Proc{lbProc} }, true)
	for _, p := range append([]*Proc(nil), c.Procs...) {
		resets.read(p, "before its restart")
		stopped, ready := c.Restart(p)
		converged := c.WaitConverged(30 * time.Second)
		up := stats.waitAllUp(t, c.Procs, 10*time.Second) // HAProxy's rise 2 puts it back in the rotation
		t.Logf("restarted %s: exited %v after SIGTERM, ready %v after exec, ring converged %v later, back in HAProxy's rotation %v after that",
			p.Name, stopped, ready, converged, up)
	}

	ct.finish(d, "a rolling restart")
	for _, p := range c.Live() {
		resets.read(p, "at the end")
	}
	resets.check()
	t.Logf("test took %v", time.Since(start))
}

// busyConfig gives, for each of runs runs, three fresh tenants: one bound by
// rpm 300, one by tpm 30,000 (100 tokens an acquire), one by 50 concurrent
// slots. Everything else is the shipped default.
func busyConfig(runs int) string {
	var b strings.Builder
	b.WriteString("limits:\n  default: {rpm: 100000, tpm: 100000000, concurrency: 100000}\n  tenants:\n")
	for r := range runs {
		fmt.Fprintf(&b, "    busy-rpm-%d: {rpm: 300, tpm: 100000000, concurrency: 100000}\n", r)
		fmt.Fprintf(&b, "    busy-tpm-%d: {rpm: 100000, tpm: 30000, concurrency: 100000}\n", r)
		fmt.Fprintf(&b, "    busy-conc-%d: {rpm: 100000, tpm: 100000000, concurrency: 50}\n", r)
	}
	b.WriteString("  window: 60s\n  lease_ttl: 120s\n")
	return b.String()
}

// A healthy, busy three-node cluster with the shipped defaults decides
// exactly at the limit, with no fallback answer, ten runs in a row: 900
// acquires from 96 concurrent clients, round robin over the nodes.
func TestBusyClusterIsExactTenRuns(t *testing.T) {
	needFull(t)
	const runs = 10
	start := time.Now()
	c := NewCluster(t, daemon, 3, busyConfig(runs))
	// A counter vector has no sample before its first fallback: absent
	// reads as 0.
	fallbacks := func() map[string]float64 {
		m := map[string]float64{}
		for _, p := range c.Procs {
			v, _, err := metricValue(p, fallbackMetric)
			if err != nil {
				t.Fatalf("read %s on %s: %v", fallbackMetric, p.Name, err)
			}
			m[p.Name] = v
		}
		return m
	}
	cases := []struct {
		dim, reason string
		body        func(tenant string) string
		want        int
	}{
		{"rpm", "requests", func(tn string) string { return fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tn) }, 300},
		{"tpm", "tokens", func(tn string) string { return fmt.Sprintf(`{"tenant":%q,"prompt_tokens":50,"max_tokens":50}`, tn) }, 300},
		{"conc", "concurrency", func(tn string) string { return fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tn) }, 50},
	}
	var summary []string
	failedRuns := 0
	for r := range runs {
		runOK := true
		for _, tc := range cases {
			tenant := fmt.Sprintf("busy-%s-%d", tc.dim, r)
			fb0 := fallbacks()
			t0 := time.Now()
			res := StartLoad(LoadConfig{
				Clients:     96,
				Tenants:     []string{tenant},
				Body:        tc.body,
				Targets:     c.Nodes,
				MaxRequests: 900,
				MaxDuration: 2 * time.Minute,
			}).Wait()
			took := time.Since(t0)
			fb1 := fallbacks()
			var fbDelta []string
			for _, p := range c.Procs {
				if d := fb1[p.Name] - fb0[p.Name]; d != 0 {
					fbDelta = append(fbDelta, fmt.Sprintf("%s +%v", p.Name, d))
				}
			}
			tl := res.Tenants[tenant]
			line := fmt.Sprintf("run %d %-4s: allowed %3d of 900 (want %d), refused %v, errors %d, fallback answers %d (%d allowed), %s on nodes %v, %v",
				r, tc.dim, tl.Allowed, tc.want, tl.Reasons, tl.Errors, tl.Fallbacks, tl.FallbackAllowed, fallbackMetric, fbDelta, took.Round(time.Millisecond))
			summary = append(summary, line)
			if res.Sent != 900 || tl.Allowed != tc.want || tl.Refused != 900-tc.want || tl.Reasons[tc.reason] != 900-tc.want ||
				tl.Errors != 0 || tl.Fallbacks != 0 || len(fbDelta) != 0 {
				runOK = false
				t.Errorf("%s\n  %s", line, res.Summary())
			}
		}
		if !runOK {
			failedRuns++
		}
	}
	fb := fallbacks()
	for _, p := range c.Procs {
		if fb[p.Name] != 0 {
			t.Errorf("%s = %v on %s at the end, want 0", fallbackMetric, fb[p.Name], p.Name)
		}
	}
	t.Logf("%d of %d runs exact with no fallback (took %v); %s at the end %v:\n  %s",
		runs-failedRuns, runs, time.Since(start), fallbackMetric, fb, strings.Join(summary, "\n  "))
}
