package main

// The printed comparison: the markdown tables, the ratios and the
// must-show checks, from the measured runs.

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// loadResult is the part of `tokenring load -json`'s output the
// comparison reads (cmd/tokenring's loadResult).
type loadResult struct {
	Requests int `json:"requests"`
	Allowed  int `json:"allowed"`
	Refused  int `json:"refused"`
	Errors   int `json:"errors"`
	// FirstError is what one of the errors was.
	FirstError string  `json:"first_error"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"decisions_per_second"` // (allowed + refused) / seconds
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	// Descriptors are -system rls's statuses of each descriptor of its
	// requests, by its place in them.
	Descriptors []struct {
		Key       string `json:"key"`
		OK        int    `json:"ok"`
		OverLimit int    `json:"over_limit"`
	} `json:"descriptors"`
}

// measured is one run: what the load generator saw, and the CPU its
// servers spent over the timed run.
type measured struct {
	res      loadResult
	cpuNs    int64 // summed over the servers' threads, ns (0: not measured)
	clientNs int64 // the load generator's, ns (0: not measured)
	// steal is the share of the CPUs' time the hypervisor gave elsewhere
	// during the run.
	steal float64
	// rounds are the runs of an alternated measurement, in round order,
	// the measured itself being its median run; set is its alternation
	// (rounds.go). Both are nil for a single run, and for measurements
	// that did not alternate.
	rounds []measured
	set    *alternation
}

// decisions is the run's admissions and refusals.
func (m measured) decisions() int { return m.res.Allowed + m.res.Refused }

// cpuPerDecisionUs is the servers' CPU per decision, µs (NaN when either
// is unknown).
func (m measured) cpuPerDecisionUs() float64 { return perDecisionUs(m.cpuNs, m.decisions()) }

// clientPerDecisionUs is the load generator's CPU per decision, µs.
func (m measured) clientPerDecisionUs() float64 { return perDecisionUs(m.clientNs, m.decisions()) }

func perDecisionUs(ns int64, decisions int) float64 {
	if ns <= 0 || decisions == 0 {
		return math.NaN()
	}
	return float64(ns) / 1e3 / float64(decisions)
}

// flatPoint is one column pair of the flatness table: a single node and
// the sorted set with about perKey requests in each key's window.
type flatPoint struct {
	perKey          int      // the target: requests in each key's window
	tenants         int      // tokenring's keys in that run
	tokenring, zset measured // zset: -entries perKey
	zsetKeys        int      // the sorted set's keys in that run
}

// report is every run of the comparison. The rows of the main table are,
// in order: incr, zset10, zset1000, single, batch, local, forwarded, hot,
// incr16, single16, singleNetHTTP, servedNetHTTP, floor, floor16, loop16.
type report struct {
	workers int     // of every run but incr16's, single16's and the proxy's
	seconds float64 // -d of each run
	repeat  int     // runs of each measurement (the median kept)
	// cpus and the 1-minute load averages before and after all runs, and
	// the share of the CPUs' time the hypervisor gave elsewhere (steal)
	// during them: on a machine other work shares, the ratios are only as
	// steady as these.
	cpus                  int
	loadBefore, loadAfter float64
	steal                 float64
	maxSteal              float64 // -max-steal (0: off)
	reruns                reruns  // what it did
	incr                  measured
	zset10                measured
	zset1000              measured
	single                measured
	batch                 measured
	local                 measured // 3 nodes, -route owner
	forwarded             measured // 3 nodes, -route other
	hot                   measured // 3 nodes, one tenant, round robin
	hotLimit              int      // its rpm (the window is 60 s, longer than the run)
	incr16                measured // incr at 16 workers
	single16              measured // single at 16 workers
	singleNetHTTP         measured // single through net/http's client
	// servedNetHTTP is single with every acquire served by the node's
	// net/http server rather than its event loops and fast path
	// (servedNetHTTPPrefix).
	servedNetHTTP measured
	// The Go floors (floor.go): a fixed answer, a goroutine a connection
	// (at both worker counts) or one event loop (at 16 workers).
	floor, floor16, loop16 measured
	flat                   []flatPoint
	// The LLM proxy, one worker: fakellm directly and through a node,
	// whole answers and streams (time to first byte), and, whole answers,
	// through Go's standard reverse proxy (a Go proxy that does nothing
	// else) and through a TCP relay (the floor of a second hop).
	direct, through, directStream, throughStream, reference, relay measured
	// Envoy's rate limit service (rls.go): envoyproxy/ratelimit with its
	// redis-server, and tokenringd's gRPC server. rlsRan says the stage
	// ran; rlsPending, when not empty, why tokenring's side did not.
	rlsRef, rlsTokenring measured
	rlsRan               bool
	rlsPending           string
	rlsOnly              bool // -rls-only: that stage alone
}

// tableRow is one line of the main table.
type tableRow struct {
	name string
	m    measured
}

func (r *report) rows() []tableRow {
	w := strconv.Itoa(r.workers)
	return []tableRow{
		{"Redis INCR, no script", r.incr},
		{"Redis sorted set + Lua, 10 entries a key", r.zset10},
		{"Redis sorted set + Lua, 1,000 entries a key", r.zset1000},
		{"tokenring 1 node, POST /v1/acquire", r.single},
		{"tokenring 1 node, batching client", r.batch},
		{"tokenring 3 nodes, -route owner (local)", r.local},
		{"tokenring 3 nodes, -route other (forwarded)", r.forwarded},
		{"tokenring 3 nodes, one hot tenant (rpm " + thousands(float64(r.hotLimit)) + ")", r.hot},
		{"Redis INCR, 16 workers (others: " + w + ")", r.incr16},
		{"tokenring 1 node, 16 workers", r.single16},
		{"tokenring 1 node, POST /v1/acquire through net/http's client", r.singleNetHTTP},
		{"tokenring 1 node, POST /v1/acquire served by net/http (no event loop, no fast path)", r.servedNetHTTP},
		{"Go floor: a fixed answer, a goroutine a connection", r.floor},
		{"Go floor: a fixed answer, a goroutine a connection, 16 workers", r.floor16},
		{"Go floor: a fixed answer, one event loop, 16 workers", r.loop16},
	}
}

// write prints the whole comparison as markdown.
func (r *report) write(w io.Writer) {
	if r.rlsOnly {
		fmt.Fprintf(w, "%gs a run%s; %d CPUs, load average %.2f before the runs, %.2f after; %s of the CPUs' time stolen by the hypervisor during them\n",
			r.seconds, r.medianNote(), r.cpus, r.loadBefore, r.loadAfter, percent(r.steal))
		r.writeRLS(w)
		return
	}
	median := r.medianNote()
	steady := ""
	if r.maxSteal > 0 {
		steady = fmt.Sprintf("; a run that lost over %s was made again, up to %d times: %d tries again, %d runs kept over it",
			percent(r.maxSteal), stealRetries, r.reruns.again, r.reruns.over)
	}
	fmt.Fprintf(w, "%d workers, %gs a run%s (the proxy: 1 worker); %d CPUs, load average %.2f before the runs, %.2f after; %s of the CPUs' time stolen by the hypervisor during them%s\n\n",
		r.workers, r.seconds, median, r.cpus, r.loadBefore, r.loadAfter, percent(r.steal), steady)
	fmt.Fprintln(w, "| system | decisions/s | p50 | p99 | ratio vs Redis INCR | server CPU µs/decision | CPU stolen |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.rows() {
		if row.m.res.Errors > 0 {
			row.name += fmt.Sprintf(" (%s errors)", thousands(float64(row.m.res.Errors)))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", row.name, thousands(row.m.res.PerSecond),
			micros(medianStat(row.m, p50)), micros(medianStat(row.m, p99)), times(pairedRatio(row.m, r.incr, perSecond)),
			decimal(medianStat(row.m, measured.cpuPerDecisionUs)), percent(row.m.steal))
	}
	fmt.Fprintf(w, "\nforwarded ÷ local (3 nodes): %s\n", times(r.forwardedRatio()))
	fmt.Fprintf(w, "hot tenant ÷ spread (row 6): %s; %s\n", times(r.hotRatio()), r.hotAdmitted())
	fmt.Fprintf(w, "server CPU per decision, tokenring 1 node ÷ Redis INCR: %s\n", times(r.cpuRatio()))
	fmt.Fprintf(w, "the load generator's own CPU µs/decision (it shares the CPUs with the servers): Redis INCR %s, sorted set %s, tokenring 1 node %s (through net/http's client %s), batching client %s\n",
		decimal(medianStat(r.incr, measured.clientPerDecisionUs)), decimal(medianStat(r.zset10, measured.clientPerDecisionUs)),
		decimal(medianStat(r.single, measured.clientPerDecisionUs)), decimal(medianStat(r.singleNetHTTP, measured.clientPerDecisionUs)),
		decimal(medianStat(r.batch, measured.clientPerDecisionUs)))
	r.writeFloor(w)
	r.writeFlat(w)
	r.writeProxy(w)
	r.writeRLS(w)
	fmt.Fprintln(w, "\nMust-show:")
	for _, c := range r.checks() {
		mark := "meets "
		if !c.ok {
			mark = "MISSES"
		}
		fmt.Fprintf(w, "- %s %s: %s\n", mark, c.name, c.got)
	}
}

// medianNote says, with -repeat, how each figure was taken.
func (r *report) medianNote() string {
	if r.repeat < 2 {
		return ""
	}
	return fmt.Sprintf(", each figure the median of %d runs, and a ratio or difference of measurements made in turn the median of their rounds' own", r.repeat)
}

func (r *report) forwardedRatio() float64 { return pairedRatio(r.forwarded, r.local, perSecond) }
func (r *report) hotRatio() float64       { return pairedRatio(r.hot, r.local, perSecond) }
func (r *report) cpuRatio() float64 {
	return pairedRatio(r.single, r.incr, measured.cpuPerDecisionUs)
}

// hotExact reports whether the hot tenant was admitted exactly its limit
// and refused past it.
func (r *report) hotExact() bool {
	return r.hot.res.Allowed == r.hotLimit && r.hot.res.Refused > 0
}

// hotAdmitted states the hot tenant's admissions against its limit.
func (r *report) hotAdmitted() string {
	a, l, ref := r.hot.res.Allowed, r.hotLimit, r.hot.res.Refused
	head := fmt.Sprintf("admitted %s of its limit %s, refused %s", thousands(float64(a)), thousands(float64(l)), thousands(float64(ref)))
	switch {
	case a > l:
		return head + ": OVER the limit by " + thousands(float64(a-l))
	case ref == 0:
		return head + ": the limit was not reached"
	case a == l:
		return head + ": exact"
	}
	return head + ": under the limit by " + thousands(float64(l-a))
}

// writeFloor compares one node with the Go floors, what tokenring's own
// code costs a decision and what an event loop would give the tail, and
// with itself served by net/http, what internal/http1 gives it.
func (r *report) writeFloor(w io.Writer) {
	fmt.Fprintf(w, "tokenring 1 node ÷ the Go floor (a goroutine a connection): %s the decisions/s, %s the server CPU a decision (%s µs more)\n",
		times(pairedRatio(r.single, r.floor, perSecond)), times(pairedRatio(r.single, r.floor, measured.cpuPerDecisionUs)),
		decimal(pairedDiff(r.single, r.floor, measured.cpuPerDecisionUs)))
	fmt.Fprintf(w, "tokenring 1 node, its event loops and fast path ÷ the same node's net/http server: %s the decisions/s, %s the server CPU a decision (%s µs less)\n",
		times(pairedRatio(r.single, r.servedNetHTTP, perSecond)), times(pairedRatio(r.single, r.servedNetHTTP, measured.cpuPerDecisionUs)),
		decimal(pairedDiff(r.servedNetHTTP, r.single, measured.cpuPerDecisionUs)))
	fmt.Fprintf(w, "p99 at 16 workers: tokenring %s, the Go floor %s a goroutine a connection and %s one event loop, Redis INCR %s\n",
		micros(medianStat(r.single16, p99)), micros(medianStat(r.floor16, p99)), micros(medianStat(r.loop16, p99)), micros(medianStat(r.incr16, p99)))
}

// writeFlat prints the flatness table.
func (r *report) writeFlat(w io.Writer) {
	if len(r.flat) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlatness: decisions/s by requests in each key's window")
	fmt.Fprintln(w, "| requests a key | tokenring 1 node | vs first | tenants (requests a key by the end) | CPU stolen | Redis sorted set | vs first | keys |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	first := r.flat[0]
	for _, p := range r.flat {
		perKey := float64(p.tokenring.res.Allowed) / float64(max(1, p.tenants))
		fmt.Fprintf(w, "| %s | %s | %s | %s (%s) | %s | %s | %s | %s |\n", thousands(float64(p.perKey)),
			thousands(p.tokenring.res.PerSecond), times(pairedRatio(p.tokenring, first.tokenring, perSecond)),
			thousands(float64(p.tenants)), thousands(perKey), percent(p.tokenring.steal),
			thousands(p.zset.res.PerSecond), times(pairedRatio(p.zset, first.zset, perSecond)), thousands(float64(p.zsetKeys)))
	}
	if len(first.tokenring.rounds) < 2 {
		return
	}
	var points []string
	for _, p := range r.flat[1:] {
		if !paired(p.tokenring, first.tokenring) {
			continue
		}
		point := thousands(float64(p.perKey)) + " requests a key"
		for _, v := range roundRatios(p.tokenring, first.tokenring, perSecond) {
			point += " " + times(v)
		}
		points = append(points, point)
	}
	fmt.Fprintf(w, "tokenring, each round's ratio to the first point: %s\n", strings.Join(points, "; "))
}

// flatSpread is the largest relative distance of a tokenring flatness
// run from the first (0.2: ±20%).
func (r *report) flatSpread() float64 {
	if len(r.flat) == 0 {
		return math.NaN()
	}
	spread := 0.0
	for _, p := range r.flat {
		spread = max(spread, math.Abs(pairedRatio(p.tokenring, r.flat[0].tokenring, perSecond)-1))
	}
	return spread
}

// writeProxy prints the proxy table.
func (r *report) writeProxy(w io.Writer) {
	fmt.Fprintln(w, "\nLLM proxy (fakellm; 1 worker, sequential)")
	fmt.Fprintln(w, "| call | direct p50 | direct p99 | through p50 | through p99 | added p50 | added p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, c := range []struct {
		name   string
		d, thr measured
	}{
		{"chat completion through tokenring, whole answer", r.direct, r.through},
		{"the same through Go's httputil.ReverseProxy (no limiting)", r.direct, r.reference},
		{"the same through a TCP relay (no HTTP: the floor of a second hop)", r.direct, r.relay},
		{"chat completion stream through tokenring, first byte", r.directStream, r.throughStream},
	} {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", c.name, micros(medianStat(c.d, p50)), micros(medianStat(c.d, p99)),
			micros(medianStat(c.thr, p50)), micros(medianStat(c.thr, p99)), micros(pairedDiff(c.thr, c.d, p50)), micros(pairedDiff(c.thr, c.d, p99)))
	}
}

// tail16 adds Redis INCR's p99 at 16 workers to c, the p99 line's check:
// what a networked counter's tail is on this machine, in the same run.
func (r *report) tail16(c check) check {
	c.got += " (Redis INCR at 16 workers: " + micros(medianStat(r.incr16, p99)) + ")"
	return c
}

func (r *report) addedP50() float64 { return pairedDiff(r.through, r.direct, p50) }
func (r *report) addedP99() float64 { return pairedDiff(r.through, r.direct, p99) }

// check is one must-show target and what the runs got.
type check struct {
	name string
	ok   bool
	got  string
}

// checks are the must-show targets.
func (r *report) checks() []check {
	atLeast := func(name string, v, want float64) check {
		return check{name + " ≥ " + strconv.FormatFloat(want, 'f', -1, 64) + "×", v >= want, times(v)}
	}
	atMostUs := func(name string, v, want float64) check {
		return check{name + " ≤ " + micros(want), v <= want, micros(v)}
	}
	return []check{
		atLeast("1 node ÷ Redis INCR", pairedRatio(r.single, r.incr, perSecond), 0.8),
		{"server CPU per decision ÷ Redis INCR's ≤ 2×", r.cpuRatio() <= 2, times(r.cpuRatio())},
		atLeast("batching client ÷ Redis INCR", pairedRatio(r.batch, r.incr, perSecond), 1.5),
		atLeast("1 node ÷ sorted set at 1,000 entries", pairedRatio(r.single, r.zset1000, perSecond), 10),
		// One decimal: a miss by less than half a percent must not print
		// as the line itself (±20%).
		{"flat within ±20%", r.flatSpread() <= 0.2, fmt.Sprintf("±%.1f%%", 100*r.flatSpread())},
		atLeast("forwarded ÷ local", r.forwardedRatio(), 0.9),
		{"hot tenant ≥ 0.8× spread, admitted exactly its limit", r.hotRatio() >= 0.8 && r.hotExact(),
			times(r.hotRatio()) + ", " + r.hotAdmitted()},
		r.tail16(atMostUs("p99 at 16 workers", medianStat(r.single16, p99), 2000)),
		atMostUs("proxy added p50", r.addedP50(), 200),
		atMostUs("proxy added p99", r.addedP99(), 1000),
		atMostUs("stream first byte through tokenring (p50)", medianStat(r.throughStream, p50), 1000),
	}
}

// ratio is a/b, NaN when b is not positive.
func ratio(a, b float64) float64 {
	if !(b > 0) {
		return math.NaN()
	}
	return a / b
}

func times(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", v)
}

// percent is a share as a percentage ("n/a" when NaN).
func percent(share float64) string {
	if math.IsNaN(share) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*share)
}

func decimal(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}

// micros prints a duration in µs, as ms from 10 ms up.
func micros(us float64) string {
	switch {
	case math.IsNaN(us):
		return "n/a"
	case math.Abs(us) >= 10_000:
		return fmt.Sprintf("%.1f ms", us/1e3)
	}
	return thousands(us) + " µs"
}

// thousands prints v rounded to a whole number with thousands separators.
func thousands(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	var b strings.Builder
	if math.Round(v) < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
