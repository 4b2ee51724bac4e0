package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tokenring "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// loadConfig is what `tokenring load` does.
type loadConfig struct {
	targets      []string
	workers      int
	requests     int
	duration     time.Duration
	tenants      int
	prefix       string
	route        string // rr, owner, other
	clientMode   string // http (one request per call), raw (the same, HTTP/1.1 written by the worker) or batch (through one client.Client per target)
	complete     bool
	promptTokens int
	maxTokens    int
	model        string
	seed         uint64
	json         bool

	system     string // what decides: tokenring, redis-incr, redis-zset, proxy or rls (see systems)
	redisAddr  string // host:port of the redis-server of the redis-* systems
	rlsAddr    string // host:port of the rate limit service of -system rls
	rlsConfig  string // rls: the service's config file, the requests are made from (rlsmix.go)
	conns      int    // rls: gRPC connections, the workers taking them in turn
	entries    int    // redis-zset: entries each key's sorted set holds (prefilled, then kept)
	prefill    int    // tokenring: requests each tenant's window holds before the run (acquired and completed)
	stream     bool   // proxy: stream the completion; the latency is then the time to its first byte
	apiKey     string // proxy: the Authorization: Bearer key (a key of the node's keys: map)
	cpuProfile string // -cpuprofile: where the generator's own CPU profile of the run is written ("" for none)
	// announce, when not nil, gets the line loadStartedLine as the run's
	// clock starts (after routes, connections and any prefill), and
	// loadStoppedLine when its workers have stopped: -announce.
	announce io.Writer
}

// loadStartedLine and loadStoppedLine are what -announce prints on stderr
// as the clock starts and when the workers have stopped (before the result
// is added up and the connections closed), so that a script can sample the
// servers over the timed run only.
const (
	loadStartedLine = "tokenring load: started"
	loadStoppedLine = "tokenring load: stopped"
)

// loadResult is what it measured.
type loadResult struct {
	Requests    int            `json:"requests"`              // decisions answered (acquires; INCRs or scripts; completions under -system proxy), whatever the status (each has a latency)
	Allowed     int            `json:"allowed"`               // 200 {"allowed":true}
	Refused     int            `json:"refused"`               // 429
	Fallback    int            `json:"fallback"`              // answers flagged "fallback":true, allowed or refused
	Errors      int            `json:"errors"`                // transport errors, and answers neither allowed nor refused (a 503, a 400, a 200 without "allowed":true)
	FirstError  string         `json:"first_error,omitempty"` // what one of them was: a worker's first
	Codes       map[string]int `json:"codes"`                 // answers by HTTP status
	Seconds     float64        `json:"seconds"`               // the run's wall time
	PerSecond   float64        `json:"decisions_per_second"`  // (allowed + refused) / seconds
	P50us       float64        `json:"p50_us"`                // latency quantiles of the answered acquires
	P90us       float64        `json:"p90_us"`
	P99us       float64        `json:"p99_us"`
	MaxUs       float64        `json:"max_us"`
	Route       string         `json:"route"`
	Workers     int            `json:"workers"`
	Completions int            `json:"completions"` // admitted leases completed: /v1/complete answered 200 "settled":true
	// Descriptors (-system rls) are the answers' statuses of each
	// descriptor of the requests, by its place in them.
	Descriptors []descriptorCount `json:"descriptors,omitempty"`
}

// maxWorkers and maxRoutedTenants bound -c, and -tenants under -route
// owner or other (one admin lookup per tenant, before the run).
// maxEntries and maxPrefill bound -entries of -system redis-zset, and the
// entries its prefill writes in all (-entries × -tenants), or the requests
// -prefill sends in all (-prefill × -tenants).
const (
	maxWorkers       = 10_000
	maxRoutedTenants = 100_000
	maxEntries       = 1_000_000
	maxPrefill       = 10_000_000
)

// defaultTargets are the nodes `make cluster` starts (scripts/cluster.sh).
const defaultTargets = "http://127.0.0.1:8081,http://127.0.0.1:8082,http://127.0.0.1:8083"

const loadAbout = `Drives the decision API (/v1/acquire, then /v1/complete for each admitted
lease) with -c workers until -n requests or -d have passed, and prints the
throughput and latency. By default it sends to the three nodes of
make cluster (127.0.0.1:8081-8083), round-robin; against make run's single
node give -targets http://127.0.0.1:8080, and against a cluster on other
ports (make cluster CLUSTER_HTTP=9081 ...) the line it prints, -targets
http://127.0.0.1:9081,http://127.0.0.1:9082,http://127.0.0.1:9083. With -client batch the workers call
through one batching client per node (package client): calls made while
others are in flight share POST /v1/batch requests; with -client raw each
worker writes and reads HTTP/1.1 itself on its own kept-alive connection (as
wrk does), so that the generator's cost hides less of the server's.

The same workers, loop and latency recording drive the baselines:
-system redis-incr (one INCR per decision, the floor of any Redis limiter)
and redis-zset (the sorted-set sliding log, one EVALSHA per decision) against
-redis host:port, -system proxy times POST /v1/chat/completions against
-targets (tokenringd's LLM proxy, or the upstream directly), and -system rls
calls Envoy's rate limit service (gRPC ShouldRateLimit) at -rls host:port over
-conns connections, with requests made from -rls-config, the service's YAML
config (envoyproxy/ratelimit's format): its domain, a descriptor for each
top-level key, a tenant's name as the value of keys that take any value, one
of the literal values otherwise. An OK counts as allowed, OVER_LIMIT as
refused.`

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseLoad(args, stderr)
	if err != nil {
		return err
	}
	stop, err := startCPUProfile(c.cpuProfile)
	if err != nil {
		return err
	}
	res, err := load(ctx, c)
	if err := errors.Join(err, stop()); err != nil {
		return err
	}
	if c.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "route=%s workers=%d requests=%d allowed=%d refused=%d fallback=%d errors=%d codes=%v\n",
		res.Route, res.Workers, res.Requests, res.Allowed, res.Refused, res.Fallback, res.Errors, res.Codes)
	fmt.Fprintf(stdout, "%.0f decisions/s over %.2fs; latency p50 %.0fµs p90 %.0fµs p99 %.0fµs max %.0fµs\n",
		res.PerSecond, res.Seconds, res.P50us, res.P90us, res.P99us, res.MaxUs)
	if res.FirstError != "" {
		fmt.Fprintf(stdout, "first error: %s\n", res.FirstError)
	}
	for i, d := range res.Descriptors {
		fmt.Fprintf(stdout, "descriptor %d (%s): ok=%d over_limit=%d\n", i+1, d.Key, d.OK, d.OverLimit)
	}
	return nil
}

// parseLoad parses and checks the flags of `tokenring load`; every mistake
// is an error wrapping errUsage, found before any request is sent.
func parseLoad(args []string, stderr io.Writer) (loadConfig, error) {
	var c loadConfig
	fs := newFlagSet("load", stderr)
	targets := fs.String("targets", defaultTargets, "comma-separated node base `URLs`: the three nodes of make cluster unless given (make run: -targets http://127.0.0.1:8080)")
	fs.IntVar(&c.workers, "c", 64, "concurrent `workers`")
	fs.IntVar(&c.requests, "n", 20000, "total acquire `requests` (the run stops at -n or -d, whichever first)")
	fs.DurationVar(&c.duration, "d", 10*time.Second, "maximum `duration`")
	fs.IntVar(&c.tenants, "tenants", 1000, "distinct `tenants`, chosen at random per request")
	fs.StringVar(&c.prefix, "prefix", "load-", "tenant name `prefix`")
	fs.StringVar(&c.route, "route", "rr", "where to send each request: rr (round-robin over -targets), owner (the tenant's owner: local decisions), other (a node that is not the owner: forwarded decisions)")
	fs.StringVar(&c.clientMode, "client", "http", "how workers call: http (one HTTP request per call through net/http), raw (one HTTP/1.1 request per call, written and read by the worker over its own kept-alive connection, as wrk does) or batch (through one batching client per target: calls made at once share POST /v1/batch requests)")
	fs.BoolVar(&c.complete, "complete", true, "complete each admitted lease (frees its slot)")
	fs.IntVar(&c.promptTokens, "prompt-tokens", 100, "prompt_tokens per request")
	fs.IntVar(&c.maxTokens, "max-tokens", 100, "max_tokens per request")
	fs.StringVar(&c.model, "model", "", "model (selects a pool if configured)")
	fs.Uint64Var(&c.seed, "seed", 1, "random `seed` for tenant choice")
	fs.BoolVar(&c.json, "json", false, "print the result as JSON")
	fs.StringVar(&c.system, "system", "tokenring", "what decides: tokenring (POST /v1/acquire to -targets), redis-incr (one INCR per decision at -redis), redis-zset (a sorted-set sliding log in one EVALSHA at -redis, -entries a key), proxy (POST /v1/chat/completions to -targets: tokenringd's LLM proxy or the upstream itself) or rls (gRPC ShouldRateLimit at -rls)")
	fs.StringVar(&c.redisAddr, "redis", "", "redis-server `host:port` of -system redis-incr and redis-zset")
	fs.StringVar(&c.rlsAddr, "rls", "", "rate limit service `host:port` (gRPC) of -system rls")
	fs.StringVar(&c.rlsConfig, "rls-config", "", "rls: the service's YAML config `file` (envoyproxy/ratelimit's format) the requests are made from")
	fs.IntVar(&c.conns, "conns", 4, "rls: gRPC `connections` (at most one a worker), the workers taking them in turn")
	fs.IntVar(&c.entries, "entries", 10, "redis-zset: `entries` each tenant's sorted set holds (prefilled before the run, then trimmed to the newest -entries)")
	fs.IntVar(&c.prefill, "prefill", 0, "tokenring: `requests` each tenant's window holds before the run's clock starts (each acquired and completed at once, through batching clients), as -entries fills redis-zset's sorted sets")
	fs.BoolVar(&c.stream, "stream", false, "proxy: ask for a streamed completion; the latency is then the time to its first byte")
	announce := fs.Bool("announce", false, "print \""+loadStartedLine+"\" on stderr when the run's clock starts (after routes, connections and any prefill), and \""+loadStoppedLine+"\" when its workers have stopped")
	fs.StringVar(&c.apiKey, "api-key", "", "proxy: API `key` sent as Authorization: Bearer (a key of the node's keys: config)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile of the run to `file` (go tool pprof reads it)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tokenring load [flags]\n\n%s\n\nflags:\n", loadAbout)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, fmt.Errorf("%w: %w", errUsage, err) // -h: flag.ErrHelp, usage printed (exitCode: 0)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *announce {
		c.announce = stderr
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimRight(strings.TrimSpace(t), "/"); t != "" {
			c.targets = append(c.targets, t)
		}
	}
	if err := c.check(); err != nil {
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	return c, nil
}

// check validates a parsed loadConfig.
func (c loadConfig) check() error {
	if len(c.targets) == 0 {
		return errors.New("-targets is empty")
	}
	for _, t := range c.targets {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("-targets: %q is not an http(s) base URL", t)
		}
	}
	switch {
	case c.workers < 1 || c.requests < 1 || c.tenants < 1 || c.duration <= 0:
		return errors.New("-c, -n, -tenants and -d must be positive")
	case c.workers > maxWorkers:
		return fmt.Errorf("-c must be at most %d", maxWorkers)
	case c.route != "rr" && c.route != "owner" && c.route != "other":
		return errors.New("-route must be rr, owner or other")
	case c.clientMode != "http" && c.clientMode != "batch" && c.clientMode != "raw":
		return errors.New("-client must be http, raw or batch")
	case c.route != "rr" && c.tenants > maxRoutedTenants:
		return fmt.Errorf("-tenants must be at most %d with -route %s", maxRoutedTenants, c.route)
	case c.promptTokens < 0 || c.maxTokens < 1:
		return errors.New("-prompt-tokens must be at least 0 and -max-tokens at least 1")
	}
	return c.checkSystem()
}

// checkSystem validates -system and the flags that only some systems read.
func (c loadConfig) checkSystem() error {
	redis := c.system == "redis-incr" || c.system == "redis-zset"
	switch {
	case !slices.Contains(systems, c.system):
		return fmt.Errorf("-system must be one of %s", strings.Join(systems, ", "))
	case redis && c.redisAddr == "":
		return fmt.Errorf("-system %s needs -redis host:port", c.system)
	case !redis && c.redisAddr != "":
		return fmt.Errorf("-redis is for -system redis-incr and redis-zset, not %s", c.system)
	case c.system == "rls" && (c.rlsAddr == "" || c.rlsConfig == ""):
		return errors.New("-system rls needs -rls host:port and -rls-config file")
	case c.system != "rls" && (c.rlsAddr != "" || c.rlsConfig != ""):
		return fmt.Errorf("-rls and -rls-config are for -system rls, not %s", c.system)
	case c.conns < 1 || c.conns > maxWorkers:
		return fmt.Errorf("-conns must be between 1 and %d", maxWorkers)
	case c.system == "redis-zset" && (c.entries < 1 || c.entries > maxEntries):
		return fmt.Errorf("-entries must be between 1 and %d", maxEntries)
	case c.system == "redis-zset" && int64(c.entries)*int64(c.tenants) > maxPrefill:
		return fmt.Errorf("-entries × -tenants must be at most %d (the prefill)", maxPrefill)
	case c.prefill != 0 && c.system != "tokenring":
		return fmt.Errorf("-prefill is for -system tokenring, not %s (redis-zset: -entries)", c.system)
	case c.prefill < 0 || int64(c.prefill)*int64(c.tenants) > maxPrefill:
		return fmt.Errorf("-prefill must be at least 0, and -prefill × -tenants at most %d", maxPrefill)
	case c.system != "tokenring" && (c.route != "rr" || c.clientMode != "http"):
		return fmt.Errorf("-route and -client are for -system tokenring, not %s", c.system)
	case c.system != "proxy" && (c.stream || c.apiKey != ""):
		return fmt.Errorf("-stream and -api-key are for -system proxy, not %s", c.system)
	}
	return nil
}

// routes returns, per tenant index, the base URL to send its requests to.
func routes(ctx context.Context, client *http.Client, c loadConfig) ([]string, error) {
	if c.route == "rr" {
		return nil, nil
	}
	out := make([]string, c.tenants)
	var ring struct {
		Members []struct{ Name, HTTP string } `json:"members"`
	}
	if err := getJSON(ctx, client, c.targets[0]+"/admin/ring", &ring); err != nil {
		return nil, err
	}
	httpOf := map[string]string{}
	var all []string
	for _, m := range ring.Members {
		httpOf[m.Name] = "http://" + m.HTTP
		all = append(all, m.Name)
	}
	if c.route == "other" && len(all) < 2 {
		return nil, fmt.Errorf("-route other needs at least two members, the ring has %d", len(all))
	}
	for i := range out {
		var o struct{ Owner string }
		if err := getJSON(ctx, client, c.targets[0]+"/admin/owner?tenant="+tenantName(c, i), &o); err != nil {
			return nil, err
		}
		target := o.Owner
		if c.route == "other" {
			target = all[(slices.Index(all, o.Owner)+1)%len(all)]
		}
		out[i] = httpOf[target]
	}
	return out, nil
}

// tenantName is the name of tenant i: -prefix and i.
func tenantName(c loadConfig, i int) string { return c.prefix + strconv.Itoa(i) }

// maxNamedTenants bounds the names tenantNames makes ahead (about 40
// bytes each): tenants past it are named at each call.
const maxNamedTenants = 1 << 20

// tenantNames are the names of the run's first tenants (all of them up to
// maxNamedTenants), made once so that the workers do not format one per call.
func tenantNames(c loadConfig) []string {
	names := make([]string, min(c.tenants, maxNamedTenants))
	for i := range names {
		names[i] = tenantName(c, i)
	}
	return names
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// load runs the workers until -n decisions are asked for or -d has
// passed, whichever comes first, and aggregates what they saw. Whatever the
// system, the workers run the same loop (worker.run) over its decideFunc.
func load(ctx context.Context, c loadConfig) (loadResult, error) {
	sys, err := newSystem(ctx, c)
	if err != nil {
		return loadResult{}, err
	}
	defer sys.close()
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	quota := &quota{}
	quota.left.Store(int64(c.requests))
	names := tenantNames(c)
	workers := make([]*worker, c.workers)
	if c.announce != nil {
		fmt.Fprintln(c.announce, loadStartedLine)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{c: c, decide: sys.decider(i), quota: quota, names: names,
			rng: newWorkerRand(c, i), codes: map[int]int{}}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if c.announce != nil {
		fmt.Fprintln(c.announce, loadStoppedLine)
	}
	res, err := summarize(c, workers, elapsed)
	if s, ok := sys.(counter); ok && err == nil {
		s.count(&res)
	}
	return res, err
}

// newWorkerRand is worker id's tenant chooser: seeded by -seed and id.
func newWorkerRand(c loadConfig, id int) *rand.Rand { return rand.New(rand.NewPCG(c.seed, uint64(id))) }

// quota hands out the -n acquires to the workers (an atomic counter: a
// mutex here, taken by every worker before every call, was the load
// generator's own point of contention).
type quota struct{ left atomic.Int64 }

// take reports whether an acquire is left to send, and takes it.
func (q *quota) take() bool { return q.left.Add(-1) >= 0 }

// outcome is one decision as the worker loop counts it.
type outcome struct {
	// err is a transport error: the decision was not answered (it counts
	// as an error unless the run was ending, and has no latency).
	err error
	// code is the answer's HTTP status (the Redis systems: 200 for an
	// admission, 429 for a refusal). 200 with allowed is an admission, 429
	// a refusal, anything else an error.
	code     int
	allowed  bool
	fallback bool
	// complete, when not nil, settles the admitted lease (run after the
	// latency is taken, under -complete); it reports whether it settled.
	complete func(ctx context.Context) bool
	// drain, when not nil, reads the rest of the answer after the latency
	// is taken (a stream past its first byte); it is always called.
	drain func()
}

// decideFunc asks the system under test for one decision for tenant (the
// name of tenant index ti) as the i-th call of its worker.
type decideFunc func(ctx context.Context, i, ti int, tenant string) outcome

// worker asks for decisions one after the other and counts what it saw.
// Only its own goroutine touches it until load has waited for it.
type worker struct {
	c      loadConfig
	decide decideFunc
	quota  *quota
	names  []string // the first tenants' names (tenantNames)
	rng    *rand.Rand

	lat                                             []time.Duration // of every answered decision
	allowed, refused, fallback, errors, completions int
	codes                                           map[int]int // answers by HTTP status
	firstError                                      string      // its first error's
}

// run asks for decisions until the quota is spent or ctx ends, timing each.
func (w *worker) run(ctx context.Context) {
	for i := 0; !ended(ctx) && w.quota.take(); i++ {
		ti := w.rng.IntN(w.c.tenants)
		t0 := time.Now()
		o := w.decide(ctx, i, ti, w.tenant(ti))
		w.count(ctx, o, time.Since(t0))
	}
}

// ended reports whether the run is over: ctx ended, or its deadline has
// passed. The second comes first by a timer's latency, and a client may
// see it before ctx does: gRPC fails a call whose deadline has passed at
// once (DeadlineExceeded), and a worker would fail call after call until
// ctx's timer fired, each counted as an error.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// tenant is the name of tenant ti: made ahead, or now past maxNamedTenants.
func (w *worker) tenant(ti int) string {
	if ti < len(w.names) {
		return w.names[ti]
	}
	return tenantName(w.c, ti)
}

// count adds one outcome that took lat, and completes its lease if it was
// admitted and -complete is set. A decision cut by the end of the run
// counts as nothing.
func (w *worker) count(ctx context.Context, o outcome, lat time.Duration) {
	if o.drain != nil {
		o.drain()
	}
	if o.err != nil {
		if !ended(ctx) {
			w.error(o.err.Error())
		}
		return
	}
	w.lat = append(w.lat, lat)
	w.codes[o.code]++
	if o.fallback {
		w.fallback++
	}
	switch {
	case o.code == http.StatusOK && o.allowed:
		w.allowed++
		if w.c.complete && o.complete != nil && o.complete(ctx) {
			w.completions++
		}
	case o.code == http.StatusTooManyRequests:
		w.refused++
	default:
		w.error(fmt.Sprintf("an answer with code %d, neither an admission nor a refusal", o.code))
	}
}

// error counts an error, said by what.
func (w *worker) error(what string) {
	w.errors++
	if w.firstError == "" {
		w.firstError = what
	}
}

// summarize adds up what the workers saw in a run that took elapsed.
func summarize(c loadConfig, workers []*worker, elapsed time.Duration) (loadResult, error) {
	res := loadResult{Codes: map[string]int{}, Seconds: elapsed.Seconds(), Route: c.route, Workers: c.workers}
	var lat []time.Duration
	for _, w := range workers {
		lat = append(lat, w.lat...)
		res.Allowed += w.allowed
		res.Refused += w.refused
		res.Fallback += w.fallback
		res.Errors += w.errors
		if res.FirstError == "" {
			res.FirstError = w.firstError
		}
		res.Completions += w.completions
		for k, v := range w.codes {
			res.Codes[strconv.Itoa(k)] += v
		}
	}
	res.Requests = len(lat)
	if res.Requests == 0 {
		return res, fmt.Errorf("no request was answered (%d errors)", res.Errors)
	}
	res.PerSecond = float64(res.Allowed+res.Refused) / elapsed.Seconds()
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	res.P50us, res.P90us, res.P99us, res.MaxUs = q(0.50), q(0.90), q(0.99), q(1)
	return res, nil
}

// decision is the part of an acquire (or complete) answer the load
// generator reads.
type decision struct {
	Allowed  bool   `json:"allowed"`
	Lease    string `json:"lease"`
	Fallback bool   `json:"fallback"`
	Settled  bool   `json:"settled"` // of /v1/complete
}

func post(ctx context.Context, client *http.Client, url, body string) (int, decision, error) {
	var d decision
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		return 0, d, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, d, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, d, err
	}
	_ = json.Unmarshal(raw, &d)
	return resp.StatusCode, d, nil
}

// startCPUProfile starts the process's CPU profile into path, unless path is
// empty; the function it returns stops it and closes the file.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
