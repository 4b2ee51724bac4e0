package router

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
)

// downCluster is a three-member cluster whose other owners are unreachable:
// every call fails the way a refused connection does.
type downCluster struct{ ring *ring.Ring }

func (d downCluster) Do(context.Context, *node.Call) (node.Answer, error) {
	return node.Answer{}, fmt.Errorf("peer 127.0.0.1:1: %w", node.ErrPeerDown)
}
func (d downCluster) Ring() *ring.Ring { return d.ring }
func (d downCluster) Name() string     { return "n1" }

func startDown(t *testing.T, policy FallbackPolicy, l limiter.Limits, now func() time.Time) (*server, *prometheus.Registry) {
	t.Helper()
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(downCluster{rg}, Config{
		Limits:   func(string) limiter.Limits { return l },
		Fallback: policy,
		Registry: reg,
		Gatherer: reg,
		Now:      now,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	return &server{Server: hs}, reg
}

// Degraded: this node admits at most its share (limit ÷ 3 live members) in
// any window, flags every answer, and counts the fallback decisions.
func TestFallbackDegradedAdmitsStrictShare(t *testing.T) {
	clock := newFakeClock()
	s, reg := startDown(t, Degraded, limiter.Limits{Requests: 30, Tokens: 1 << 40, Window: time.Minute}, clock.Now)
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
	// share = 30/3 = 10 per window: a burst gets half at once (burst 5) and
	// the rest refills evenly over the window, so no window ever holds
	// more than 10.
	if got := count(100); got != 5 {
		t.Fatalf("burst admitted %d, want 5", got)
	}
	total := 5
	for range 12 { // one window in 5 s steps
		clock.Advance(5 * time.Second)
		total += count(10)
	}
	if total != 10 {
		t.Fatalf("admitted %d over one window, want the share of 10", total)
	}
	if got := counter(t, reg, "tokenring_fallback_decisions_total", "degraded", "allowed"); got != 10 {
		t.Fatalf("fallback allowed counter %v, want 10", got)
	}
}

func TestFallbackOpenAndClosed(t *testing.T) {
	for _, tc := range []struct {
		policy  FallbackPolicy
		allowed bool
	}{{Open, true}, {Closed, false}} {
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
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i, lp := range m.GetLabel() {
				if i >= len(labels) || lp.GetValue() != labels[i] {
					continue metric
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// Degraded slots are this node's share of the concurrency limit and come
// back when the fallback lease completes.
func TestFallbackDegradedSlots(t *testing.T) {
	s, _ := startDown(t, Degraded, limiter.Limits{Concurrency: 30}, nil)
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

// An owner that accepts connections but never answers (hung, not crashed)
// costs one forward_timeout: then the fallback answers, flagged.
func TestFallbackAfterForwardTimeout(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 300} }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, ReplicationInterval: -1})
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
		if m, _ := rg.Owner(TenantKey(fmt.Sprint("t", i))); m.Name == "n2" {
			tenant = fmt.Sprint("t", i)
		}
	}
	const timeout = 50 * time.Millisecond
	r, err := New(n, Config{Limits: limits, ForwardTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(r)
	defer hs.Close()
	s := &server{Server: hs}
	start := time.Now()
	got := s.acquire(t, fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1}`, tenant))
	took := time.Since(start)
	if !got.Allowed || !got.Fallback {
		t.Fatalf("answer with a hung owner: %+v, want a flagged degraded admission", got)
	}
	if took < timeout {
		t.Fatalf("answered in %v, before forward_timeout %v: the owner was not asked", took, timeout)
	}
	t.Logf("hung owner: fallback answer after %v (forward_timeout %v)", took, timeout)
}
