package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var daemon string // path of the tokenringd binary built for these tests

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokenring-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	daemon, err = BuildDaemon(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// clusterConfig is shared by the multi-process tests. It keeps the shipped
// forward_timeout (15ms): a slow forward is waited for, and only an
// unreachable owner falls back.
// steady is for the exactness tests: memberlist's LAN timings (the harness's
// default too), so a node starved of CPU by 900 concurrent clients under the
// race detector is not falsely declared dead.
var steady = []string{"-gossip-profile", "lan"}

const clusterConfig = `
limits:
  default: {rpm: 100000, tpm: 100000000, concurrency: 100000}
  tenants:
    rpm300: {rpm: 300, tpm: 100000000, concurrency: 100000}
    tpm30k: {rpm: 100000, tpm: 30000, concurrency: 100000}
    conc50: {rpm: 100000, tpm: 100000000, concurrency: 50}
  window: 60s
  lease_ttl: 120s
pools:
  shared-model: {rpm: 120, tpm: 100000000, concurrency: 100000}
`

func newClient() *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 0},
	}
}

// startWorkers runs work on n goroutines, worker w as work(w, stop), and
// returns halt: it closes stop and waits until every worker has returned.
// halt is also registered with t.Cleanup, so the workers stop on every path
// out of the test, a t.Fatal included, before the cluster's processes are
// killed (cleanups run last registered, first) and before the test is
// over: a worker may call t.Errorf, never after the test has completed.
// work must return soon after stop is closed. Calling halt again does
// nothing.
func startWorkers(t *testing.T, n int, work func(w int, stop <-chan struct{})) (halt func()) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(w, stop)
		}()
	}
	var once sync.Once
	halt = func() {
		once.Do(func() { close(stop) })
		wg.Wait()
	}
	t.Cleanup(halt)
	return halt
}

// roundRobin fires n acquires at once, request i to node i mod len(procs),
// and counts allowed and refused answers by reason.
func roundRobin(t *testing.T, procs []*Proc, n int, body func(i int) string) (allowed int, reasons map[string]int) {
	t.Helper()
	client := newClient()
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	reasons = map[string]int{}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			code, out, err := Post(context.Background(), client, procs[i%len(procs)].URL()+"/v1/acquire", body(i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("acquire %d: %v", i, err)
			case code == http.StatusOK && out["allowed"] == true:
				allowed++
			case code == http.StatusTooManyRequests:
				reasons[fmt.Sprint(out["reason"])]++
				if ra, _ := out["retry_after_ms"].(float64); ra <= 0 {
					t.Errorf("refusal without retry_after_ms: %v", out)
				}
			default:
				t.Errorf("acquire %d: %d %v", i, code, out)
			}
			if out["fallback"] == true {
				t.Errorf("acquire %d fell back although every owner is up: %v", i, out)
			}
		}()
	}
	close(gate)
	wg.Wait()
	return allowed, reasons
}

func TestClusterExactLimits(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, clusterConfig, steady...)
	cases := []struct {
		name, body string
		reason     string
		want       int
	}{
		{"requests", `{"tenant":"rpm300","prompt_tokens":1,"max_tokens":1}`, "requests", 300},
		{"tokens", `{"tenant":"tpm30k","prompt_tokens":50,"max_tokens":50}`, "tokens", 300},
		{"concurrency", `{"tenant":"conc50","prompt_tokens":1,"max_tokens":1}`, "concurrency", 50},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allowed, reasons := roundRobin(t, c.Procs, 900, func(int) string { return tc.body })
			if allowed != tc.want || reasons[tc.reason] != 900-tc.want || len(reasons) != 1 {
				t.Fatalf("allowed %d refused %v, want exactly %d allowed and %d refused for %s",
					allowed, reasons, tc.want, 900-tc.want, tc.reason)
			}
		})
	}
}

// ownerOf asks node p who owns tenant.
func ownerOf(t *testing.T, p *Proc, tenant string) string {
	t.Helper()
	var out struct {
		Owner     string `json:"owner"`
		Partition int    `json:"partition"`
	}
	if err := GetJSON(p.URL()+"/admin/owner?tenant="+tenant, &out); err != nil {
		t.Fatal(err)
	}
	return out.Owner
}

// tenantsOwnedBy returns up to n tenants named prefix-<i> whose owner, as
// node via sees it, is owner.
func tenantsOwnedBy(t *testing.T, via *Proc, owner, prefix string, n int) []string {
	t.Helper()
	var tenants []string
	for i := 0; len(tenants) < n && i < 100*n; i++ {
		if tn := fmt.Sprintf("%s-%d", prefix, i); ownerOf(t, via, tn) == owner {
			tenants = append(tenants, tn)
		}
	}
	return tenants
}

func TestClusterPoolAcrossOwners(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, clusterConfig, steady...)
	// Three tenants with three different owners share the pool.
	var tenants []string
	seen := map[string]bool{}
	for i := 0; len(tenants) < 3 && i < 1000; i++ {
		tn := fmt.Sprintf("tenant-%d", i)
		if o := ownerOf(t, c.Procs[0], tn); !seen[o] {
			seen[o] = true
			tenants = append(tenants, tn)
		}
	}
	if len(tenants) != 3 {
		t.Fatalf("found tenants on %d owners only", len(tenants))
	}
	allowed, reasons := roundRobin(t, c.Procs, 900, func(i int) string {
		return fmt.Sprintf(`{"tenant":%q,"model":"shared-model","prompt_tokens":1,"max_tokens":1}`, tenants[(i/3)%3])
	})
	if allowed != 120 || reasons["requests"] != 780 {
		t.Fatalf("allowed %d refused %v, want exactly 120 allowed (the pool's rpm) and 780 refused", allowed, reasons)
	}
	// The tenants' windows hold exactly the admitted requests: the pool's
	// refusals were rolled back at the tenants' owners. (Keys this busy
	// are hot: until the slices the owners allotted end with their bucket,
	// a window also holds the slices' admissions not handed out.)
	used := func() (used float64) {
		for _, tn := range tenants {
			var st struct {
				Limits struct {
					Requests struct{ Limit, Remaining float64 } `json:"requests"`
				} `json:"limits"`
			}
			if err := GetJSON(c.Procs[2].URL()+"/v1/tenants/"+tn, &st); err != nil {
				t.Fatal(err)
			}
			used += st.Limits.Requests.Limit - st.Limits.Requests.Remaining
		}
		return used
	}
	deadline := time.Now().Add(5 * time.Second)
	for used() != 120 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if u := used(); u != 120 {
		t.Fatalf("tenants' windows hold %v requests, want 120", u)
	}
}

func TestClusterOwnershipAgrees(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, clusterConfig, steady...)
	owners := map[string]string{}
	client := newClient()
	defer client.CloseIdleConnections()
	for i := range 1000 {
		tn := fmt.Sprintf("tenant-%d", i)
		for _, p := range c.Procs {
			o := ownerOf(t, p, tn)
			if prev, ok := owners[tn]; ok && prev != o {
				t.Fatalf("%s: owner %s on one node, %s on %s", tn, prev, o, p.Name)
			}
			owners[tn] = o
		}
	}
	perOwner := map[string]int{}
	for _, o := range owners {
		perOwner[o]++
	}
	if len(perOwner) != 3 {
		t.Fatalf("1000 tenants spread over %d owners: %v", len(perOwner), perOwner)
	}
	v, err := c.Ring(c.Procs[1])
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, m := range v.Members {
		sum += m.Partitions
		// buraksezer/consistent's bounded load: no member above
		// ceil(average × 1.25).
		if limit := (v.PartitionCount*125/100 + 2) / 3; m.Partitions > limit {
			t.Errorf("%s owns %d partitions, above the bounded load %d", m.Name, m.Partitions, limit)
		}
	}
	if sum != v.PartitionCount || v.PartitionCount != 271 {
		t.Fatalf("partitions add up to %d of %d", sum, v.PartitionCount)
	}
	t.Logf("partitions: %+v; tenants per owner: %v", v.Members, perOwner)
}

// Convergence budgets with the shipped LAN gossip timings. WaitConverged
// fails the test when a budget is exceeded; the times are logged too.
func TestClusterConvergence(t *testing.T) {
	needFull(t)
	const (
		readyBudget = 5 * time.Second // exec to /readyz 200: joined, ring built, owned partitions received
		joinBudget  = 2 * time.Second // every node sees the joiner (push-pull at join)
		leaveBudget = 2 * time.Second // after a drained node exits (it announced leaving, then left)
		// SIGKILL: memberlist's LAN suspicion timeout, up to 6 × 4 ×
		// log10(n) probe intervals (~11 s with 3 members, when too few
		// members remain to confirm the suspicion), then the broadcast.
		crashBudget = 20 * time.Second
	)
	c := NewCluster(t, daemon, 3, clusterConfig)
	t0 := time.Now()
	p4 := c.Start()
	if ready := time.Since(t0); ready > readyBudget {
		t.Fatalf("the joiner was ready %v after exec, budget %v", ready, readyBudget)
	} else {
		t.Logf("join: ready %v after exec; every node saw 4 members %v later", ready, c.WaitConverged(joinBudget))
	}
	c.Stop(p4)
	t.Logf("graceful leave: 3 members on every node %v after the leaver exited", c.WaitConverged(leaveBudget))
	c.Kill(c.Procs[2])
	t.Logf("crash (SIGKILL): 2 members on every node %v after the kill", c.WaitConverged(crashBudget))
}

func TestClusterOwnerCrashFallsBack(t *testing.T) {
	needFull(t)
	const cfg = `
limits:
  default: {rpm: 100000, tpm: 100000000, concurrency: 100000}
fallback: degraded
`
	c := NewCluster(t, daemon, 3, cfg)
	victim := c.Procs[1]
	tenant := tenantsOwnedBy(t, c.Procs[0], victim.Name, "tenant", 1)[0]
	survivors := []*Proc{c.Procs[0], c.Procs[2]}
	client := newClient()
	defer client.CloseIdleConnections()

	type answer struct {
		at       time.Time
		code     int
		fallback bool
		owner    string
		took     time.Duration
	}
	var mu sync.Mutex
	var answers []answer
	var failures atomic.Int64
	halt := startWorkers(t, 4, func(w int, stop <-chan struct{}) {
		for i := 0; i < 5000; i++ { // bounded in count, and stopped below
			select {
			case <-stop:
				return
			default:
			}
			p := survivors[(w+i)%2]
			start := time.Now()
			code, out, err := Post(context.Background(), client, p.URL()+"/v1/acquire",
				fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tenant))
			if err != nil {
				failures.Add(1)
				t.Errorf("acquire via %s: %v", p.Name, err)
				continue
			}
			owner, _ := out["owner"].(string)
			mu.Lock()
			answers = append(answers, answer{at: start, code: code, fallback: out["fallback"] == true, owner: owner, took: time.Since(start)})
			mu.Unlock()
			time.Sleep(5 * time.Millisecond) // the workers' pace, not a wait
		}
	})
	// count is how many answers so far pass keep.
	count := func(keep func(answer) bool) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers {
			if keep(a) {
				n++
			}
		}
		return n
	}
	eventually(t, 10*time.Second, "20 answers before the crash", func() bool {
		return count(func(answer) bool { return true }) >= 20
	})
	killedAt := time.Now()
	c.Kill(victim)
	converged := c.WaitConverged(30 * time.Second)
	convergedAt := time.Now()
	eventually(t, 10*time.Second, "20 answers from a new owner once the ring converged", func() bool {
		return count(func(a answer) bool { return !a.at.Before(convergedAt) && !a.fallback && a.owner != victim.Name }) >= 20
	})
	halt()

	var before, during, after, slow int
	var maxTook time.Duration
	for _, a := range answers {
		if a.code >= 500 || (a.code != 200 && a.code != 429) {
			t.Fatalf("answer %d during the crash", a.code)
		}
		maxTook = max(maxTook, a.took)
		if a.took > 1200*time.Millisecond { // a refused connection fails over at once; this is scheduling slack
			slow++
		}
		switch {
		case a.at.Add(a.took).Before(killedAt):
			before++
			if a.fallback {
				t.Errorf("fallback before the crash")
			}
		case a.fallback:
			during++
		case a.owner != victim.Name:
			after++
		}
	}
	if slow > 0 {
		t.Errorf("%d answers took longer than 1.2s (max %v)", slow, maxTook)
	}
	if before == 0 || during == 0 || after == 0 {
		t.Fatalf("answers before the crash %d, by fallback %d, by a new owner %d: want all three phases", before, during, after)
	}
	t.Logf("%d answers, none 5xx, slowest %v; %d before the kill, %d by the degraded fallback, %d by the new owner; ring converged %v after the kill",
		len(answers), maxTook, before, during, after, converged)
}

// TestClusterDecidesOnEventLoops: with the shipped defaults (event loops
// automatic), a tenant's owner answers its calls on an event loop,
// exactly: every acquire sent to it on one connection is counted by its
// tokenring_http_loop_answers_total, and its limit holds. A node that is
// not the owner forwards the call, and its connection leaves the loop for
// a goroutine (tokenring_http_loop_handovers_total{why="declined"}).
func TestClusterDecidesOnEventLoops(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, clusterConfig, steady...)
	name := ownerOf(t, c.Procs[0], "rpm300")
	var owner, other *Proc
	for _, p := range c.Procs {
		switch {
		case p.Name == name:
			owner = p
		case other == nil:
			other = p
		}
	}
	if owner == nil {
		t.Fatalf("rpm300's owner %q is no node of the cluster", name)
	}
	metric := func(p *Proc, name string) float64 {
		t.Helper()
		v, ok, err := metricValue(p, name)
		if err != nil || !ok {
			t.Fatalf("%s on %s: %v (found: %v)", name, p.Name, err, ok)
		}
		return v
	}
	const answers, declined = "tokenring_http_loop_answers_total", `tokenring_http_loop_handovers_total{why="declined"}`
	answered0, declined0 := metric(owner, answers), metric(owner, declined)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	body := `{"tenant":"rpm300","prompt_tokens":1,"max_tokens":1}`
	allowed := 0
	for i := range 310 {
		code, out, err := Post(context.Background(), client, owner.URL()+"/v1/acquire", body)
		if err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
		if out["owner"] != owner.Name {
			t.Fatalf("acquire %d at %s decided by %v", i, owner.Name, out["owner"])
		}
		if code == http.StatusOK {
			allowed++
		}
	}
	if allowed != 300 {
		t.Fatalf("%d of 310 admitted at the owner, want exactly its limit, 300", allowed)
	}
	if got := metric(owner, answers) - answered0; got != 310 {
		t.Errorf("the owner answered %v of its 310 calls on its event loop, want all", got)
	}
	if got := metric(owner, declined) - declined0; got != 0 {
		t.Errorf("the owner handed %v connections over, want none", got)
	}
	otherDeclined := metric(other, declined)
	code, out, err := Post(context.Background(), client, other.URL()+"/v1/acquire", body)
	if err != nil || code != http.StatusTooManyRequests || out["owner"] != owner.Name {
		t.Fatalf("at %s, the limit spent: %d %v %v, want a 429 decided by %s", other.Name, code, out, err, owner.Name)
	}
	if got := metric(other, declined) - otherDeclined; got != 1 {
		t.Errorf("%s, forwarding: %v connections handed over, want 1", other.Name, got)
	}
}
