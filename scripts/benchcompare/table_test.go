package main

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// canned is a canned measured run: decisions/s, p50, p99 (µs), allowed,
// refused, and server CPU (ns).
func canned(perSecond, p50, p99 float64, allowed, refused int, cpuNs int64) measured {
	return measured{res: loadResult{Requests: allowed + refused, Allowed: allowed, Refused: refused,
		PerSecond: perSecond, P50us: p50, P99us: p99, Seconds: 4}, cpuNs: cpuNs, steal: 0.02}
}

// cannedReport meets every must-show target but two (1 node ÷ the sorted
// set at 1,000 entries: 2.25×; p99 at 16 workers: 12.3 ms).
func cannedReport() *report {
	r := &report{
		workers:       32,
		seconds:       4,
		cpus:          2,
		loadBefore:    0.5,
		steal:         0.125,
		loadAfter:     2.25,
		incr:          canned(50_000, 400, 1_500, 200_000, 0, 1e9),        // 5.0 µs a decision
		zset10:        canned(25_000, 900, 2_500, 100_000, 0, 2e9),        // 20.0
		zset1000:      canned(20_000, 1_100, 3_000, 80_000, 0, 2e9),       // 25.0
		single:        canned(45_000, 700, 2_100, 180_000, 0, 1.62e9),     // 9.0: 1.80× INCR's
		batch:         canned(80_000, 380, 1_200, 320_000, 0, 1.6e9),      // 5.0
		local:         canned(40_000, 800, 2_400, 160_000, 0, 3.2e9),      // 20.0
		forwarded:     canned(38_000, 850, 2_600, 152_000, 0, 4.56e9),     // 30.0
		hot:           canned(36_000, 880, 2_700, 90_000, 54_000, 1.44e9), // 10.0
		hotLimit:      90_000,
		incr16:        canned(52_000, 300, 1_900, 208_000, 0, 1.04e9),  // 5.0
		single16:      canned(44_000, 350, 12_345, 176_000, 0, 0),      // CPU not measured
		singleNetHTTP: canned(30_000, 1_000, 3_000, 120_000, 0, 1.5e9), // 12.5
		servedNetHTTP: canned(30_000, 900, 3_500, 120_000, 0, 1.8e9),   // 15.0
		floor:         canned(60_000, 500, 1_800, 240_000, 0, 1.2e9),   // 5.0
		floor16:       canned(58_000, 250, 1_400, 232_000, 0, 1.16e9),  // 5.0
		loop16:        canned(62_000, 240, 700, 248_000, 0, 0.992e9),   // 4.0
		flat: []flatPoint{
			{perKey: 10, tenants: 18_000, tokenring: canned(45_000, 0, 0, 180_000, 0, 0), zset: canned(25_000, 0, 0, 0, 0, 0), zsetKeys: 1000},
			{perKey: 1000, tenants: 180, tokenring: canned(41_000, 0, 0, 164_000, 0, 0), zset: canned(20_000, 0, 0, 0, 0, 0), zsetKeys: 1000},
			{perKey: 10_000, tenants: 18, tokenring: canned(50_000, 0, 0, 200_000, 0, 0), zset: canned(12_500, 0, 0, 0, 0, 0), zsetKeys: 100},
		},
		direct:        canned(0, 100, 400, 0, 0, 0),
		through:       canned(0, 250, 1_200, 0, 0, 0),
		directStream:  canned(0, 200, 500, 0, 0, 0),
		throughStream: canned(0, 900, 2_500, 0, 0, 0),
		reference:     canned(0, 180, 700, 0, 0, 0),
		relay:         canned(0, 130, 500, 0, 0, 0),
	}
	r.incr.clientNs = 4e8            // 2.0 µs a decision
	r.single.clientNs = 2.25e9       // 12.5
	r.singleNetHTTP.clientNs = 3.6e9 // 30.0
	return r
}

const cannedOutput = `32 workers, 4s a run (the proxy: 1 worker); 2 CPUs, load average 0.50 before the runs, 2.25 after; 12.5% of the CPUs' time stolen by the hypervisor during them

| system | decisions/s | p50 | p99 | ratio vs Redis INCR | server CPU µs/decision | CPU stolen |
|---|---:|---:|---:|---:|---:|---:|
| Redis INCR, no script | 50,000 | 400 µs | 1,500 µs | 1.00× | 5.0 | 2.0% |
| Redis sorted set + Lua, 10 entries a key | 25,000 | 900 µs | 2,500 µs | 0.50× | 20.0 | 2.0% |
| Redis sorted set + Lua, 1,000 entries a key | 20,000 | 1,100 µs | 3,000 µs | 0.40× | 25.0 | 2.0% |
| tokenring 1 node, POST /v1/acquire | 45,000 | 700 µs | 2,100 µs | 0.90× | 9.0 | 2.0% |
| tokenring 1 node, batching client | 80,000 | 380 µs | 1,200 µs | 1.60× | 5.0 | 2.0% |
| tokenring 3 nodes, -route owner (local) | 40,000 | 800 µs | 2,400 µs | 0.80× | 20.0 | 2.0% |
| tokenring 3 nodes, -route other (forwarded) | 38,000 | 850 µs | 2,600 µs | 0.76× | 30.0 | 2.0% |
| tokenring 3 nodes, one hot tenant (rpm 90,000) | 36,000 | 880 µs | 2,700 µs | 0.72× | 10.0 | 2.0% |
| Redis INCR, 16 workers (others: 32) | 52,000 | 300 µs | 1,900 µs | 1.04× | 5.0 | 2.0% |
| tokenring 1 node, 16 workers | 44,000 | 350 µs | 12.3 ms | 0.88× | n/a | 2.0% |
| tokenring 1 node, POST /v1/acquire through net/http's client | 30,000 | 1,000 µs | 3,000 µs | 0.60× | 12.5 | 2.0% |
| tokenring 1 node, POST /v1/acquire served by net/http (no event loop, no fast path) | 30,000 | 900 µs | 3,500 µs | 0.60× | 15.0 | 2.0% |
| Go floor: a fixed answer, a goroutine a connection | 60,000 | 500 µs | 1,800 µs | 1.20× | 5.0 | 2.0% |
| Go floor: a fixed answer, a goroutine a connection, 16 workers | 58,000 | 250 µs | 1,400 µs | 1.16× | 5.0 | 2.0% |
| Go floor: a fixed answer, one event loop, 16 workers | 62,000 | 240 µs | 700 µs | 1.24× | 4.0 | 2.0% |

forwarded ÷ local (3 nodes): 0.95×
hot tenant ÷ spread (row 6): 0.90×; admitted 90,000 of its limit 90,000, refused 54,000: exact
server CPU per decision, tokenring 1 node ÷ Redis INCR: 1.80×
the load generator's own CPU µs/decision (it shares the CPUs with the servers): Redis INCR 2.0, sorted set n/a, tokenring 1 node 12.5 (through net/http's client 30.0), batching client n/a
tokenring 1 node ÷ the Go floor (a goroutine a connection): 0.75× the decisions/s, 1.80× the server CPU a decision (4.0 µs more)
tokenring 1 node, its event loops and fast path ÷ the same node's net/http server: 1.50× the decisions/s, 0.60× the server CPU a decision (6.0 µs less)
p99 at 16 workers: tokenring 12.3 ms, the Go floor 1,400 µs a goroutine a connection and 700 µs one event loop, Redis INCR 1,900 µs

Flatness: decisions/s by requests in each key's window
| requests a key | tokenring 1 node | vs first | tenants (requests a key by the end) | CPU stolen | Redis sorted set | vs first | keys |
|---:|---:|---:|---:|---:|---:|---:|---:|
| 10 | 45,000 | 1.00× | 18,000 (10) | 2.0% | 25,000 | 1.00× | 1,000 |
| 1,000 | 41,000 | 0.91× | 180 (911) | 2.0% | 20,000 | 0.80× | 1,000 |
| 10,000 | 50,000 | 1.11× | 18 (11,111) | 2.0% | 12,500 | 0.50× | 100 |

LLM proxy (fakellm; 1 worker, sequential)
| call | direct p50 | direct p99 | through p50 | through p99 | added p50 | added p99 |
|---|---:|---:|---:|---:|---:|---:|
| chat completion through tokenring, whole answer | 100 µs | 400 µs | 250 µs | 1,200 µs | 150 µs | 800 µs |
| the same through Go's httputil.ReverseProxy (no limiting) | 100 µs | 400 µs | 180 µs | 700 µs | 80 µs | 300 µs |
| the same through a TCP relay (no HTTP: the floor of a second hop) | 100 µs | 400 µs | 130 µs | 500 µs | 30 µs | 100 µs |
| chat completion stream through tokenring, first byte | 200 µs | 500 µs | 900 µs | 2,500 µs | 700 µs | 2,000 µs |

Must-show:
- meets  1 node ÷ Redis INCR ≥ 0.8×: 0.90×
- meets  server CPU per decision ÷ Redis INCR's ≤ 2×: 1.80×
- meets  batching client ÷ Redis INCR ≥ 1.5×: 1.60×
- MISSES 1 node ÷ sorted set at 1,000 entries ≥ 10×: 2.25×
- meets  flat within ±20%: ±11.1%
- meets  forwarded ÷ local ≥ 0.9×: 0.95×
- meets  hot tenant ≥ 0.8× spread, admitted exactly its limit: 0.90×, admitted 90,000 of its limit 90,000, refused 54,000: exact
- MISSES p99 at 16 workers ≤ 2,000 µs: 12.3 ms (Redis INCR at 16 workers: 1,900 µs)
- meets  proxy added p50 ≤ 200 µs: 150 µs
- meets  proxy added p99 ≤ 1,000 µs: 800 µs
- meets  stream first byte through tokenring (p50) ≤ 1,000 µs: 900 µs
`

// The whole printed comparison of canned runs, exactly: the ratios to
// Redis INCR, CPU per decision, forwarded ÷ local, the hot tenant, the
// flatness spread, the proxy's added latency, tokenring against the Go
// floors, and each must-show verdict.
func TestReportOutput(t *testing.T) {
	var b strings.Builder
	cannedReport().write(&b)
	if got := b.String(); got != cannedOutput {
		t.Fatalf("got:\n%s\nwant:\n%s\nfirst difference at byte %d", got, cannedOutput, firstDiff(got, cannedOutput))
	}
	// A run with errors says how many beside its name.
	r := cannedReport()
	r.forwarded.res.Errors = 1234
	b.Reset()
	r.write(&b)
	want := "| tokenring 3 nodes, -route other (forwarded) (1,234 errors) | 38,000 | 850 µs | 2,600 µs | 0.76× | 30.0 | 2.0% |\n"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("no line %q in:\n%s", want, b.String())
	}
	// A spread just over the line prints as over it, not rounded to it.
	r = cannedReport()
	r.flat[2].tokenring.res.PerSecond = 54_180 // 1.204× the first point
	b.Reset()
	r.write(&b)
	if want := "- MISSES flat within ±20%: ±20.4%\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("no line %q in:\n%s", want, b.String())
	}
	// With -max-steal, the header says what it did.
	r = cannedReport()
	r.maxSteal, r.reruns = 0.05, reruns{again: 7, over: 1}
	b.Reset()
	r.write(&b)
	want = "12.5% of the CPUs' time stolen by the hypervisor during them; a run that lost over 5.0% was made again, up to 3 times: 7 tries again, 1 runs kept over it\n\n"
	if !strings.HasPrefix(b.String(), cannedOutput[:strings.Index(cannedOutput, "12.5%")]) || !strings.Contains(b.String(), want) {
		t.Fatalf("no header %q in:\n%s", want, b.String())
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// The hot tenant's verdict against its limit, in each case.
func TestHotAdmitted(t *testing.T) {
	for _, tc := range []struct {
		allowed, refused int
		want             string
		exact            bool
	}{
		{90_000, 1, "admitted 90,000 of its limit 90,000, refused 1: exact", true},
		{90_001, 5, "admitted 90,001 of its limit 90,000, refused 5: OVER the limit by 1", false},
		{89_000, 5, "admitted 89,000 of its limit 90,000, refused 5: under the limit by 1,000", false},
		{80_000, 0, "admitted 80,000 of its limit 90,000, refused 0: the limit was not reached", false},
		{90_000, 0, "admitted 90,000 of its limit 90,000, refused 0: the limit was not reached", false},
	} {
		r := cannedReport()
		r.hot = canned(36_000, 0, 0, tc.allowed, tc.refused, 0)
		if got := r.hotAdmitted(); got != tc.want || r.hotExact() != tc.exact {
			t.Errorf("%d allowed, %d refused: %q exact=%v; want %q exact=%v", tc.allowed, tc.refused, got, r.hotExact(), tc.want, tc.exact)
		}
	}
}

// Number formats, and ratios and CPU with an unknown side.
func TestFormats(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999.4: "999", 999.5: "1,000", 1234567: "1,234,567", -1500: "-1,500", math.NaN(): "n/a"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
	for us, want := range map[float64]string{0: "0 µs", 9_999: "9,999 µs", 10_000: "10.0 ms", 12_345: "12.3 ms", -300: "-300 µs"} {
		if got := micros(us); got != want {
			t.Errorf("micros(%v) = %q, want %q", us, got, want)
		}
	}
	for share, want := range map[float64]string{0: "0.0%", 0.125: "12.5%", 0.0004: "0.0%", math.NaN(): "n/a"} {
		if got := percent(share); got != want {
			t.Errorf("percent(%v) = %q, want %q", share, got, want)
		}
	}
	if got := times(ratio(1, 0)); got != "n/a" {
		t.Errorf("a ratio to 0: %q", got)
	}
	if got := decimal(canned(1, 0, 0, 0, 0, 5e9).cpuPerDecisionUs()); got != "n/a" {
		t.Errorf("CPU over no decisions: %q", got)
	}
	if got := flatTenants(15_000, 4, 10_000); got != 6 {
		t.Errorf("flatTenants(15,000/s, 4 s, 10,000 a key) = %d, want 6", got)
	}
	if got := flatTenants(100, 1, 10_000); got != 1 {
		t.Errorf("flatTenants below one key = %d, want 1", got)
	}
}

// Bad flags and missing binaries stop the comparison before it starts
// anything.
func TestParseFlags(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"tokenringd", "tokenring", "fakellm", "envoy-ratelimit"} {
		if err := os.WriteFile(filepath.Join(bin, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	o, err := parseFlags([]string{"-bin", bin, "-redis-server", "sh", "-workers", "8", "-d", "2s", "-max-steal", "5"}, io.Discard)
	if err != nil || o.workers != 8 || o.duration != 2*time.Second || !strings.HasSuffix(o.redisServer, "/sh") || o.maxSteal != 0.05 || o.reruns == nil ||
		o.ratelimit != filepath.Join(bin, "envoy-ratelimit") || o.rlsOnly {
		t.Fatalf("good flags: %+v %v", o, err)
	}
	if o, err := parseFlags([]string{"-bin", bin, "-redis-server", "sh", "-ratelimit", "/bin/sh", "-rls-only"}, io.Discard); err != nil || o.ratelimit != "/bin/sh" || !o.rlsOnly {
		t.Fatalf("-ratelimit and -rls-only: %+v %v", o, err)
	}
	for _, args := range [][]string{
		{"-bin", bin, "-redis-server", "sh", "-workers", "0"},
		{"-bin", bin, "-redis-server", "sh", "-d", "1ms"},
		{"-bin", bin, "-redis-server", "sh", "-repeat", "0"},
		{"-bin", bin, "-redis-server", "sh", "-max-steal", "-1"},
		{"-bin", bin, "-redis-server", "sh", "-max-steal", "100"},
		{"-bin", bin, "-redis-server", "sh", "-max-steal", "NaN"},
		{"-bin", bin, "-redis-server", "sh", "now"},
		{"-bin", bin, "-redis-server", "no-such-redis-server"},
		{"-bin", t.TempDir(), "-redis-server", "sh"},
		{"-bin", bin, "-redis-server", "sh", "-ratelimit", filepath.Join(bin, "no-such-ratelimit")},
		{"-bogus"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// loadAverage reads the first field of loadavg.
func TestLoadAverage(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "loadavg"), []byte("3.50 2.93 2.90 4/612 26318\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := loadAverage(root); err != nil || v != 3.5 {
		t.Fatalf("loadAverage = %v, %v; want 3.5", v, err)
	}
	if _, err := loadAverage(t.TempDir()); err == nil {
		t.Fatal("no loadavg: no error")
	}
	if v, err := loadAverage(procRoot); err != nil || v < 0 {
		t.Fatalf("this machine's: %v, %v", v, err)
	}
}

// medianRun keeps the run with the median decisions/s, whatever the order;
// of two, the faster. repeatPrefix names each run's tenants apart.
func TestMedianRun(t *testing.T) {
	runs := []measured{canned(300, 1, 0, 0, 0, 0), canned(100, 2, 0, 0, 0, 0), canned(200, 3, 0, 0, 0, 0)}
	if got := medianRun(runs); got.res.PerSecond != 200 || got.res.P50us != 3 {
		t.Fatalf("median of 300, 100, 200: %+v", got.res)
	}
	if runs[0].res.PerSecond != 300 {
		t.Fatal("medianRun reordered its argument")
	}
	if got := medianRun(runs[:2]); got.res.PerSecond != 300 {
		t.Fatalf("median of 300, 100: %v, want the faster", got.res.PerSecond)
	}
	if got := medianRun(runs[1:2]); got.res.PerSecond != 100 {
		t.Fatalf("median of one: %v", got.res.PerSecond)
	}
	if a, b := repeatPrefix("hot-", 0), repeatPrefix("hot-", 1); a != "hot-r0-" || b != "hot-r1-" {
		t.Fatalf("repeatPrefix: %q %q", a, b)
	}
	r := cannedReport()
	r.repeat = 3
	var b strings.Builder
	r.write(&b)
	want := "32 workers, 4s a run, each figure the median of 3 runs, and a ratio or difference of measurements made in turn the median of their rounds' own (the proxy: 1 worker); 2 CPUs, load average 0.50 before the runs, 2.25 after; 12.5% of the CPUs' time stolen by the hypervisor during them\n"
	if !strings.HasPrefix(b.String(), want) {
		t.Fatalf("header %q, want %q", strings.SplitAfter(b.String(), "\n")[0], want)
	}
}

// machineTicks sums the eight counters of /proc/stat's cpu line and keeps
// steal, the eighth; stealShare is its share of the time between two.
func TestMachineTicks(t *testing.T) {
	root := t.TempDir()
	stat := "cpu  100 5 50 800 10 1 2 32 7 0\ncpu0 50 2 25 400 5 0 1 16 3 0\n"
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := machineTicks(root)
	if err != nil || got != (cpuTicks{total: 1000, steal: 32}) {
		t.Fatalf("machineTicks = %+v, %v; want total 1000 (guest not counted twice), steal 32", got, err)
	}
	if s := stealShare(cpuTicks{1000, 32}, cpuTicks{3000, 532}); s != 0.25 {
		t.Fatalf("stealShare = %v, want 0.25", s)
	}
	if s := stealShare(got, got); s != 0 {
		t.Fatalf("stealShare of no time = %v, want 0", s)
	}
	for _, bad := range []string{"", "intr 1 2\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n", "cpu 1 2 3 4 5 6 7 -8\n"} {
		if err := os.WriteFile(filepath.Join(root, "stat"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := machineTicks(root); err == nil {
			t.Errorf("stat %q: no error", bad)
		}
	}
	if _, err := machineTicks(procRoot); err != nil {
		t.Fatalf("this machine's: %v", err)
	}
}
