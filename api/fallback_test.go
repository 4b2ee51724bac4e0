package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// downCluster is a three-member cluster whose other owners are unreachable:
// every call fails the way a refused connection does.
type downCluster struct{ ring *ring.Ring }

func (d downCluster) Do(context.Context, node.Call) (node.Answer, error) {
	return node.Answer{}, fmt.Errorf("peer 127.0.0.1:1: %w", node.ErrPeerDown)
}
func (d downCluster) Ring() *ring.Ring { return d.ring }
func (d downCluster) Name() string     { return "n1" }

func startDown(t *testing.T, policy fallback.Policy, l limiter.Limits, now func() time.Time) (*server, *prometheus.Registry) {
	t.Helper()
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := newAPI(t, downCluster{rg}, router.Config{
		Limits:   func(string) limiter.Limits { return l },
		Fallback: policy,
		Registry: reg,
		Now:      now,
	}, Config{Now: now})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	return &server{Server: hs}, reg
}

// Degraded, for a key never reported by its owner: this node admits at most
// its share (limit ÷ 3 live members) in any window, all of it at once,
// flags every answer, counts the fallback decisions, and records each
// admission as a debt (never repaid here: the owner stays down).
func TestFallbackDegradedAdmitsStrictShare(t *testing.T) {
	clock := newFakeClock()
	s, reg := startDown(t, fallback.Degraded, limiter.Limits{Requests: 30, Tokens: 1 << 40, Window: time.Minute}, clock.Now)
	count := func(n int) (allowed int) {
		for range n {
			r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
			if r.Code != 200 && r.Code != 429 {
				t.Fatalf("code %d: %+v", r.Code, r)
			}
			if !r.Fallback {
				t.Fatalf("a degraded answer is not flagged: %+v", r)
			}
			if r.Allowed {
				allowed++
			} else if r.Reason != "requests" || r.RetryAfterMS <= 0 {
				t.Fatalf("degraded refusal: %+v", r)
			}
		}
		return allowed
	}
	// share = 30/3 = 10 per window.
	if got := count(100); got != 10 {
		t.Fatalf("burst admitted %d, want the share of 10", got)
	}
	total := 10
	for range 12 { // one window in 5 s steps
		clock.Advance(5 * time.Second)
		total += count(10)
	}
	if total != 10 {
		t.Fatalf("admitted %d over one window, want the share of 10", total)
	}
	// The window's 6 s buckets: the first admissions (2 s into theirs)
	// leave at 64 s.
	clock.Advance(5 * time.Second)
	if got := count(100); got != 10 {
		t.Fatalf("after the window admitted %d, want the share of 10 again", got)
	}
	if got := counter(t, reg, "tokenring_fallback_decisions_total", "degraded", "allowed"); got != 20 {
		t.Fatalf("fallback allowed counter %v, want 20", got)
	}
	if got := counter(t, reg, "tokenring_fallback_debts_recorded_total"); got != 20 {
		t.Fatalf("debts recorded %v, want 20", got)
	}
}

func TestFallbackOpenAndClosed(t *testing.T) {
	for _, tc := range []struct {
		policy  fallback.Policy
		allowed bool
	}{{fallback.Open, true}, {fallback.Closed, false}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			s, _ := startDown(t, tc.policy, limiter.Limits{Requests: 3}, nil)
			for range 10 {
				r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
				if r.Allowed != tc.allowed || !r.Fallback || (!tc.allowed && (r.Code != 429 || r.RetryAfterMS <= 0)) {
					t.Fatalf("%s: %+v", tc.policy, r)
				}
			}
		})
	}
}

// counter returns the value of the counter name with the given label values.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	return promtest.Counter(t, reg, name, labels...)
}

// Degraded slots are this node's share of the concurrency limit and come
// back when the fallback lease completes.
func TestFallbackDegradedSlots(t *testing.T) {
	s, _ := startDown(t, fallback.Degraded, limiter.Limits{Concurrency: 30}, nil)
	var leases []string
	for range 10 {
		r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
		if !r.Allowed || !r.Fallback {
			t.Fatalf("acquire within the share of 30/3: %+v", r)
		}
		leases = append(leases, r.Lease)
	}
	if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); r.Allowed || r.Reason != "concurrency" {
		t.Fatalf("11th acquire: %+v, want a concurrency refusal", r)
	}
	if r := s.complete(t, "acme", leases[0], ""); !r.Settled {
		t.Fatalf("complete of a fallback lease: %+v", r)
	}
	if r := s.complete(t, "acme", leases[0], ""); r.Settled {
		t.Fatalf("second complete of a fallback lease: %+v", r)
	}
	if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); !r.Allowed {
		t.Fatalf("acquire after a complete: %+v", r)
	}
}

// slack is the real time a test allows the router for an HTTP round trip
// on top of what its logic waits: scheduling on a busy 2-core machine under
// -race. A router that added 40×forward_timeout (600ms) of its own would fail.
const slack = 250 * time.Millisecond

// stepClock is one fake clock for the node's liveness timers (After) and
// the router's clock (Now): timers fire only when the test advances it.
type stepClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []stepTimer
}

type stepTimer struct {
	at time.Time
	ch chan time.Time
}

func newStepClock() *stepClock { return &stepClock{now: time.Unix(1_700_000_000, 0)} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, stepTimer{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock by d, fires every timer due by then and says how
// many fired.
func (c *stepClock) Advance(d time.Duration) (fired int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if !tm.at.After(c.now) {
			tm.ch <- tm.at
			fired++
		} else {
			kept = append(kept, tm)
		}
	}
	c.timers = kept
	return fired
}

// armed counts the pending timers, and those that fire at exactly at.
func (c *stepClock) armed(at time.Time) (all, exactly int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tm := range c.timers {
		if tm.at.Equal(at) {
			exactly++
		}
	}
	return len(c.timers), exactly
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// histogramSum returns the sum and count of the histogram name with the
// given label values (0, 0 when there is none).
func histogramSum(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (float64, uint64) {
	t.Helper()
	h := promtest.Sample(t, reg, name, labels...).GetHistogram()
	return h.GetSampleSum(), h.GetSampleCount()
}

// An owner that accepts connections but never answers (hung, not crashed)
// is unreachable: the node probes it after ProbeAfter (forward_timeout),
// and after Liveness of silence the flagged fallback answers. With the
// node's timers and the router's clock on one fake clock, the fail-over
// takes exactly ProbeAfter+Liveness: the request is still unanswered a
// nanosecond before, answered at that instant, and the router measured
// exactly that long for the failed call, far below the cap.
//
// The node's ownership-transfer messages to the hung member share the
// connection (and the fake clock) with the acquire: every call on it,
// sent at fake time 0, checks at ProbeAfter and declares the silent
// connection dead at ProbeAfter+Liveness; calls sent later check later, so
// nothing can fail the connection sooner.
func TestFallbackHungOwnerCostsProbeAndLiveness(t *testing.T) {
	const (
		probeAfter = 15 * time.Millisecond
		liveness   = time.Second
	)
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var conns []net.Conn
	var mu sync.Mutex
	var sawKey atomic.Value // the stream holds this key: the acquire is on the connection
	sawKey.Store("")
	var readers sync.WaitGroup
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			readers.Add(1)
			go func() { // read everything, answer nothing
				defer readers.Done()
				var seen []byte
				buf := make([]byte, 64<<10)
				for {
					k, err := c.Read(buf)
					seen = append(seen, buf[:k]...)
					if i := strings.Index(string(seen), "t:t"); i >= 0 && len(seen) >= i+64 {
						sawKey.Store(string(seen[i : i+64]))
					}
					if len(seen) > 1<<20 {
						seen = seen[len(seen)-1024:]
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	defer func() {
		hung.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		readers.Wait()
	}()
	clk := newStepClock()
	t0 := clk.Now()
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 300} }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, ReplicationInterval: -1,
		Forward: node.ForwardConfig{ProbeAfter: probeAfter, Liveness: liveness, After: clk.After}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1", Peer: n.PeerAddr()}, {Name: "n2", Peer: hung.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	n.SetRing(rg)
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if m, _ := rg.Owner(router.TenantKey(fmt.Sprint("t", i))); m.Name == "n2" {
			tenant = fmt.Sprint("t", i)
		}
	}
	reg := prometheus.NewRegistry()
	r := newAPI(t, n, router.Config{Limits: limits, ForwardTimeout: probeAfter, Now: clk.Now, Registry: reg}, Config{Now: clk.Now})
	defer r.router.Close()
	hs := httptest.NewServer(r)
	defer hs.Close()
	s := &server{Server: hs}
	got := make(chan reply, 1)
	start := time.Now()
	go func() { got <- s.acquire(t, fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1}`, tenant)) }()

	// The acquire reached the owner's connection: its first check is armed.
	waitFor(t, "the acquire at the hung owner", func() bool {
		return strings.Contains(sawKey.Load().(string), router.TenantKey(tenant))
	})
	if _, at := clk.armed(t0.Add(probeAfter)); at == 0 {
		t.Fatal("no check armed at ProbeAfter")
	}
	fired := clk.Advance(probeAfter) // every call on the connection finds it silent; one ping
	waitFor(t, "every probed call to arm its liveness check", func() bool {
		_, at := clk.armed(t0.Add(probeAfter + liveness))
		return at == fired
	})
	clk.Advance(liveness - time.Nanosecond)
	time.Sleep(20 * time.Millisecond) // room for a wrong early answer to show
	select {
	case a := <-got:
		t.Fatalf("answered before ProbeAfter+Liveness: %+v", a)
	default:
	}
	clk.Advance(time.Nanosecond)
	var a reply
	select {
	case a = <-got:
	case <-time.After(slack):
		t.Fatalf("no answer within %v of real time once ProbeAfter+Liveness was reached", slack)
	}
	if a.Code != 200 || !a.Allowed || !a.Fallback {
		t.Fatalf("answer with a hung owner: %+v, want a flagged degraded admission", a)
	}
	sum, count := histogramSum(t, reg, "tokenring_call_seconds", "acquire", "failed")
	if count != 1 || time.Duration(sum*float64(time.Second)).Round(time.Microsecond) != probeAfter+liveness {
		t.Fatalf("router measured %d failed calls taking %vs, want 1 taking exactly %v", count, sum, probeAfter+liveness)
	}
	if took := time.Since(start); took >= 2*time.Second {
		t.Fatalf("took %v of real time: the cap, not the liveness rule, ended the wait", took)
	}
}

// errCluster is a three-member cluster whose owner answers every call with
// do's result: an unreachable one, or a live one slower than the cap. It
// records the deadline the router gave the call.
type errCluster struct {
	ring     *ring.Ring
	do       func(ctx context.Context) error
	mu       sync.Mutex
	entered  []time.Time
	deadline []time.Time
}

func (e *errCluster) Do(ctx context.Context, _ node.Call) (node.Answer, error) {
	dl, _ := ctx.Deadline()
	e.mu.Lock()
	e.entered, e.deadline = append(e.entered, time.Now()), append(e.deadline, dl)
	e.mu.Unlock()
	return node.Answer{}, e.do(ctx)
}
func (e *errCluster) Ring() *ring.Ring { return e.ring }
func (e *errCluster) Name() string     { return "n1" }

// slowOwner is an owner that is alive but does not answer before the caller's
// deadline: the call ends with ctx's deadline error, as peerClient.call's does.
func slowOwner(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("peer 127.0.0.1:2: %w", ctx.Err())
}

func startErr(t *testing.T, do func(context.Context) error, maxWait time.Duration) (*server, *prometheus.Registry, *errCluster) {
	t.Helper()
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := &errCluster{ring: rg, do: do}
	r := newAPI(t, c, router.Config{
		Limits:         func(string) limiter.Limits { return limiter.Limits{Requests: 30} },
		ForwardMaxWait: maxWait,
		Registry:       reg,
	}, Config{})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	return &server{Server: hs}, reg, c
}

// counted reports whether a counter sample of name in the registry is not 0.
func counted(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	for _, m := range samples(t, reg, name) {
		if m.GetCounter().GetValue() != 0 {
			return true
		}
	}
	return false
}

// samples returns the registry's samples of metric name (none: nil).
func samples(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// A live owner slower than forward_max_wait gets no fallback: the request is
// refused with a 503 that admits nothing, the timeout is counted, and the
// call's deadline was exactly the cap (plus wait_ms).
func TestOwnerTimeoutRefusesWithoutAdmission(t *testing.T) {
	const maxWait = 50 * time.Millisecond
	s, reg, c := startErr(t, slowOwner, maxWait)
	for i, wait := range []time.Duration{0, 30 * time.Millisecond} {
		before := time.Now()
		resp, err := s.Client().Post(s.URL+"/v1/acquire", "application/json",
			strings.NewReader(fmt.Sprintf(`{"tenant":"acme","prompt_tokens":1,"wait_ms":%d}`, wait.Milliseconds())))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(before)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		want := map[string]any{"error": fmt.Sprintf("owner of t:acme did not answer within %v", maxWait+wait), "retry_after_ms": float64(1000)}
		if resp.StatusCode != http.StatusServiceUnavailable || fmt.Sprint(body) != fmt.Sprint(want) || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("slow owner: %d %v Retry-After %q, want 503 %v Retry-After 1", resp.StatusCode, body, resp.Header.Get("Retry-After"), want)
		}
		c.mu.Lock()
		entered, dl := c.entered[i], c.deadline[i]
		c.mu.Unlock()
		if dl.Before(before.Add(maxWait+wait)) || dl.After(entered.Add(maxWait+wait)) {
			t.Fatalf("call deadline %v after the request, want exactly the cap %v (between %v and %v)",
				dl.Sub(before), maxWait+wait, maxWait+wait, entered.Sub(before)+maxWait+wait)
		}
		if took < maxWait+wait || took > maxWait+wait+slack {
			t.Fatalf("answered in %v, want the cap %v (+ at most %v)", took, maxWait+wait, slack)
		}
	}
	if got := counter(t, reg, "tokenring_owner_timeouts_total"); got != 2 {
		t.Fatalf("owner timeouts counted %v, want 2", got)
	}
	if counted(t, reg, "tokenring_fallback_decisions_total") || counted(t, reg, "tokenring_decisions_total") {
		t.Fatal("a timed-out call was decided (by the fallback or otherwise)")
	}
}

// An unreachable owner (ErrPeerDown) or a key whose state is still in
// transfer (ErrTransferPending) gets the flagged fallback at once: the
// router adds no wait of its own, and counts no owner timeout.
func TestFallbackOnUnreachableNotOnTimeout(t *testing.T) {
	for _, cause := range []error{node.ErrPeerDown, node.ErrTransferPending} {
		t.Run(cause.Error(), func(t *testing.T) {
			s, reg, _ := startErr(t, func(context.Context) error { return fmt.Errorf("peer 127.0.0.1:1: %w", cause) }, time.Minute)
			start := time.Now()
			a := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
			if a.Code != 200 || !a.Allowed || !a.Fallback {
				t.Fatalf("%v: %+v, want a flagged degraded admission", cause, a)
			}
			if took := time.Since(start); took > slack {
				t.Fatalf("%v: fallback after %v, want at once (within %v)", cause, took, slack)
			}
			if got := counter(t, reg, "tokenring_fallback_decisions_total", "degraded", "allowed"); got != 1 {
				t.Fatalf("fallback counter %v, want 1", got)
			}
			if got := counter(t, reg, "tokenring_owner_timeouts_total"); got != 0 {
				t.Fatalf("owner timeouts %v, want 0", got)
			}
		})
	}
	// A deadline error that wraps ErrPeerDown too (a liveness verdict that
	// raced the cap) is unreachability: fall back.
	s, _, _ := startErr(t, func(context.Context) error {
		return fmt.Errorf("%w: %w", node.ErrPeerDown, context.DeadlineExceeded)
	}, time.Minute)
	if a := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); !a.Allowed || !a.Fallback {
		t.Fatalf("peer down and deadline: %+v, want the fallback", a)
	}
}
