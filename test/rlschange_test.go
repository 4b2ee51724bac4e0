package test

// Envoy's rate limit service through membership changes (docs/envoy.md):
// three tokenringd processes serve ShouldRateLimit on -grpc from one
// envoyproxy/ratelimit file, and gRPC clients spread requests of two
// descriptors each (the tenant's own limit, and its team's, which three
// tenants share) over every live node while a fourth node joins, one leaves
// by SIGTERM and one is SIGKILLed. Judged from outside, by the clients'
// answers and by every key's count read afterwards with check-only calls:
//
//   - no descriptor is answered OK more often than its limit in its unit
//     (the whole run fits in one minute, so that is the run's total);
//   - every key counts exactly the OK answers that carried it: a request
//     answered OVER_LIMIT charged none of its descriptors (all or nothing),
//     and no admission was lost or counted twice through the changes;
//   - no client error, but for the calls on the killed node's own
//     connections: those (bounded) are the only answers that may be lost,
//     and each may have been counted without the client knowing.
//
// The shipped defaults otherwise (15 ms forward timeout, LAN gossip, the
// degraded fallback while the killed owner is not yet declared dead), with
// sync replication, as TestChainExactThroughMembershipChanges: with async
// replication a SIGKILL loses what its keys admitted since their last round,
// and the restored keys admit it again.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/rls/descriptors"
)

// rlsChangeDomain is the domain of rlsChangeFile.
const rlsChangeDomain = "gateway"

// rlsChangeFile is the rate limit file, as envoyproxy/ratelimit reads it:
// every tenant t-… its own 150 a minute (a wildcard: each value a key of
// its own), and two teams' shared limits. team-x (600) is above what its
// three tenants may take (450), so it never refuses, and every refusal of
// one of them by its own limit is a team-x reservation rolled back; team-y
// (300) binds before its tenants' (450), so its tenants are refused by the
// team and their own keys must not count those refusals.
const rlsChangeFile = `domain: gateway
descriptors:
  - key: tenant
    value: "t-*"
    rate_limit: {unit: minute, requests_per_unit: 150}
  - key: team
    value: team-x
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: team
    value: team-y
    rate_limit: {unit: minute, requests_per_unit: 300}
`

// rlsChangeTenants are the tenants the clients send for, round robin, and
// rlsChangeTeam each one's team.
var (
	rlsChangeTenants = []string{"t-0", "t-1", "t-2", "t-3", "t-4", "t-5"}
	rlsChangeTeam    = map[string]string{"t-0": "team-x", "t-1": "team-x", "t-2": "team-x", "t-3": "team-y", "t-4": "team-y", "t-5": "team-y"}
)

// rlsDesc names one descriptor: "tenant=t-0", "team=team-x".
type rlsDesc struct{ key, value string }

func (d rlsDesc) String() string { return d.key + "=" + d.value }

// rlsChangeDescs are the two descriptors of a request for tenant tn, in
// the request's order.
func rlsChangeDescs(tn string) [2]rlsDesc {
	return [2]rlsDesc{{"tenant", tn}, {"team", rlsChangeTeam[tn]}}
}

// rlsChangeConfig is the nodes' config, reading the rate limit files in
// dir. Hot-key slices are off (hot_key_rate: 0): with them, a node that
// forwards a key's requests fast enough is handed a slice of admissions by
// the owner, and a SIGKILLed holder takes the ones it had not handed out
// with it: they stay counted at the owner (capacity lost, never a limit
// passed: at most a hundredth of what the key had left), so a key would
// count more than its OK answers by up to a slice, and the exact count
// below could not be asked for.
func rlsChangeConfig(dir string) string {
	return fmt.Sprintf(`
replication: {mode: sync}
hot_key_rate: 0
rls: {config_dir: %s}
`, dir)
}

func TestRLSExactThroughMembershipChanges(t *testing.T) {
	needFull(t)
	began := time.Now()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(rlsChangeFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := descriptors.Load(dir); err != nil { // as the nodes read it: a file they would refuse fails here, plainly
		t.Fatal(err)
	}
	c := NewCluster(t, daemon, 3, rlsChangeConfig(dir), "-grpc", "127.0.0.1:0")

	// 8 clients, one call each 120 ms: about 65 a second, 11 for each
	// tenant, so team-y is spent in about 9 s and the other tenants in
	// about 14 s: around the kill (about 8 s in) and while the survivors
	// still fall back for the killed owner's keys (LAN failure detection:
	// about 12 s here).
	d := startRLSClients(t, 8, 120*time.Millisecond, 100_000, 50*time.Second)
	defer d.stop()
	for _, p := range c.Procs {
		d.add(t, p)
	}
	waitRLSAnswered(t, d, c.Procs, 20, 20*time.Second)
	step := func(what string, change func()) {
		t0 := time.Now()
		change()
		took := c.WaitConverged(45 * time.Second)
		t.Logf("%s: %v, ring converged %v later; %d OK so far", what, time.Since(t0).Round(time.Millisecond), took.Round(time.Millisecond), d.okSoFar())
	}
	step("a fourth node joins", func() { d.add(t, c.Start()) })
	step("n2 leaves (SIGTERM)", func() { c.Stop(c.Procs[1]) })
	// The SIGKILL takes the node owning the most descriptor keys: their
	// counts must come back from the sync copies.
	owners := rlsOwners(t, c.Live())
	victim := c.Live()[0]
	for _, p := range c.Live() {
		if len(owners[p.Name]) > len(owners[victim.Name]) {
			victim = p
		}
	}
	var killedAt time.Time
	var dropped time.Duration
	step(fmt.Sprintf("%s SIGKILLed, owning %v", victim.Name, owners[victim.Name]), func() {
		killedAt = time.Now()
		c.Kill(victim)
		eventually(t, 10*time.Second, "the clients drop the killed node", func() bool { return !slices.Contains(d.liveNames(), victim.Name) })
		dropped = time.Since(killedAt)
	})
	survivors := c.Live()
	t.Logf("descriptor keys by owner after the kill: %v", rlsOwners(t, survivors))

	// Every tenant refused 10 more times since the changes: each was
	// driven past its limit (t-0..2 by their own, t-3..5 by team-y) by
	// the keys' new owners.
	d.mark()
	if !d.waitEachRefused(10, time.Second, 20*time.Second) {
		t.Fatalf("the clients did not drive every tenant past its limit within 20 s after the changes: %s", d.summary())
	}
	answers := d.stop()
	repaidIn := waitDebtsRepaid(t, survivors, 20*time.Second) // a fallback admission counts at its key once repaid

	// The keys' counts, read through a live node with check-only calls.
	used, limit := map[rlsDesc]int{}, map[rlsDesc]int{}
	for _, tn := range rlsChangeTenants {
		for _, ds := range rlsChangeDescs(tn) {
			if _, seen := limit[ds]; !seen {
				limit[ds], used[ds] = rlsUsed(t, survivors[0], ds)
			}
		}
	}
	readAt := time.Now()
	first, last := answers[0].sent, answers[0].got
	for _, a := range answers {
		first, last = minTime(first, a.sent), maxTime(last, a.got)
	}
	if el := readAt.Sub(first); el > 55*time.Second {
		t.Fatalf("%v from the first call to the keys' counts, too close to the minute of the limits: early admissions may have left the windows (a test problem, not tokenring's)", el.Round(time.Millisecond))
	}

	// What the clients got.
	ok, lost, refusedBy := map[rlsDesc]int{}, map[rlsDesc]int{}, map[rlsDesc]int{}
	sent, oks, overs, rollbacks := map[string]int{}, 0, 0, 0
	var errs, victimErrs []string
	for _, a := range answers {
		sent[a.node]++
		ds := rlsChangeDescs(a.tenant)
		switch {
		case a.err != "" && a.node == victim.Name && !a.got.Before(killedAt):
			// Lost with the killed node: it may have been charged
			// anywhere, its descriptors' counts may hold it.
			lost[ds[0]]++
			lost[ds[1]]++
			victimErrs = append(victimErrs, a.String(began))
			if a.sent.After(killedAt.Add(dropped)) {
				errs = append(errs, "sent to the killed node after the clients dropped it: "+a.String(began))
			}
		case a.err != "":
			errs = append(errs, a.String(began))
		case a.code == pb.RateLimitResponse_OK:
			oks++
			ok[ds[0]]++
			ok[ds[1]]++
		default:
			overs++
			for i, over := range a.over {
				if over {
					refusedBy[ds[i]]++
				}
			}
			if a.over[0] && !a.over[1] {
				rollbacks++ // the team admitted first (its key sorts first), then rolled back
			}
		}
	}
	var wrong []string
	for ds, u := range used {
		if ok[ds] > limit[ds] || u > limit[ds] || u < ok[ds] || u > ok[ds]+lost[ds] {
			wrong = append(wrong, fmt.Sprintf("%s counts %d of %d, answered OK %d times (%d more at most from answers lost with %s), refused it %d times",
				ds, u, limit[ds], ok[ds], lost[ds], victim.Name, refusedBy[ds]))
		}
		// The limits that bind (rlsChangeFile) were driven to them.
		if (ds.key == "tenant" && rlsChangeTeam[ds.value] == "team-x") || ds.value == "team-y" {
			if u != limit[ds] {
				wrong = append(wrong, fmt.Sprintf("%s, a limit that binds, counts %d of %d", ds, u, limit[ds]))
			}
		}
	}
	sort.Strings(wrong)
	if len(wrong) > 0 {
		t.Errorf("descriptors whose counts do not add up (a limit passed, a partial charge, a lost or doubled count):\n  %s", strings.Join(wrong, "\n  "))
	}
	if len(errs) > 0 {
		t.Errorf("%d client errors other than on the killed node's connections, want 0:\n  %s", len(errs), strings.Join(errs[:min(len(errs), 20)], "\n  "))
	}
	// Each client has one call in flight at the kill, and sends one call
	// each pace until the clients drop the node: a bound on what may fail
	// there.
	if bound := d.clients * (1 + int(math.Ceil(float64(dropped)/float64(d.pace)))); len(victimErrs) > bound {
		t.Errorf("%d calls failed on the killed node's connections, more than %d (%d clients, dropped %v after the kill):\n  %s",
			len(victimErrs), bound, d.clients, dropped.Round(time.Millisecond), strings.Join(victimErrs[:min(len(victimErrs), 20)], "\n  "))
	}
	if rollbacks == 0 {
		t.Errorf("no request was refused by its tenant's limit after its team admitted it: all or nothing was never put to the test")
	}
	m := rlsSurvivorMetrics(t, survivors)
	if m["tokenring_restored_from_replica_total"] == 0 {
		t.Errorf("no key was restored from a replica after %s's kill (owning %v): the kill showed nothing", victim.Name, owners[victim.Name])
	}
	if m["tokenring_handoff_received_total"] == 0 {
		t.Errorf("no partition was handed over on the survivors: the join and the leave showed nothing")
	}
	counts := make([]string, 0, len(used))
	for ds, u := range used {
		counts = append(counts, fmt.Sprintf("%s %d/%d (OK %d, lost %d, refused it %d)", ds, u, limit[ds], ok[ds], lost[ds], refusedBy[ds]))
	}
	sort.Strings(counts)
	t.Logf("%d calls in %v (first call to counts read %v): %d OK, %d OVER_LIMIT (%d of them a team admission rolled back), %d errors on %s's connections (clients dropped it %v after the kill), %d other; sent by node %v",
		len(answers), last.Sub(first).Round(time.Millisecond), readAt.Sub(first).Round(time.Millisecond), oks, overs, rollbacks,
		len(victimErrs), victim.Name, dropped.Round(time.Millisecond), len(errs), sent)
	t.Logf("keys: %s", strings.Join(counts, "; "))
	t.Logf("survivors: %v; debts repaid %v after the clients stopped; test took %v", m, repaidIn.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if len(victimErrs) > 0 {
		t.Logf("first calls failed with %s: %s", victim.Name, strings.Join(victimErrs[:min(len(victimErrs), 3)], "; "))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// rlsUsed reads descriptor ds's limit and count (limit − limit_remaining)
// through p, with a check-only call (hits_addend 0 charges nothing).
func rlsUsed(t *testing.T, p *Proc, ds rlsDesc) (limit, used int) {
	t.Helper()
	conn := rlsDial(t, p)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: rlsChangeDomain,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: ds.key, Value: ds.value}}, HitsAddend: wrapperspb.UInt64(0)}}})
	if err != nil {
		t.Fatalf("check %s via %s: %v", ds, p.Name, err)
	}
	st := resp.GetStatuses()
	if len(st) != 1 || st[0].GetCurrentLimit() == nil {
		t.Fatalf("check %s via %s: %v", ds, p.Name, resp)
	}
	limit = int(st[0].GetCurrentLimit().GetRequestsPerUnit())
	return limit, limit - int(st[0].GetLimitRemaining())
}

// rlsOwners is, by member, the descriptor keys the ring of procs gives it
// (ring.New places members as every node does; GET /admin/owner takes no
// descriptor key).
func rlsOwners(t *testing.T, procs []*Proc) map[string][]string {
	t.Helper()
	var members []ring.Member
	for _, p := range procs {
		members = append(members, ring.Member{Name: p.Name})
	}
	r, err := ring.New(ring.Config{}, members)
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string][]string{}
	seen := map[rlsDesc]bool{}
	for _, tn := range rlsChangeTenants {
		for _, ds := range rlsChangeDescs(tn) {
			if seen[ds] {
				continue
			}
			seen[ds] = true
			o, _ := r.Owner(descriptors.Key(rlsChangeDomain, []descriptors.Entry{{Key: ds.key, Value: ds.value}}))
			owners[o.Name] = append(owners[o.Name], ds.String())
		}
	}
	return owners
}

// rlsSurvivorMetrics sums, over procs, the metrics that say what the
// changes did.
func rlsSurvivorMetrics(t *testing.T, procs []*Proc) map[string]float64 {
	t.Helper()
	m := map[string]float64{}
	for _, name := range []string{"tokenring_handoff_received_total", "tokenring_handoff_orphans_total", "tokenring_restored_from_replica_total",
		"tokenring_fallback_decisions_total", "tokenring_fallback_debts_recorded_total", "tokenring_sync_replication_missed_total"} {
		for _, p := range procs {
			m[name] += metric(t, p, name)
		}
	}
	return m
}

// grpcServing finds the gRPC address in a node's "tokenringd serving" log
// line (the node listens on -grpc 127.0.0.1:0).
var grpcServing = regexp.MustCompile(`msg="tokenringd serving" .*\bgrpc=(\S+)`)

// rlsDial opens a gRPC connection to p's rate limit service.
func rlsDial(t *testing.T, p *Proc) *grpc.ClientConn {
	t.Helper()
	var addr string
	eventually(t, 10*time.Second, func() string { return p.Name + " logs its gRPC address:\n" + tail(p.Log(), 2000) }, func() bool {
		m := grpcServing.FindStringSubmatch(p.Log())
		if m != nil {
			addr = m[1]
		}
		return m != nil && m[1] != ""
	})
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// rlsAnswer is one call's outcome, as its client saw it.
type rlsAnswer struct {
	sent, got time.Time
	node      string
	tenant    string
	code      pb.RateLimitResponse_Code
	over      [2]bool // which descriptor said OVER_LIMIT
	err       string  // a transport error, a gRPC status, or an answer that makes no sense
}

func (a rlsAnswer) String(began time.Time) string {
	out := a.code.String()
	if a.err != "" {
		out = a.err
	}
	return fmt.Sprintf("+%.3fs %s via %s (%v): %s", a.sent.Sub(began).Seconds(), a.tenant, a.node, a.got.Sub(a.sent).Round(time.Millisecond), out)
}

// rlsTarget is one node the clients may send to.
type rlsTarget struct {
	p    *Proc
	conn *grpc.ClientConn
	rl   pb.RateLimitServiceClient
}

// rlsClients are gRPC clients behind a load balancer: each sends one call
// at a time, each pace, for the tenants round robin, through the nodes
// that passed their last /readyz poll (every 100 ms, as LoadDriver's),
// until stopped, max calls in all or maxRun.
type rlsClients struct {
	clients int
	pace    time.Duration
	max     int64
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	seq     atomic.Int64
	live    atomic.Pointer[[]*rlsTarget]
	check   *http.Client

	mu      sync.Mutex // guards the fields below
	targets []*rlsTarget
	answers []rlsAnswer
	marked  map[string]int // refusals per tenant at the last mark
	markAt  time.Time
	stopped bool
}

func startRLSClients(t *testing.T, clients int, pace time.Duration, max int, maxRun time.Duration) *rlsClients {
	d := &rlsClients{clients: clients, pace: pace, max: int64(max), check: &http.Client{}}
	d.ctx, d.cancel = context.WithTimeout(context.Background(), maxRun)
	d.live.Store(&[]*rlsTarget{})
	d.wg.Add(1)
	go d.pollLoop()
	for range clients {
		d.wg.Add(1)
		go d.client()
	}
	return d
}

// add makes p a target, once it passes a poll.
func (d *rlsClients) add(t *testing.T, p *Proc) {
	t.Helper()
	conn := rlsDial(t, p)
	d.mu.Lock()
	d.targets = append(d.targets, &rlsTarget{p: p, conn: conn, rl: pb.NewRateLimitServiceClient(conn)})
	d.mu.Unlock()
	d.poll()
}

func (d *rlsClients) pollLoop() {
	defer d.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-tick.C:
			d.poll()
		}
	}
}

// poll publishes the targets whose /readyz answers 200.
func (d *rlsClients) poll() {
	d.mu.Lock()
	targets := slices.Clone(d.targets)
	d.mu.Unlock()
	procs := make([]*Proc, len(targets))
	for i, tg := range targets {
		procs[i] = tg.p
	}
	ok := readyz(d.ctx, procs, func(*Proc) *http.Client { return d.check }, 500*time.Millisecond)
	if d.ctx.Err() != nil {
		return // stopped: the last published targets stand
	}
	var live []*rlsTarget
	for i, tg := range targets {
		if ok[i] {
			live = append(live, tg)
		}
	}
	d.live.Store(&live)
}

func (d *rlsClients) liveNames() []string {
	var names []string
	for _, tg := range *d.live.Load() {
		names = append(names, tg.p.Name)
	}
	return names
}

func (d *rlsClients) client() {
	defer d.wg.Done()
	n := int64(len(rlsChangeTenants))
	for d.ctx.Err() == nil {
		live := *d.live.Load()
		if len(live) == 0 {
			time.Sleep(10 * time.Millisecond) // no node ready yet
			continue
		}
		seq := d.seq.Add(1) - 1
		if seq >= d.max {
			return
		}
		// Tenant i in round r goes to live node (i+r) mod L, as
		// LoadDriver's: every tenant through every node in turn.
		ti, round := seq%n, seq/n
		d.call(live[int((ti+round)%int64(len(live)))], rlsChangeTenants[ti])
		select {
		case <-d.ctx.Done():
		case <-time.After(d.pace):
		}
	}
}

// call sends one request for tenant through tg and records its answer.
// Its timeout is its own, not the run's: stopping the clients lets the
// calls in flight finish.
func (d *rlsClients) call(tg *rlsTarget, tenant string) {
	ds := rlsChangeDescs(tenant)
	req := &pb.RateLimitRequest{Domain: rlsChangeDomain, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: ds[0].key, Value: ds[0].value}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: ds[1].key, Value: ds[1].value}}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := rlsAnswer{sent: time.Now(), node: tg.p.Name, tenant: tenant}
	resp, err := tg.rl.ShouldRateLimit(ctx, req)
	a.got = time.Now()
	st := resp.GetStatuses()
	switch {
	case err != nil:
		a.err = err.Error()
	case len(st) != 2:
		a.err = fmt.Sprintf("%d statuses for 2 descriptors: %v", len(st), resp)
	default:
		a.code = resp.GetOverallCode()
		for i := range st {
			a.over[i] = st[i].GetCode() == pb.RateLimitResponse_OVER_LIMIT
		}
		if ok := a.code == pb.RateLimitResponse_OK; (ok && (a.over[0] || a.over[1])) || (!ok && (a.code != pb.RateLimitResponse_OVER_LIMIT || !a.over[0] && !a.over[1])) {
			a.err = fmt.Sprintf("overall %v with statuses %v", a.code, st)
		}
	}
	d.mu.Lock()
	d.answers = append(d.answers, a)
	d.mu.Unlock()
}

// answered counts the answers (not errors) through each node so far.
func (d *rlsClients) answered() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := map[string]int{}
	for _, a := range d.answers {
		if a.err == "" {
			n[a.node]++
		}
	}
	return n
}

func (d *rlsClients) okSoFar() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, a := range d.answers {
		if a.err == "" && a.code == pb.RateLimitResponse_OK {
			n++
		}
	}
	return n
}

// refused counts each tenant's OVER_LIMIT answers so far.
func (d *rlsClients) refused() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := map[string]int{}
	for _, a := range d.answers {
		if a.err == "" && a.code == pb.RateLimitResponse_OVER_LIMIT {
			n[a.tenant]++
		}
	}
	return n
}

func (d *rlsClients) mark() {
	r := d.refused()
	d.mu.Lock()
	d.marked, d.markAt = r, time.Now()
	d.mu.Unlock()
}

// waitEachRefused waits until least has passed since the mark and every
// tenant has been refused n more times since; false after timeout.
func (d *rlsClients) waitEachRefused(n int, least, timeout time.Duration) bool {
	d.mu.Lock()
	marked, markAt := d.marked, d.markAt
	d.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		r := d.refused()
		done := time.Since(markAt) >= least
		for _, tn := range rlsChangeTenants {
			done = done && r[tn]-marked[tn] >= n
		}
		switch {
		case done:
			return true
		case time.Now().After(deadline) || d.ctx.Err() != nil:
			return false
		}
		time.Sleep(20 * time.Millisecond) // the poll's interval
	}
}

func (d *rlsClients) summary() string {
	return fmt.Sprintf("OK %d; OVER_LIMIT by tenant %v; answers by node %v", d.okSoFar(), d.refused(), d.answered())
}

// stop ends the clients (the calls in flight finish), closes their
// connections, and returns every answer in the order they came.
func (d *rlsClients) stop() []rlsAnswer {
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.stopped {
		d.stopped = true
		for _, tg := range d.targets {
			tg.conn.Close()
		}
		d.check.CloseIdleConnections()
	}
	return d.answers
}

// waitRLSAnswered waits until the clients have had n answers through each
// of procs.
func waitRLSAnswered(t *testing.T, d *rlsClients, procs []*Proc, n int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() string { return fmt.Sprintf("%d answers through each node: %s", n, d.summary()) }, func() bool {
		got := d.answered()
		for _, p := range procs {
			if got[p.Name] < n {
				return false
			}
		}
		return true
	})
}
