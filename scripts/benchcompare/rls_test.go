package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// rlsTestYAML has per-minute limits a run of 600 calls over 4 tenants and
// 2 routes exceeds: 2 tenants ent-* (30 each) and 2 others (10 each), 80
// in all; the routes 50 and 20, 70 in all.
const rlsTestYAML = `domain: llm-gateway
descriptors:
  - key: tenant
    value: "ent-*"
    rate_limit: {unit: minute, requests_per_unit: 30}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value: /v1/chat/completions
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: route
    value: /v1/embeddings
    rate_limit: {unit: minute, requests_per_unit: 20}
`

// TestRLSStageAgainstReference runs the harness against envoyproxy/ratelimit
// itself (built from its module, scripts/rlsref) on a real redis-server:
// 600 calls against tight per-minute limits, whose counts must add up and
// stay within what its fixed windows allow; then the stage as
// bench-compare runs it, a second a run, the reference and tokenringd
// -grpc (a tokenringd without -grpc: the table says its side is pending),
// and its table.
func TestRLSStageAgainstReference(t *testing.T) {
	if testing.Short() {
		t.Skip("builds envoyproxy/ratelimit (about a minute and a half the first time) and runs it")
	}
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required in CI (.ci/run installs it): %v", err)
		}
		t.Skipf("skipping: redis-server not installed (%v); CI installs it", err)
	}
	bin := t.TempDir()
	goBuild(t, "", filepath.Join(bin, "tokenring"), "github.com/tokenring/tokenring/cmd/tokenring")
	goBuild(t, "", filepath.Join(bin, "tokenringd"), "github.com/tokenring/tokenring/cmd/tokenringd")
	goBuild(t, "../rlsref", filepath.Join(bin, "envoy-ratelimit"), "github.com/envoyproxy/ratelimit/src/service_cmd")
	var progress bytes.Buffer
	o := options{bin: bin, redisServer: redisServer, ratelimit: filepath.Join(bin, "envoy-ratelimit"),
		workers: 8, duration: time.Second, repeat: 1, reruns: &reruns{}, stderr: &progress}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	b, err := o.startRLSBench(ctx, t.TempDir(), rlsTestYAML)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	m, err := b.referenceRun(ctx, "reference, 600 calls", 0, "-n", "600", "-tenants", "4", "-d", "30s")
	after := time.Now()
	b.stop()
	if err != nil {
		t.Fatal(err)
	}
	checkFixedWindows(t, m.res, int(after.Unix()/60-before.Unix()/60+1))

	var out bytes.Buffer
	r := &report{workers: o.workers, seconds: 1, repeat: 1, rlsOnly: true}
	if err := o.rlsStage(ctx, t.TempDir(), r); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	r.write(&out)
	t.Logf("\n%s", out.String())
	if r.rlsRef.res.Errors > 0 || r.rlsRef.decisions() == 0 || r.rlsRef.cpuNs <= 0 {
		t.Errorf("the stage's reference run: %+v, server CPU %d ns", r.rlsRef.res, r.rlsRef.cpuNs)
	}
	if !strings.Contains(out.String(), "| envoyproxy/ratelimit + redis-server (the CPU of both) | ") {
		t.Errorf("the table has no reference row:\n%s", out.String())
	}
	switch {
	case r.rlsPending != "":
		if !strings.Contains(out.String(), "| tokenring 1 node, gRPC | pending: ") {
			t.Errorf("tokenring's side is pending but the table does not say so:\n%s", out.String())
		}
	case r.rlsTokenring.res.Errors > 0 || r.rlsTokenring.decisions() == 0 || r.rlsTokenring.cpuNs <= 0:
		t.Errorf("tokenring's run: %+v, server CPU %d ns", r.rlsTokenring.res, r.rlsTokenring.cpuNs)
	}
}

// checkFixedWindows checks a run of 600 calls on rlsTestYAML that spanned
// windows minutes: every call answered OK or OVER_LIMIT, each descriptor's
// statuses adding up to the calls, each key admitted its limits once for
// each window (its tenants and routes each took over twice their limit in
// calls: the window that got half of them was filled), and no call OK that
// one of its descriptors was not.
func checkFixedWindows(t *testing.T, res loadResult, windows int) {
	t.Helper()
	if res.Requests != 600 || res.Errors != 0 || res.Allowed+res.Refused != 600 {
		t.Fatalf("%d calls answered, %d OK, %d OVER_LIMIT, %d errors: want 600 = OK + OVER_LIMIT", res.Requests, res.Allowed, res.Refused, res.Errors)
	}
	if len(res.Descriptors) != 2 || res.Descriptors[0].Key != "tenant" || res.Descriptors[1].Key != "route" {
		t.Fatalf("descriptors %+v, want tenant and route", res.Descriptors)
	}
	for i, limits := range []int{80, 70} {
		d := res.Descriptors[i]
		if d.OK+d.OverLimit != 600 {
			t.Errorf("%s: %d OK + %d OVER_LIMIT, want 600", d.Key, d.OK, d.OverLimit)
		}
		if d.OK < limits || d.OK > limits*windows {
			t.Errorf("%s: %d OK over %d fixed windows, want %d to %d", d.Key, d.OK, windows, limits, limits*windows)
		}
		if res.Allowed > d.OK {
			t.Errorf("%d calls OK, more than their %s descriptors (%d)", res.Allowed, d.Key, d.OK)
		}
	}
}

// goBuild builds pkg into out, in the module at dir ("": this one).
func goBuild(t *testing.T, dir, out, pkg string) {
	t.Helper()
	args := []string{"build", "-o", out, pkg}
	if dir != "" { // -C: the first flag
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		args = []string{"build", "-C", abs, "-o", out, pkg}
	}
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
}

// The reference's environment puts each of its listeners on the address
// given, and Redis, the config files and stats as the harness needs them.
func TestReferenceEnv(t *testing.T) {
	env := referenceEnv("/r", "127.0.0.1:6379", [3]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})
	for _, want := range []string{
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=1", "HOST=127.0.0.1", "PORT=2", "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=3",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:6379", "RUNTIME_ROOT=/r", "RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		"USE_STATSD=false", "DISABLE_STATS=true",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("env %q lacks %q", env, want)
		}
	}
}

// The table: both servers' rows and tokenring's ratios to the reference,
// or the reference's row and tokenring's pending.
func TestWriteRLS(t *testing.T) {
	run := func(perSecond float64, ok, over int, cpuNs int64) measured {
		return measured{res: loadResult{Requests: ok + over, Allowed: ok, Refused: over, PerSecond: perSecond, P50us: 900, P99us: 4000}, cpuNs: cpuNs}
	}
	r := &report{workers: 32, rlsRan: true, rlsRef: run(5000, 15000, 5000, 2e9), rlsTokenring: run(10000, 30000, 10000, 2e9)}
	var out strings.Builder
	r.writeRLS(&out)
	for _, want := range []string{
		"| envoyproxy/ratelimit + redis-server (the CPU of both) | 5,000 | 15,000 | 5,000 | 900 µs | 4,000 µs | 100.0 | 0.0% |",
		"| tokenring 1 node, gRPC | 10,000 | 30,000 | 10,000 | 900 µs | 4,000 µs | 50.0 | 0.0% |",
		"tokenring ÷ envoyproxy/ratelimit: 2.00× the decisions/s, 0.50× the server CPU a decision",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	r = &report{workers: 32, rlsRan: true, rlsRef: run(5000, 15000, 5000, 2e9), rlsPending: "pending: no -grpc"}
	out.Reset()
	r.writeRLS(&out)
	if !strings.Contains(out.String(), "| tokenring 1 node, gRPC | pending: no -grpc |") || strings.Contains(out.String(), "÷") {
		t.Errorf("pending table:\n%s", out.String())
	}
	out.Reset()
	(&report{}).writeRLS(&out)
	if out.Len() > 0 {
		t.Errorf("a comparison without the stage printed %q", out.String())
	}
}
