package main

// -system rls against an in-process fake of Envoy's rate limit service:
// the requests the mix makes, the counts, and the connections.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mixYAML has each kind of rule the mix reads: a wildcard and a value-less
// rule for one key (tenant-valued), literal values (route), a nested list
// under a literal (model, then a tenant-valued user), a literal beside a
// tenant-valued rule (not sent), and a rule with no limit (not sent).
const mixYAML = `domain: gw
descriptors:
  - key: tenant
    value: "ent-*"
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: route
    value: /a
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
    shadow_mode: false
  - key: route
    value: /b
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: model
    value: gpt
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: whitelisted
    value: yes
`

// flat lists a request's descriptors as "key=value,key=value" strings.
func flat(req *rlsv3.RateLimitRequest) []string {
	var out []string
	for _, d := range req.GetDescriptors() {
		var es []string
		for _, e := range d.GetEntries() {
			es = append(es, e.GetKey()+"="+e.GetValue())
		}
		out = append(out, strings.Join(es, ","))
	}
	return out
}

func TestRLSMixRequests(t *testing.T) {
	m, err := parseRLSMix([]byte(mixYAML))
	if err != nil {
		t.Fatal(err)
	}
	rng := newWorkerRand(loadConfig{seed: 1}, 0)
	routes := map[string]int{}
	for ti := range 4 {
		tenant := "load-" + string(rune('0'+ti))
		for range 50 {
			req := m.request(ti, tenant, rng)
			got := flat(req)
			if req.GetDomain() != "gw" || len(got) != 3 {
				t.Fatalf("request %s %q, want domain gw and 3 descriptors", req.GetDomain(), got)
			}
			wantTenant := "tenant=" + tenant // odd tenants: the value-less rule
			if ti%2 == 0 {
				wantTenant = "tenant=ent-" + tenant // even: the wildcard's prefix
			}
			if got[0] != wantTenant || got[2] != "model=gpt,user="+tenant {
				t.Fatalf("tenant %d: %q, want %q and model=gpt,user=%s", ti, got, wantTenant, tenant)
			}
			routes[got[1]]++
		}
	}
	if len(routes) != 2 || routes["route=/a"] < 50 || routes["route=/b"] < 50 {
		t.Fatalf("routes %v: want /a and /b, each about half of 200", routes)
	}
	for _, bad := range []string{
		"descriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 1}}]", // no domain
		"domain: d\ndescriptors: [{key: a, value: b}]",                              // nothing limited
		"domain: d\ndescriptors: [{value: b, rate_limit: {unit: second}}]",          // no key
		"domain: [",
	} {
		if _, err := parseRLSMix([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// fakeRLS answers ShouldRateLimit: every third call OVER_LIMIT (its last
// descriptor over, the others OK), every seventh (not third) UNKNOWN. It
// counts calls and the connections it accepted.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls atomic.Int64
	conns atomic.Int64
	mu    sync.Mutex
	seen  map[string]int // descriptor lists seen, flattened
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := f.calls.Add(1)
	if req.GetDomain() != "gw" {
		return nil, status.Error(codes.NotFound, "domain")
	}
	f.mu.Lock()
	f.seen[strings.Join(flat(req), ";")]++
	f.mu.Unlock()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	switch {
	case n%3 == 0:
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[len(resp.Statuses)-1].Code = rlsv3.RateLimitResponse_OVER_LIMIT
	case n%7 == 0:
		resp.OverallCode = rlsv3.RateLimitResponse_UNKNOWN
	}
	return resp, nil
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startFakeRLS serves a fakeRLS on a loopback port until the test ends.
func startFakeRLS(t *testing.T) (*fakeRLS, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRLS{seen: map[string]int{}}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(countingListener{ln, &f.conns})
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return f, ln.Addr().String()
}

// -n 300 calls over 3 connections: an OVER_LIMIT is a refusal, an UNKNOWN
// an error (code 500); each descriptor's statuses are counted by its place;
// the requests are the mix's.
func TestLoadRLS(t *testing.T) {
	f, addr := startFakeRLS(t)
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(mixYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := runLoadCLI(t, "-system", "rls", "-rls", addr, "-rls-config", cfg, "-conns", "3", "-c", "6", "-n", "300", "-tenants", "4", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	// Calls 3, 6, ... 300 are over the limit (100); 7, 14, ... not those
	// are UNKNOWN (42 multiples of 7, 14 of them multiples of 21).
	want := loadResult{Requests: 300, Allowed: 172, Refused: 100, Errors: 28,
		Codes: map[string]int{"200": 172, "429": 100, "500": 28}, Route: "rr", Workers: 6}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	if want := "an answer with code 500, neither an admission nor a refusal"; res.FirstError != want {
		t.Errorf("first error %q, want %q", res.FirstError, want)
	}
	wantDesc := []descriptorCount{{"tenant", 300, 0}, {"route", 300, 0}, {"model", 200, 100}}
	if !slices.Equal(res.Descriptors, wantDesc) {
		t.Errorf("descriptors %+v, want %+v", res.Descriptors, wantDesc)
	}
	if n := f.conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) != 8 { // 4 tenants × 2 routes
		t.Errorf("%d distinct requests, want 8: %v", len(f.seen), f.seen)
	}
}

// Bad -system rls flags are usage errors; a config that cannot be read or
// has nothing to send, and a server that refuses connections, fail the run
// before it starts.
func TestLoadRLSFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-system", "rls", "-rls", "127.0.0.1:1"},
		{"-system", "rls", "-rls-config", "x.yaml"},
		{"-rls", "127.0.0.1:1"},
		{"-system", "redis-incr", "-redis", "127.0.0.1:1", "-rls-config", "x.yaml"},
		{"-system", "rls", "-rls", "127.0.0.1:1", "-rls-config", "x.yaml", "-conns", "0"},
	} {
		if _, err := parseLoad(args, &strings.Builder{}); err == nil {
			t.Errorf("%q: no usage error", args)
		}
	}
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, []byte("domain: gw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(good, []byte(mixYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // connections refused from now on
	for _, args := range [][]string{
		{"-rls", closed, "-rls-config", filepath.Join(dir, "missing.yaml")},
		{"-rls", closed, "-rls-config", empty},
		{"-rls", closed, "-rls-config", good},
	} {
		if _, err := runLoadCLI(t, append([]string{"-system", "rls", "-n", "1"}, args...)...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// deadlineOnly is a context whose deadline has passed but whose timer has
// not fired yet: Err is still nil.
type deadlineOnly struct {
	context.Context
	dl time.Time
}

func (d deadlineOnly) Deadline() (time.Time, bool) { return d.dl, true }

// A run has ended once its context has, or once its deadline has passed
// (gRPC fails calls from then on, before the context's timer fires).
func TestEnded(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"no deadline", context.Background(), false},
		{"canceled", canceled, true},
		{"deadline ahead", deadlineOnly{context.Background(), time.Now().Add(time.Hour)}, false},
		{"deadline passed, timer not fired", deadlineOnly{context.Background(), time.Now().Add(-time.Millisecond)}, true},
	} {
		if got := ended(c.ctx); got != c.want {
			t.Errorf("%s: ended = %v, want %v", c.name, got, c.want)
		}
	}
}
