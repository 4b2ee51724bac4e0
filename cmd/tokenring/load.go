package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	complete     bool
	promptTokens int
	maxTokens    int
	model        string
	seed         uint64
	json         bool
}

// loadResult is what it measured.
type loadResult struct {
	Requests    int            `json:"requests"`
	Allowed     int            `json:"allowed"`
	Refused     int            `json:"refused"`
	Fallback    int            `json:"fallback"`
	Errors      int            `json:"errors"`
	Codes       map[string]int `json:"codes"`
	Seconds     float64        `json:"seconds"`
	PerSecond   float64        `json:"decisions_per_second"`
	P50us       float64        `json:"p50_us"`
	P90us       float64        `json:"p90_us"`
	P99us       float64        `json:"p99_us"`
	MaxUs       float64        `json:"max_us"`
	Route       string         `json:"route"`
	Workers     int            `json:"workers"`
	Completions int            `json:"completions"`
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c loadConfig
	fs := newFlagSet("load", stderr)
	targets := fs.String("targets", "http://127.0.0.1:8080", "comma-separated node base `URLs`")
	fs.IntVar(&c.workers, "c", 64, "concurrent `workers`")
	fs.IntVar(&c.requests, "n", 20000, "total acquire `requests` (the run stops at -n or -d, whichever first)")
	fs.DurationVar(&c.duration, "d", 10*time.Second, "maximum `duration`")
	fs.IntVar(&c.tenants, "tenants", 1000, "distinct `tenants`, chosen at random per request")
	fs.StringVar(&c.prefix, "prefix", "load-", "tenant name `prefix`")
	fs.StringVar(&c.route, "route", "rr", "where to send each request: rr (round-robin over -targets), owner (the tenant's owner: local decisions), other (a node that is not the owner: forwarded decisions)")
	fs.BoolVar(&c.complete, "complete", true, "complete each admitted lease (frees its slot)")
	fs.IntVar(&c.promptTokens, "prompt-tokens", 100, "prompt_tokens per request")
	fs.IntVar(&c.maxTokens, "max-tokens", 100, "max_tokens per request")
	fs.StringVar(&c.model, "model", "", "model (selects a pool if configured)")
	fs.Uint64Var(&c.seed, "seed", 1, "random `seed` for tenant choice")
	fs.BoolVar(&c.json, "json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, t := range strings.Split(*targets, ",") {
		if t = strings.TrimRight(strings.TrimSpace(t), "/"); t != "" {
			c.targets = append(c.targets, t)
		}
	}
	switch {
	case len(c.targets) == 0:
		return fmt.Errorf("%w: -targets is empty", errUsage)
	case c.workers < 1 || c.requests < 1 || c.tenants < 1 || c.duration <= 0:
		return fmt.Errorf("%w: -c, -n, -tenants and -d must be positive", errUsage)
	case c.route != "rr" && c.route != "owner" && c.route != "other":
		return fmt.Errorf("%w: -route must be rr, owner or other", errUsage)
	}
	res, err := load(ctx, c)
	if err != nil {
		return err
	}
	if c.json {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "route=%s workers=%d requests=%d allowed=%d refused=%d fallback=%d errors=%d codes=%v\n",
		res.Route, res.Workers, res.Requests, res.Allowed, res.Refused, res.Fallback, res.Errors, res.Codes)
	fmt.Fprintf(stdout, "%.0f decisions/s over %.2fs; latency p50 %.0fµs p90 %.0fµs p99 %.0fµs max %.0fµs\n",
		res.PerSecond, res.Seconds, res.P50us, res.P90us, res.P99us, res.MaxUs)
	return nil
}

// routes returns, per tenant index, the base URL to send its requests to.
func routes(ctx context.Context, client *http.Client, c loadConfig) ([]string, error) {
	out := make([]string, c.tenants)
	if c.route == "rr" {
		return nil, nil
	}
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

func tenantName(c loadConfig, i int) string { return fmt.Sprintf("%s%d", c.prefix, i) }

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

// load runs the workers and aggregates what they saw.
func load(ctx context.Context, c loadConfig) (loadResult, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: c.workers, MaxIdleConns: c.workers * len(c.targets)},
	}
	defer client.CloseIdleConnections()
	routeOf, err := routes(ctx, client, c)
	if err != nil {
		return loadResult{}, fmt.Errorf("routes: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()

	type workerResult struct {
		lat                                             []time.Duration
		allowed, refused, fallback, errors, completions int
		codes                                           map[string]int
	}
	results := make([]workerResult, c.workers)
	var next sync.Mutex
	issued := 0
	take := func() bool {
		next.Lock()
		defer next.Unlock()
		if issued >= c.requests {
			return false
		}
		issued++
		return true
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			r.codes = map[string]int{}
			rng := rand.New(rand.NewPCG(c.seed, uint64(w)))
			for i := 0; ctx.Err() == nil && take(); i++ {
				ti := rng.IntN(c.tenants)
				tenant := tenantName(c, ti)
				base := c.targets[(w+i)%len(c.targets)]
				if routeOf != nil {
					base = routeOf[ti]
				}
				body := fmt.Sprintf(`{"tenant":%q,"model":%q,"prompt_tokens":%d,"max_tokens":%d}`, tenant, c.model, c.promptTokens, c.maxTokens)
				t0 := time.Now()
				code, out, err := post(ctx, client, base+"/v1/acquire", body)
				lat := time.Since(t0)
				if err != nil {
					if ctx.Err() == nil {
						r.errors++
					}
					continue
				}
				r.lat = append(r.lat, lat)
				r.codes[fmt.Sprint(code)]++
				if out.Fallback {
					r.fallback++
				}
				switch {
				case code == http.StatusOK && out.Allowed:
					r.allowed++
					if c.complete {
						cb := fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, tenant, out.Lease, c.promptTokens, c.maxTokens/2)
						if _, _, err := post(ctx, client, base+"/v1/complete", cb); err == nil {
							r.completions++
						}
					}
				case code == http.StatusTooManyRequests:
					r.refused++
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := loadResult{Codes: map[string]int{}, Seconds: elapsed.Seconds(), Route: c.route, Workers: c.workers}
	var lat []time.Duration
	for _, r := range results {
		lat = append(lat, r.lat...)
		res.Allowed += r.allowed
		res.Refused += r.refused
		res.Fallback += r.fallback
		res.Errors += r.errors
		res.Completions += r.completions
		for k, v := range r.codes {
			res.Codes[k] += v
		}
	}
	res.Requests = len(lat)
	if res.Requests == 0 {
		return res, fmt.Errorf("no request succeeded (%d errors)", res.Errors)
	}
	res.PerSecond = float64(res.Requests) / elapsed.Seconds()
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	res.P50us, res.P90us, res.P99us, res.MaxUs = q(0.50), q(0.90), q(0.99), q(1)
	return res, nil
}

// decision is the part of an acquire answer the load generator reads.
type decision struct {
	Allowed  bool   `json:"allowed"`
	Lease    string `json:"lease"`
	Fallback bool   `json:"fallback"`
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
