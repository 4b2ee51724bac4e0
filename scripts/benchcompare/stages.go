package main

// The stages of the comparison: the servers each starts, and the runs
// against them.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// loadStartedLine and loadStoppedLine are what `tokenring load -announce`
// prints on stderr as the run's clock starts and when its workers have
// stopped (cmd/tokenring).
const (
	loadStartedLine = "tokenring load: started"
	loadStoppedLine = "tokenring load: stopped"
)

// loadOnce runs `tokenring load -json -announce` with the stage's workers and
// duration and args (later flags win), and measures the CPU the processes
// pids (none: nil), and the load generator itself, spend between its
// started and stopped lines.
func (o options) loadOnce(ctx context.Context, name string, pids []int, args ...string) (measured, error) {
	fmt.Fprintf(o.stderr, "benchcompare: %s\n", name)
	runtime.LockOSThread() // the child's Pdeathsig fires if this thread ends (startServer)
	defer runtime.UnlockOSThread()
	full := append([]string{"load", "-json", "-announce", "-c", strconv.Itoa(o.workers),
		"-d", o.duration.String(), "-n", "1000000000"}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(o.bin, "tokenring"), full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return measured{}, err
	}
	if err := cmd.Start(); err != nil {
		return measured{}, fmt.Errorf("%s: %w", name, err)
	}
	var other []string
	marks := []string{loadStartedLine, loadStoppedLine}
	var cpu, client [2]int64 // the servers' and the load generator's, at each mark
	var ticks [2]cpuTicks    // the machine's, at each mark
	seen := 0                // marks seen, in order
	var cpuErr error
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		if seen < len(marks) && sc.Text() == marks[seen] {
			var err error
			if cpu[seen], err = cpuSum(pids); err != nil && cpuErr == nil {
				cpuErr = err
			}
			if client[seen], err = cpuTime(procRoot, cmd.Process.Pid); err != nil && cpuErr == nil {
				cpuErr = err
			}
			if ticks[seen], err = machineTicks(procRoot); err != nil && cpuErr == nil {
				cpuErr = err
			}
			seen++
			continue
		}
		other = append(other, sc.Text())
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		return measured{}, fmt.Errorf("%s: %w", name, ctx.Err())
	}
	if err != nil {
		return measured{}, fmt.Errorf("%s: tokenring %s: %w\n%s", name, strings.Join(full, " "), err, strings.Join(other, "\n"))
	}
	var m measured
	if err := json.Unmarshal(stdout.Bytes(), &m.res); err != nil {
		return measured{}, fmt.Errorf("%s: output %q: %w", name, stdout.String(), err)
	}
	if m.res.Errors > 0 { // shown in the table beside the run
		fmt.Fprintf(o.stderr, "benchcompare: %s: %d errors (one: %s)\n%s\n", name, m.res.Errors, m.res.FirstError, strings.Join(other, "\n"))
	}
	switch {
	case cpuErr != nil:
		return measured{}, fmt.Errorf("%s: cpu: %w", name, cpuErr)
	case seen != 2:
		return measured{}, fmt.Errorf("%s: the load generator did not print its started and stopped lines", name)
	}
	if pids != nil {
		m.cpuNs = cpu[1] - cpu[0]
	}
	m.clientNs = client[1] - client[0]
	m.steal = stealShare(ticks[0], ticks[1])
	return m, nil
}

// measure runs loadOnce -repeat times and keeps the run with the median
// decisions/s. With a prefix, run k names its tenants repeatPrefix(prefix,
// k), so that no run starts with another's windows or leases.
func (o options) measure(ctx context.Context, name string, pids []int, prefix string, args ...string) (measured, error) {
	runs := make([]measured, 0, o.repeat)
	for k := range o.repeat {
		m, err := o.steady(o.runLabel(name, k), func(label string, try int) (measured, error) {
			a := args
			if prefix != "" { // a try of its own: a tenant whose window no earlier try filled
				a = slices.Concat(args, []string{"-prefix", tryPrefix(repeatPrefix(prefix, k), try)})
			}
			return o.loadOnce(ctx, label, pids, a...)
		})
		if err != nil {
			return measured{}, err
		}
		runs = append(runs, m)
	}
	return medianRun(runs), nil
}

// runLabel is the progress name of run k of measurement name.
func (o options) runLabel(name string, k int) string {
	if o.repeat > 1 {
		return fmt.Sprintf("%s (%d of %d)", name, k+1, o.repeat)
	}
	return name
}

// repeatPrefix is the tenant name prefix of run k of a measurement.
func repeatPrefix(prefix string, k int) string { return fmt.Sprintf("%sr%d-", prefix, k) }

// tryPrefix is the tenant name prefix of a run's try (steady).
func tryPrefix(prefix string, try int) string {
	if try == 0 {
		return prefix
	}
	return fmt.Sprintf("%st%d-", prefix, try)
}

// stealRetries is how many times steady makes a run again.
const stealRetries = 3

// reruns counts what -max-steal did over a comparison.
type reruns struct {
	again int // tries made again
	over  int // runs kept although every try lost more than -max-steal
}

// steady makes a run with run and, with -max-steal set, makes it again, up
// to stealRetries times, while it lost more of the CPUs than that to the
// hypervisor; of tries that all did, the least robbed is kept. Every
// system's runs go through it alike: steal is the host's, not theirs. try
// numbers the tries from 0, for what must differ between them.
func (o options) steady(label string, run func(label string, try int) (measured, error)) (measured, error) {
	var kept, last measured
	for try := 0; ; try++ {
		l := label
		if try > 0 {
			l = fmt.Sprintf("%s, again: %s stolen", label, percent(last.steal))
			o.reruns.again++
		}
		m, err := run(l, try)
		if err != nil {
			return measured{}, err
		}
		if try == 0 || m.steal < kept.steal {
			kept = m
		}
		switch {
		case o.maxSteal <= 0 || m.steal <= o.maxSteal:
			return m, nil
		case try == stealRetries:
			o.reruns.over++
			return kept, nil
		}
		last = m
	}
}

// medianRun is the run with the median decisions/s (of an even number,
// the faster of the middle two); runs is not empty.
func medianRun(runs []measured) measured {
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(a, b measured) int { return cmp.Compare(a.res.PerSecond, b.res.PerSecond) })
	return sorted[len(sorted)/2]
}

// alternated is one measurement of a set whose runs alternate: run makes
// its run k, named label.
type alternated struct {
	name string
	into *measured
	run  func(label string, k int) (measured, error)
}

// alternate runs each of ms -repeat times, one run of each in turn (a
// round), and keeps each one's run with the median decisions/s, with its
// rounds: the ratios between them are then taken round by round
// (rounds.go), between runs made seconds apart, whatever a shared host
// does from one round to the next.
func (o options) alternate(ms []alternated) error {
	runs := make([][]measured, len(ms))
	for k := range o.repeat {
		for i, m := range ms {
			r, err := o.steady(o.runLabel(m.name, k), func(label string, _ int) (measured, error) {
				return m.run(label, k) // a try sets up what its run does: fresh nodes, a flushed redis-server
			})
			if err != nil {
				return err
			}
			runs[i] = append(runs[i], r)
		}
	}
	set := &alternation{rounds: o.repeat}
	for i, m := range ms {
		*m.into = medianRun(runs[i])
		m.into.rounds, m.into.set = runs[i], set
	}
	return nil
}

// zsetKeys10k is the sorted set's keys at 10,000 entries (1,000 at 10 and
// 1,000 entries): 100 × 10,000 prefilled members, as many as 1,000 × 1,000.
const zsetKeys10k = 100

// planned is one measurement of a stage: its progress name, where its
// result goes, and its flags.
type planned struct {
	name   string
	into   *measured
	prefix string // tenant name prefix, varied by repeat (see measure); "": load's default
	args   []string
}

// redisStage runs the sorted set's rows, and those of the flatness
// table, against one redis-server (flushed before each measurement; the
// sorted set's prefill replaces each key a run uses).
func (o options) redisStage(ctx context.Context, r *report) error {
	srv, err := startRedis(ctx, o.redisServer)
	if err != nil {
		return err
	}
	defer srv.stop()
	var zset10k measured
	for _, p := range []planned{
		{"Redis sorted set, 10 entries a key", &r.zset10, "", []string{"-system", "redis-zset", "-entries", "10", "-tenants", "1000"}},
		{"Redis sorted set, 1,000 entries a key", &r.zset1000, "", []string{"-system", "redis-zset", "-entries", "1000", "-tenants", "1000"}},
		{"Redis sorted set, 10,000 entries a key", &zset10k, "", []string{"-system", "redis-zset", "-entries", "10000", "-tenants", strconv.Itoa(zsetKeys10k)}},
	} {
		if err := redisInline(srv.addr, "FLUSHALL", "+OK"); err != nil {
			return err
		}
		if *p.into, err = o.measure(ctx, p.name, []int{srv.pid()}, "", append(p.args, "-redis", srv.addr)...); err != nil {
			return err
		}
	}
	r.flat = []flatPoint{
		{perKey: 10, zset: r.zset10, zsetKeys: 1000},
		{perKey: 1000, zset: r.zset1000, zsetKeys: 1000},
		{perKey: 10_000, zset: zset10k, zsetKeys: zsetKeys10k},
	}
	return nil
}

// limitsYAML are limits no run reaches (the concurrency too: the runs do
// not complete their leases).
const limitsYAML = `limits:
  default: {rpm: 100000000, tpm: 100000000000, concurrency: 100000}
`

// proxyKey is the API key of the proxy runs, the tenant proxyTenant's.
const (
	proxyKey    = "sk-bench"
	proxyTenant = "bench"
)

// singleStage runs one node: single calls against Redis INCR (againstINCR),
// the flatness runs, and the LLM proxy in front of fakellm.
func (o options) singleStage(ctx context.Context, dir string, r *report) error {
	llm, err := startFakeLLM(ctx, o.bin)
	if err != nil {
		return err
	}
	defer llm.stop()
	cfg := filepath.Join(dir, "single.yaml")
	yaml := limitsYAML + fmt.Sprintf("upstream:\n  base_url: http://%s/v1\nkeys:\n  %s: %s\n", llm.addr, proxyKey, proxyTenant)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return err
	}
	single := func(more ...string) func(string) []string {
		return func(target string) []string {
			return slices.Concat([]string{"-targets", target, "-tenants", "1000", "-complete=false"}, more)
		}
	}
	if err := o.againstINCR(ctx, cfg, r, single); err != nil {
		return err
	}
	// The flatness points are ratios of each other: their runs alternate,
	// each on a node of its own.
	flats := make([]alternated, len(r.flat))
	for i := range r.flat {
		f := &r.flat[i]
		f.tenants = flatTenants(r.single.res.PerSecond, o.duration.Seconds(), f.perKey)
		prefix := fmt.Sprintf("flat%d-", f.perKey)
		flats[i] = o.freshRuns(ctx, cfg, 1, fmt.Sprintf("tokenring 1 node, %d requests a key", f.perKey), &f.tokenring,
			func(nodes servers, k int) []string {
				return []string{"-targets", "http://" + nodes[0].addr, "-client", "raw", "-complete=false",
					"-tenants", strconv.Itoa(f.tenants), "-prefix", repeatPrefix(prefix, k)}
			})
	}
	if err := o.alternate(flats); err != nil {
		return err
	}
	return o.onFresh(ctx, cfg, 1, func(nodes servers) error {
		return o.proxyRuns(ctx, r, "http://"+llm.addr, "http://"+nodes[0].addr)
	})
}

// againstINCR measures Redis INCR, one node's single calls and the
// batching client, whose ratios the must-show lines are, both again at 16
// workers, the single calls through net/http's client and served by
// net/http, and the Go floors
// (floor.go), in alternating runs: INCR on a flushed redis-server of its
// own, tokenring on a node of its own each run (none carries an earlier
// run's keys and leases).
func (o options) againstINCR(ctx context.Context, cfg string, r *report, single func(...string) func(string) []string) error {
	srv, err := startRedis(ctx, o.redisServer)
	if err != nil {
		return err
	}
	defer srv.stop()
	incr := func(name string, into *measured, more ...string) alternated {
		return alternated{name, into, func(label string, k int) (measured, error) {
			if err := redisInline(srv.addr, "FLUSHALL", "+OK"); err != nil {
				return measured{}, err
			}
			return o.loadOnce(ctx, label, []int{srv.pid()}, slices.Concat([]string{"-system", "redis-incr", "-tenants", "1000", "-redis", srv.addr}, more)...)
		}}
	}
	floor, stopFloor, err := serveFloor()
	if err != nil {
		return err
	}
	defer stopFloor()
	loop, stopLoop, err := serveFloorLoop()
	if err != nil {
		return err
	}
	defer stopLoop()
	self := []int{os.Getpid()} // the floors serve from this process
	floorRun := func(name string, into *measured, addr string, more ...string) alternated {
		return alternated{name, into, func(label string, k int) (measured, error) {
			return o.loadOnce(ctx, label, self, slices.Concat(single(more...)("http://"+addr), []string{"-client", "raw"})...)
		}}
	}
	node := func(name string, into *measured, prefix string, more ...string) alternated {
		return o.freshRuns(ctx, cfg, 1, name, into, func(nodes servers, k int) []string {
			return slices.Concat(single(more...)("http://"+nodes[0].addr), []string{"-prefix", repeatPrefix(prefix, k)})
		})
	}
	return o.alternate([]alternated{
		incr("Redis INCR", &r.incr),
		node("tokenring 1 node", &r.single, "single-", "-client", "raw"),
		node("tokenring 1 node, batching client", &r.batch, "batch-", "-client", "batch"),
		// The 16-worker tail beside Redis's: the floor this machine gives
		// a networked counter's p99.
		incr("Redis INCR, 16 workers", &r.incr16, "-c", "16"),
		node("tokenring 1 node, 16 workers", &r.single16, "single16-", "-client", "raw", "-c", "16"),
		node("tokenring 1 node, net/http's client", &r.singleNetHTTP, "nethttp-"),
		// The same single calls with the node's event loops and fast path
		// out of the way: what internal/http1 buys, in the same rounds.
		node("tokenring 1 node, served by net/http", &r.servedNetHTTP, servedNetHTTPPrefix, "-client", "raw"),
		// What Go gives a server that decides nothing, on this machine
		// and in this hour: the gap to tokenring is tokenring's own.
		floorRun("Go floor, a goroutine a connection", &r.floor, floor),
		floorRun("Go floor, a goroutine a connection, 16 workers", &r.floor16, floor, "-c", "16"),
		floorRun("Go floor, one event loop, 16 workers", &r.loop16, loop, "-c", "16"),
	})
}

// servedNetHTTPPrefix names the tenants of the run served by net/http. Its
// non-ASCII byte is one the fast path's decoder does not take (jsonwire):
// at the first acquire of each connection the event loop and ServePlain
// decline, and net/http serves that connection from then on, every acquire
// decoded by encoding/json, as a node does any request the fast path
// declines (ARCHITECTURE.md, "internal/http1: what it relies on and what
// it gives up"). The name is a valid tenant all the same.
const servedNetHTTPPrefix = "nethttp-é-"

// freshRuns is measurement name of an alternated set whose run k drives n
// nodes started for it on cfg with the load generator's arguments args.
func (o options) freshRuns(ctx context.Context, cfg string, n int, name string, into *measured, args func(nodes servers, k int) []string) alternated {
	return alternated{name, into, func(label string, k int) (m measured, err error) {
		err = o.onFresh(ctx, cfg, n, func(nodes servers) (err error) {
			m, err = o.loadOnce(ctx, label, nodes.pids(), args(nodes, k)...)
			return err
		})
		return m, err
	}}
}

// onFresh starts n nodes on cfg, runs f against them, and stops them.
// Each tokenring measurement gets nodes of its own, as each Redis one gets
// a flushed server: the runs do not complete their leases, so nodes kept
// from one measurement to the next would make the later ones carry the
// earlier ones' leases (held for lease_ttl) in their heap.
func (o options) onFresh(ctx context.Context, cfg string, n int, f func(servers) error) error {
	nodes, err := startCluster(ctx, o.bin, cfg, n)
	if err != nil {
		return err
	}
	defer nodes.stop()
	return nodes.explain(f(nodes))
}

// flatTenants is how many tenants a run at perSecond decisions for seconds
// spreads over so that each key gets perKey requests: at least one.
func flatTenants(perSecond, seconds float64, perKey int) int {
	return max(1, int(math.Round(perSecond*seconds/float64(perKey))))
}

// proxyRuns times chat completions sequentially (one worker), to fakellm
// directly, through the node, and through Go's standard reverse proxy
// (referenceProxy), whole and (but the reference) streamed. The added
// latency is a difference of two runs, so the runs alternate.
func (o options) proxyRuns(ctx context.Context, r *report, direct, through string) error {
	ref, stop, err := referenceProxy(direct)
	if err != nil {
		return err
	}
	defer stop()
	hop, stopRelay, err := relay(direct)
	if err != nil {
		return err
	}
	defer stopRelay()
	run := func(name string, into *measured, args ...string) alternated {
		args = append([]string{"-system", "proxy", "-c", "1", "-api-key", proxyKey, "-model", "gpt-4o-mini"}, args...)
		return alternated{name, into, func(label string, _ int) (measured, error) {
			return o.loadOnce(ctx, label, nil, args...)
		}}
	}
	return o.alternate([]alternated{
		run("proxy: fakellm directly", &r.direct, "-targets", direct),
		run("proxy: through tokenring", &r.through, "-targets", through),
		run("proxy: through Go's httputil.ReverseProxy", &r.reference, "-targets", "http://"+ref),
		run("proxy: through a TCP relay", &r.relay, "-targets", "http://"+hop),
		run("proxy: fakellm directly, streamed", &r.directStream, "-targets", direct, "-stream"),
		run("proxy: through tokenring, streamed", &r.throughStream, "-targets", through, "-stream"),
	})
}

// clusterStage runs three nodes: tenants at their owners, forwarded, and
// one hot tenant with a limit the run exceeds.
func (o options) clusterStage(ctx context.Context, dir string, r *report) error {
	// A tenth of what one node decided in a run (in thousands): three
	// nodes round robin, two thirds of the calls forwarded, exceed it
	// unless they are ten times as slow.
	r.hotLimit = max(1000, int(math.Round(r.single.res.PerSecond*o.duration.Seconds()/10/1000))*1000)
	cfg := filepath.Join(dir, "cluster.yaml")
	yaml := limitsYAML + "  tenants:\n"
	for k := range o.repeat { // the hot tenant of each run: hot-rK-0
		yaml += fmt.Sprintf("    %s0: {rpm: %d, tpm: 100000000000, concurrency: 100000000}\n", repeatPrefix("hot-", k), r.hotLimit)
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return err
	}
	clusterArgs := func(nodes servers, more ...string) []string {
		targets := "http://" + nodes[0].addr + ",http://" + nodes[1].addr + ",http://" + nodes[2].addr
		return slices.Concat([]string{"-targets", targets, "-client", "raw", "-complete=false"}, more)
	}
	// Local and forwarded are a ratio: their runs alternate, each on a
	// cluster of its own.
	pair := func(name string, into *measured, prefix, route string) alternated {
		return o.freshRuns(ctx, cfg, 3, name, into, func(nodes servers, k int) []string {
			return clusterArgs(nodes, "-route", route, "-tenants", "1000", "-prefix", repeatPrefix(prefix, k))
		})
	}
	if err := o.alternate([]alternated{
		pair("tokenring 3 nodes, -route owner", &r.local, "owner-", "owner"),
		pair("tokenring 3 nodes, -route other", &r.forwarded, "other-", "other"),
	}); err != nil {
		return err
	}
	hot := planned{"tokenring 3 nodes, one hot tenant", &r.hot, "hot-", []string{"-tenants", "1"}}
	return o.onFresh(ctx, cfg, 3, func(nodes servers) (err error) {
		*hot.into, err = o.measure(ctx, hot.name, nodes.pids(), hot.prefix, clusterArgs(nodes, hot.args...)...)
		return err
	})
}
