package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

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

// noLeaks fails t if a goroutine started during the test is still running
// after its cleanup. Call it first: cleanups run last registered first, so
// its check runs after the cluster's and the clients' cleanups. (The
// package's TestMain builds tokenringd and cannot use goleak.VerifyTestMain
// as well, hence a check per test.)
func noLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// inProcClient is an HTTP client for many concurrent requests; its idle
// connections are closed by t.Cleanup, before the cluster stops.
func inProcClient(t *testing.T) *http.Client {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// ownerAt asks member i of c who owns tenant, and at which partition.
func ownerAt(t *testing.T, client *http.Client, c *InProc, i int, tenant string) (owner string, partition int) {
	t.Helper()
	resp, err := client.Get(c.URL(i) + "/admin/owner?tenant=" + tenant)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Owner     string `json:"owner"`
		Partition int    `json:"partition"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("owner of %s at %s: %s", tenant, c.Member(i).Name, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Owner, out.Partition
}

func TestInProcExactLimits(t *testing.T) {
	noLeaks(t)
	c := NewInProc(t, 3, inProcLimits, WithForwardTimeout(500*time.Millisecond))
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
	t.Logf("%d concurrent acquires over 3 members in %v: %d allowed, %v refused, owner %v", n, took, allowed, refused, owners)
}

func TestInProcOwnershipAgrees(t *testing.T) {
	noLeaks(t)
	c := NewInProc(t, 3, inProcLimits)
	client := inProcClient(t)

	type where struct {
		owner     string
		partition int
	}
	const tenants = 1000
	views := make([][]where, 3) // views[member][tenant]
	var wg sync.WaitGroup
	for i := range 3 {
		views[i] = make([]where, tenants)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range tenants {
				o, p := ownerAt(t, client, c, i, fmt.Sprintf("tenant-%d", k))
				views[i][k] = where{o, p}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
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
	t.Logf("join: joiner ready in %v, 4 members on every member %v later; graceful leave took %v, 3 members on every member %v after it returned",
		ready, joined, leaving, left)
}

func TestInProcOwnerCrashFallsBack(t *testing.T) {
	noLeaks(t)
	const forwardTimeout = 100 * time.Millisecond
	c := NewInProc(t, 3, inProcLimits, WithForwardTimeout(forwardTimeout), WithFallback(router.Degraded))
	client := inProcClient(t)
	victim := c.Member(1).Name
	var tenant string
	for k := 0; tenant == "" && k < 1000; k++ {
		if tn := fmt.Sprintf("tenant-%d", k); ownerOnly(ownerAt(t, client, c, 0, tn)) == victim {
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
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	time.Sleep(300 * time.Millisecond)
	crashAt := time.Now()
	c.Crash(1)
	crashed := time.Now() // the victim is gone: nothing it says can arrive after this
	c.WaitConverged(8 * time.Second)
	convergedAt := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}

	newOwner, _ := ownerAt(t, client, c, 0, tenant)
	if o, _ := ownerAt(t, client, c, 2, tenant); o != newOwner || newOwner == victim {
		t.Fatalf("new owner of %s: %s at %s, %s at %s (victim %s)", tenant, newOwner, c.Member(0).Name, o, c.Member(2).Name, victim)
	}
	var before, during, byNew, after int
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
	t.Logf("%d answers, all 200/429, slowest %v: %d from %s before the crash, %d by fallback (the last %v after the crash), %d from the new owner %s (%d after convergence); every ring dropped %s %v after the crash",
		len(answers), slowest, before, victim, during, lastFallback.Sub(crashAt), byNew, newOwner, after, victim, convergedAt.Sub(crashAt))
}

// ownerOnly drops the partition of ownerAt's answer.
func ownerOnly(owner string, _ int) string { return owner }
