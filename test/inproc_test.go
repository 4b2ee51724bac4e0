package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// inProcLimits are the limits of the in-process tests: tenant "rpm300" may
// make 300 requests a minute; every other key is practically unlimited.
func inProcLimits(key string) limiter.Limits {
	l := limiter.Limits{Requests: 100_000, Tokens: 100_000_000, Concurrency: 100_000, Window: time.Minute, LeaseTTL: 2 * time.Minute}
	if key == router.TenantKey("rpm300") {
		l.Requests = 300
	}
	return l
}

// steadyGossip slows failure detection down to memberlist's LAN timings
// (probe every second, 500ms timeout, suspicion 4 probe intervals × log10(n)).
// DefaultLocalConfig declares a member dead after about 300ms without an
// answer; 900 concurrent requests under the race detector can starve the
// process's gossip goroutines that long, and a member falsely declared dead
// loses its keys to a new owner, which starts from an empty window (there
// is no handoff yet): the exact counts double. Tests that load the cluster
// but do not crash members use this.
func steadyGossip(g *gossip.Config) {
	lan := gossip.DefaultLANConfig()
	g.ProbeInterval, g.ProbeTimeout = lan.ProbeInterval, lan.ProbeTimeout
	g.SuspicionMult, g.SuspicionMaxTimeoutMult = lan.SuspicionMult, lan.SuspicionMaxTimeoutMult
}

// noLeaks fails t if a goroutine started during the test is still running
// after its cleanup. Call it first: cleanups run last registered first, so
// its check runs after the cluster's and the clients' cleanups. (The
// package's TestMain builds tokenringd and cannot use goleak.VerifyTestMain
// as well, hence a check per test.) A memberlist probe under way when
// gossip shuts down ends by itself within the probe interval (a second on
// LAN timings), so the check waits that long before it reports.
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		for end := time.Now().Add(2 * time.Second); goleak.Find(opt) != nil && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond)
		}
		goleak.VerifyNone(t, opt)
	})
}

// inProcClient is an HTTP client for many concurrent requests; its idle
// connections are closed by t.Cleanup, before the cluster stops.
func inProcClient(t *testing.T) *http.Client {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// ownerAt asks member i of c who owns tenant, and at which partition.
func ownerAt(client *http.Client, c *InProc, i int, tenant string) (owner string, partition int, err error) {
	resp, err := client.Get(c.URL(i) + "/admin/owner?tenant=" + tenant)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("owner of %s at %s: %s", tenant, c.Member(i).Name, resp.Status)
	}
	var out struct {
		Owner     string `json:"owner"`
		Partition int    `json:"partition"`
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out.Owner, out.Partition, err
}

// mustOwner is ownerAt for the test's goroutine: it drops the partition and
// fails the test on error.
func mustOwner(t *testing.T, client *http.Client, c *InProc, i int, tenant string) string {
	t.Helper()
	owner, _, err := ownerAt(client, c, i, tenant)
	if err != nil {
		t.Fatal(err)
	}
	return owner
}

func TestInProcExactLimits(t *testing.T) {
	noLeaks(t)
	// Every request is in flight at once, and the 900 clients, 3 HTTP
	// servers and 3 nodes share one Go scheduler: a forward waits behind
	// hundreds of runnable goroutines at each of its hops (measured under
	// -race on 2 busy cores: 250ms to 1s, 15 to 250ms without -race). A
	// forward that times out falls back, and this test counts exact
	// admissions, not fallbacks, so the timeout is far above that.
	c := NewInProc(t, 3, inProcLimits, WithForwardTimeout(5*time.Second), WithGossip(steadyGossip))
	client := inProcClient(t)

	const n = 900
	type reply struct {
		code int
		out  map[string]any
		err  error
	}
	replies := make([]reply, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			r := &replies[i]
			r.code, r.out, r.err = Post(context.Background(), client, c.URL(i%3)+"/v1/acquire",
				`{"tenant":"rpm300","prompt_tokens":1,"max_tokens":1}`)
		}()
	}
	start := time.Now()
	close(gate)
	wg.Wait()
	took := time.Since(start)

	allowed, refused, fallback := 0, map[string]int{}, 0
	owners := map[string]int{}
	for i, r := range replies {
		switch {
		case r.err != nil:
			t.Fatalf("acquire %d: %v", i, r.err)
		case r.code == http.StatusOK && r.out["allowed"] == true:
			allowed++
		case r.code == http.StatusTooManyRequests && r.out["allowed"] == false:
			refused[fmt.Sprint(r.out["reason"])]++
			if ra, _ := r.out["retry_after_ms"].(float64); ra <= 0 {
				t.Errorf("acquire %d: refusal without a positive retry_after_ms: %v", i, r.out)
			}
		default:
			t.Fatalf("acquire %d: %d %v", i, r.code, r.out)
		}
		if r.out["fallback"] == true {
			fallback++
		}
		owners[fmt.Sprint(r.out["owner"])]++
	}
	if allowed != 300 || refused["requests"] != 600 || len(refused) != 1 || fallback != 0 {
		t.Fatalf("allowed %d, refused %v, fallback %d, answers by owner %v: want exactly 300 allowed, 600 refused for requests, none by fallback, all from one owner",
			allowed, refused, fallback, owners)
	}
	if len(owners) != 1 {
		t.Fatalf("answers came from owners %v, want one", owners)
	}

	// The owner's window holds exactly the admitted requests, whichever
	// member is asked.
	for i := range 3 {
		var st struct {
			Owner  string `json:"owner"`
			Limits struct {
				Requests struct{ Limit, Remaining int64 } `json:"requests"`
			} `json:"limits"`
		}
		if err := GetJSON(c.URL(i)+"/v1/tenants/rpm300", &st); err != nil {
			t.Fatal(err)
		}
		if st.Limits.Requests.Limit != 300 || st.Limits.Requests.Remaining != 0 || owners[st.Owner] != n {
			t.Fatalf("status via %s: owner %s, requests %+v; want owner of all answers (%v), limit 300, remaining 0",
				c.Member(i).Name, st.Owner, st.Limits.Requests, owners)
		}
	}
	t.Logf("%d concurrent acquires over 3 members in %v: %d allowed, %v refused, owner %v; forwarded acquires' latency: %s",
		n, took, allowed, refused, owners, forwardLatency(t, c))
}

func TestInProcOwnershipAgrees(t *testing.T) {
	noLeaks(t)
	c := NewInProc(t, 3, inProcLimits, WithGossip(steadyGossip))
	client := inProcClient(t)

	type where struct {
		owner     string
		partition int
	}
	const tenants = 1000
	const workers = 8           // per member
	views := make([][]where, 3) // views[member][tenant]
	errs := make(chan error, 3*workers)
	var wg sync.WaitGroup
	for i := range 3 {
		views[i] = make([]where, tenants)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := w; k < tenants; k += workers {
					o, p, err := ownerAt(client, c, i, fmt.Sprintf("tenant-%d", k))
					if err != nil {
						errs <- err
						return
					}
					views[i][k] = where{o, p}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	perOwner := map[string]int{}
	for k := range tenants {
		for i := 1; i < 3; i++ {
			if views[i][k] != views[0][k] {
				t.Fatalf("tenant-%d: %+v at %s, %+v at %s", k, views[0][k], c.Member(0).Name, views[i][k], c.Member(i).Name)
			}
		}
		perOwner[views[0][k].owner]++
	}
	if len(perOwner) != 3 {
		t.Fatalf("%d tenants spread over %d owners: %v", tenants, len(perOwner), perOwner)
	}
	t.Logf("%d tenants, the same owner on all 3 members; tenants per owner: %v", tenants, perOwner)
}

func TestInProcJoinLeave(t *testing.T) {
	noLeaks(t)
	c := NewInProc(t, 3, inProcLimits)
	before, err := c.Ring(c.Member(0))
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	i := c.Add()
	ready := time.Since(start)
	joined := c.WaitConverged(5 * time.Second)
	if live := len(c.Live()); live != 4 {
		t.Fatalf("%d live members after the join, want 4", live)
	}
	four, err := c.Ring(c.Member(i))
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for _, m := range four.Members {
		sum += m.Partitions
		if m.Partitions == 0 {
			t.Errorf("%s owns no partition in a 4-member ring", m.Name)
		}
	}
	if len(four.Members) != 4 || sum != four.PartitionCount {
		t.Fatalf("ring after the join: %+v", four)
	}

	start = time.Now()
	c.Leave(i)
	leaving := time.Since(start)
	left := c.WaitConverged(5 * time.Second)
	after, err := c.Ring(c.Member(0))
	if err != nil {
		t.Fatal(err)
	}
	// A ring is a function of its members: the three that stayed are back
	// to the ring they had before the join.
	if after.Version != before.Version || len(after.Members) != 3 {
		t.Fatalf("ring after the leave %s with %d members, want the ring before the join %s", after.Version, len(after.Members), before.Version)
	}
	const budget = 5 * time.Second // in-process, loopback, steady gossip
	if ready > budget || leaving > budget {
		t.Fatalf("joiner ready in %v, graceful leave took %v; budget %v each", ready, leaving, budget)
	}
	t.Logf("join: joiner ready in %v, 4 members on every member %v later; graceful leave took %v, 3 members on every member %v after it returned",
		ready, joined, leaving, left)
}

func TestInProcOwnerCrashFallsBack(t *testing.T) {
	noLeaks(t)
	const forwardTimeout = 100 * time.Millisecond
	c := NewInProc(t, 3, inProcLimits, WithForwardTimeout(forwardTimeout), WithFallback(fallback.Degraded))
	client := inProcClient(t)
	victim := c.Member(1).Name
	var tenant string
	for k := 0; tenant == "" && k < 1000; k++ {
		if tn := fmt.Sprintf("tenant-%d", k); mustOwner(t, client, c, 0, tn) == victim {
			tenant = tn
		}
	}
	if tenant == "" {
		t.Fatalf("no tenant of 1000 owned by %s", victim)
	}

	type answer struct {
		start, end time.Time
		via        string
		code       int
		fallback   bool
		owner      string
	}
	var mu sync.Mutex // guards answers
	var answers []answer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	survivors := []int{0, 2}
	body := fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tenant)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				i := survivors[(w+k)%2]
				start := time.Now()
				code, out, err := Post(context.Background(), client, c.URL(i)+"/v1/acquire", body)
				end := time.Now()
				if err != nil {
					t.Errorf("acquire via %s: %v", c.Member(i).Name, err)
					return
				}
				owner, _ := out["owner"].(string)
				mu.Lock()
				answers = append(answers, answer{start, end, c.Member(i).Name, code, out["fallback"] == true, owner})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the workers' pace, not a wait
			}
		}()
	}
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
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(halt) // a Fatal below must not leave the workers running
	waitFor := func(what string, keep func(answer) bool) {
		t.Helper()
		eventually(t, 10*time.Second, what, func() bool { return count(keep) >= 20 })
	}

	waitFor("20 answers before the crash", func(answer) bool { return true })
	crashAt := time.Now()
	c.Crash(1)
	crashed := time.Now() // the victim is gone: nothing it says can arrive after this
	c.WaitConverged(8 * time.Second)
	convergedAt := time.Now()
	waitFor("20 answers from a new owner once every ring dropped the victim", func(a answer) bool {
		return !a.start.Before(convergedAt) && !a.fallback && a.owner != victim
	})
	halt()
	if t.Failed() {
		return
	}

	newOwner := mustOwner(t, client, c, 0, tenant)
	if o := mustOwner(t, client, c, 2, tenant); o != newOwner || newOwner == victim {
		t.Fatalf("new owner of %s: %s at %s, %s at %s (victim %s)", tenant, newOwner, c.Member(0).Name, o, c.Member(2).Name, victim)
	}
	var before, during, byNew, after, bySlice int
	var slowest time.Duration
	var lastFallback time.Time
	for _, a := range answers {
		took := a.end.Sub(a.start)
		slowest = max(slowest, took)
		if a.code != http.StatusOK && a.code != http.StatusTooManyRequests {
			t.Fatalf("answer %d via %s at +%v", a.code, a.via, a.start.Sub(crashAt))
		}
		if took > forwardTimeout+time.Second {
			t.Errorf("answer via %s took %v, more than forward_timeout + 1s", a.via, took)
		}
		switch {
		case a.end.Before(crashAt):
			before++
			if a.fallback || a.owner != victim {
				t.Fatalf("before the crash: fallback %v, owner %s; want %s's own answer", a.fallback, a.owner, victim)
			}
		case a.start.Before(crashed):
			// In flight during the crash: any of the three outcomes.
		case a.fallback:
			during++
			lastFallback = a.end
			if !a.start.Before(convergedAt) {
				t.Errorf("fallback via %s at +%v, after every ring had dropped %s (+%v)",
					a.via, a.start.Sub(crashAt), victim, convergedAt.Sub(crashAt))
			}
		case a.owner == victim && a.start.Before(convergedAt):
			// An admission the victim granted before the crash, in a hot
			// key's slice (node/allot.go), handed out by a survivor that
			// had not yet seen the owner's connection drop: counted by
			// the victim when granted, so no more than async replication
			// may lose anyway. Never once the rings dropped the victim.
			bySlice++
		default:
			if a.owner != newOwner {
				t.Fatalf("answer via %s at +%v from %s after the crash, want the new owner %s",
					a.via, a.start.Sub(crashAt), a.owner, newOwner)
			}
			byNew++
			if !a.start.Before(convergedAt) {
				after++
			}
		}
	}
	if before == 0 || during == 0 || after == 0 {
		t.Fatalf("answers before the crash %d, by fallback %d, by the new owner once converged %d: want all three phases",
			before, during, after)
	}
	t.Logf("%d answers, all 200/429, slowest %v: %d from %s before the crash, %d by fallback (the last %v after the crash), %d from its slices after it, %d from the new owner %s (%d after convergence); every ring dropped %s %v after the crash",
		len(answers), slowest, before, victim, during, lastFallback.Sub(crashAt), bySlice, byNew, newOwner, after, victim, convergedAt.Sub(crashAt))
}

// forwardLatency summarises the routers' tokenring_call_seconds histogram
// for forwarded acquires, over every live member: how many, and how many
// took longer than each bucket bound from 15ms up.
func forwardLatency(t *testing.T, c *InProc) string {
	t.Helper()
	var count uint64
	above := map[float64]uint64{}
	var bounds []float64
	for _, m := range c.Live() {
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "tokenring_call_seconds" {
				continue
			}
			for _, metric := range mf.GetMetric() {
				if !hasLabels(metric, "op", "acquire", "where", "forwarded") {
					continue
				}
				h := metric.GetHistogram()
				count += h.GetSampleCount()
				bounds = bounds[:0]
				for _, b := range h.GetBucket() {
					bounds = append(bounds, b.GetUpperBound())
					above[b.GetUpperBound()] += h.GetSampleCount() - b.GetCumulativeCount()
				}
			}
		}
	}
	s := fmt.Sprintf("%d forwarded", count)
	for _, b := range bounds {
		if b >= 0.015 {
			s += fmt.Sprintf(", %d over %v", above[b], time.Duration(b*float64(time.Second)))
		}
	}
	return s
}

func hasLabels(m *dto.Metric, kv ...string) bool {
	want := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
			return false
		}
	}
	return true
}

// A member cut off from the others (both crash: it hears from no
// majority, its lease lapses and it fences itself) falls back for a key
// it owned from its own count: the degraded share is what it had left ÷
// the members, not the whole limit ÷ the members.
func TestInProcCutOffOwnerFallsBackFromItsCount(t *testing.T) {
	noLeaks(t)
	limits := func(key string) limiter.Limits {
		l := inProcLimits(key)
		if key == router.TenantKey("rpm30") {
			l.Requests = 30
		}
		return l
	}
	c := NewInProc(t, 3, limits, WithFallback(fallback.Degraded), WithGossip(steadyGossip)) // the shipped LAN timings
	client := inProcClient(t)
	owner := mustOwner(t, client, c, 0, "rpm30")
	i := 0
	for c.Member(i).Name != owner {
		i++
	}
	acquire := func() (admitted, fallback bool) {
		t.Helper()
		code, out, err := Post(context.Background(), client, c.URL(i)+"/v1/acquire", `{"tenant":"rpm30","prompt_tokens":1,"max_tokens":1}`)
		if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
			t.Fatalf("acquire via %s: %d %v", owner, code, err)
		}
		return code == http.StatusOK, out["fallback"] == true
	}
	for range 12 {
		if ok, fb := acquire(); !ok || fb {
			t.Fatalf("the owner's own admission: admitted %v, fallback %v", ok, fb)
		}
	}
	for k := range c.Len() {
		if k != i {
			c.Crash(k)
		}
	}
	nd := c.Member(i).Node
	deadline := time.Now().Add(10 * time.Second)
	for nd.Mandated() && !nd.Fenced() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if nd.Mandated() && !nd.Fenced() {
		t.Fatal("the cut-off owner still decides 10 s after the others crashed")
	}
	admitted := 0
	for range 40 {
		ok, fb := acquire()
		if ok && !fb {
			t.Fatal("admitted without a majority, not as a fallback")
		}
		if ok {
			admitted++
		}
	}
	if admitted != 6 {
		t.Fatalf("the cut-off owner's fallback admitted %d, want (30 - 12) ÷ 3 members = 6", admitted)
	}
}
