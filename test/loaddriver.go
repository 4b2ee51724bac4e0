package test

// A load driver for the multi-process tests: K client goroutines keep sending
// acquires for N tenants through every currently-live node, the way clients
// behind a load balancer would, and count per tenant what came back.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LoadConfig configures a LoadDriver. Zero fields take the documented
// defaults.
type LoadConfig struct {
	// Clients is the number of client goroutines (K). Default 16.
	Clients int
	// Tenants are the tenants acquired for, round robin. Required.
	Tenants []string
	// Body returns the JSON body of one acquire for tenant. Default
	// {"tenant":...,"prompt_tokens":1,"max_tokens":1}.
	Body func(tenant string) string
	// Targets returns the candidate nodes; it is called again at every
	// health poll, so a node started later (a joiner) gets traffic once it
	// passes its health check. Only Name, URL() and Client of each are
	// used: a Proc with its own Client is reached with it (acquires and
	// health checks alike), any other with the driver's clients.
	// Required.
	Targets func() []*Proc
	// NoHealthCheck sends to every target without polling /readyz (a
	// load balancer's own address, say).
	NoHealthCheck bool
	// CheckEvery is the interval of the /readyz polls, like a load
	// balancer's health check. A node whose last check failed gets no new
	// requests; one whose last check passed does. Default 100 ms.
	CheckEvery time.Duration
	// CheckTimeout bounds one /readyz poll. Default 500 ms.
	CheckTimeout time.Duration
	// MaxRequests bounds the acquires sent in all. Default 100,000.
	MaxRequests int
	// MaxDuration bounds the driver's run. Default 2 minutes.
	MaxDuration time.Duration
	// Pace is how long each client waits between two of its acquires.
	// Zero sends back to back.
	Pace time.Duration
	// RequestTimeout bounds one acquire. Default 10 s.
	RequestTimeout time.Duration
	// Hold, when set, makes a client hold each allowed acquire's lease
	// for a random time in [0, Hold), then complete it (POST /v1/complete
	// through a live node, with Usage), before its next acquire. A
	// complete that fails is tried once more through another live node,
	// as a gateway would; one that fails twice is a client error.
	Hold time.Duration
	// Usage is the usage a complete reports. Default {"prompt_tokens":1,
	// "completion_tokens":1}.
	Usage string
}

// TenantTally is what the clients got for one tenant.
type TenantTally struct {
	Allowed   int            // 200 {"allowed":true}
	Refused   int            // 429 {"allowed":false}
	Reasons   map[string]int // refusals by reason
	Errors    int            // transport errors, statuses other than 200/429, malformed answers
	Fallbacks int            // well-formed answers flagged "fallback":true (allowed or refused)
	// FallbackAllowed counts the allowed answers among Fallbacks.
	FallbackAllowed int
	// With LoadConfig.Hold: leases completed, those of them answered
	// {"settled":false} (the owner out of reach, or the lease unknown
	// there: a lease not settled stays counted until its TTL), completes
	// that failed twice (counted in Errors too), and the most leases held
	// at once (from an acquire's answer until its complete is sent: a
	// lower bound of what the owner held).
	Completed, Unsettled, CompleteErrors, MaxHeld int
	held                                          int
}

func (tl TenantTally) String() string {
	return fmt.Sprintf("allowed %d, refused %d %v, errors %d, fallbacks %d (%d allowed), completed %d (%d not settled), completes failed %d, held at most %d",
		tl.Allowed, tl.Refused, tl.Reasons, tl.Errors, tl.Fallbacks, tl.FallbackAllowed, tl.Completed, tl.Unsettled, tl.CompleteErrors, tl.MaxHeld)
}

// NodeTally is what the clients got through one node.
type NodeTally struct {
	Sent, Allowed, Refused, Errors, Fallbacks int
}

// LoadResult is the driver's tally when it has stopped.
type LoadResult struct {
	Tenants     map[string]*TenantTally
	Nodes       map[string]*NodeTally
	Sent        int
	Errors      int      // client errors in all
	Fallbacks   int      // fallback answers in all
	FirstErrors []string // the first client errors, with time and node
	// FallbackAdmissions are the first fallback answers that admitted, with
	// time, node and answer.
	FallbackAdmissions []string
	NoTarget           int      // times a client found no live node and waited
	HealthLog          []string // every change of a node's health, with time
	Elapsed            time.Duration
}

// TenantReport formats every tenant's tally, one a line, sorted by name.
func (r LoadResult) TenantReport() string {
	names := make([]string, 0, len(r.Tenants))
	for tn := range r.Tenants {
		names = append(names, tn)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, tn := range names {
		fmt.Fprintf(&b, "\n  %-12s %v", tn, *r.Tenants[tn])
	}
	return b.String()
}

// Summary is a one-paragraph account of the run.
func (r LoadResult) Summary() string {
	var b strings.Builder
	allowed, refused := 0, 0
	for _, tl := range r.Tenants {
		allowed += tl.Allowed
		refused += tl.Refused
	}
	fmt.Fprintf(&b, "%d acquires in %v: %d allowed, %d refused, %d client errors, %d fallback answers, %d waits for a live node",
		r.Sent, r.Elapsed.Round(time.Millisecond), allowed, refused, r.Errors, r.Fallbacks, r.NoTarget)
	names := make([]string, 0, len(r.Nodes))
	for n := range r.Nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		nt := r.Nodes[n]
		fmt.Fprintf(&b, "\n  via %-8s sent %5d: allowed %4d refused %5d errors %3d fallbacks %3d", n, nt.Sent, nt.Allowed, nt.Refused, nt.Errors, nt.Fallbacks)
	}
	if len(r.FirstErrors) > 0 {
		fmt.Fprintf(&b, "\n  first client errors:\n    %s", strings.Join(r.FirstErrors, "\n    "))
	}
	if len(r.FallbackAdmissions) > 0 {
		fmt.Fprintf(&b, "\n  first fallback admissions:\n    %s", strings.Join(r.FallbackAdmissions, "\n    "))
	}
	if len(r.HealthLog) > 0 {
		fmt.Fprintf(&b, "\n  health changes:\n    %s", strings.Join(r.HealthLog, "\n    "))
	}
	return b.String()
}

// LoadDriver runs a LoadConfig. Start it with StartLoad; it stops by itself
// after MaxRequests acquires or MaxDuration, or earlier by Stop.
type LoadDriver struct {
	cfg     LoadConfig
	client  *http.Client
	check   *http.Client
	start   time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	seq     atomic.Int64 // acquires handed out so far
	clients sync.WaitGroup
	poller  sync.WaitGroup
	done    chan struct{} // closed when every client and the poller have stopped

	live atomic.Pointer[[]*Proc] // nodes passing their last health check

	mu       sync.Mutex // guards the fields below
	res      LoadResult
	healthy  map[string]bool
	marked   map[string]int // refusals per tenant at the last Mark
	markedAt time.Time
}

// StartLoad starts the driver: one health poll first (so the clients start
// with the live nodes), then the clients and the poller.
func StartLoad(cfg LoadConfig) *LoadDriver {
	if cfg.Clients <= 0 {
		cfg.Clients = 16
	}
	if cfg.Body == nil {
		cfg.Body = func(tn string) string { return fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tn) }
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = 100 * time.Millisecond
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = 500 * time.Millisecond
	}
	if cfg.MaxRequests <= 0 {
		cfg.MaxRequests = 100_000
	}
	if cfg.MaxDuration <= 0 {
		cfg.MaxDuration = 2 * time.Minute
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.Usage == "" {
		cfg.Usage = `{"prompt_tokens":1,"completion_tokens":1}`
	}
	if len(cfg.Tenants) == 0 || cfg.Targets == nil {
		panic("StartLoad: Tenants and Targets are required")
	}
	d := &LoadDriver{
		cfg: cfg,
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns:        4 * cfg.Clients,
			MaxIdleConnsPerHost: 2 * cfg.Clients, // keep-alive: one connection per client and node, reused
			IdleConnTimeout:     90 * time.Second,
		}},
		check:   &http.Client{Timeout: cfg.CheckTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
		done:    make(chan struct{}),
		healthy: map[string]bool{},
		res: LoadResult{
			Tenants: map[string]*TenantTally{},
			Nodes:   map[string]*NodeTally{},
		},
	}
	for _, tn := range cfg.Tenants {
		d.res.Tenants[tn] = &TenantTally{Reasons: map[string]int{}}
	}
	d.start = time.Now()
	d.ctx, d.cancel = context.WithTimeout(context.Background(), cfg.MaxDuration)
	d.poll()
	d.poller.Add(1)
	go d.pollLoop()
	for range cfg.Clients {
		d.clients.Add(1)
		go d.clientLoop()
	}
	go func() {
		d.clients.Wait() // every client stopped: by Stop, MaxDuration or MaxRequests
		d.cancel()
		d.poller.Wait()
		d.mu.Lock()
		d.res.Elapsed = time.Since(d.start)
		d.mu.Unlock()
		close(d.done)
	}()
	return d
}

// clientFor is the client acquires to p go through: p's own, or the
// driver's.
func (d *LoadDriver) clientFor(p *Proc) *http.Client {
	if p.Client != nil {
		return p.Client
	}
	return d.client
}

// checkFor is the client p's health checks go through: p's own (each poll
// is bounded by CheckTimeout through its context), or the driver's.
func (d *LoadDriver) checkFor(p *Proc) *http.Client {
	if p.Client != nil {
		return p.Client
	}
	return d.check
}

func (d *LoadDriver) since() string {
	return fmt.Sprintf("+%.3fs", time.Since(d.start).Seconds())
}

// pollLoop re-polls every target's /readyz every CheckEvery until the
// driver stops.
func (d *LoadDriver) pollLoop() {
	defer d.poller.Done()
	tick := time.NewTicker(d.cfg.CheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-tick.C:
			d.poll()
		}
	}
}

// poll checks every target at once and publishes the ones that passed.
func (d *LoadDriver) poll() {
	targets := d.cfg.Targets()
	ok := make([]bool, len(targets))
	if d.cfg.NoHealthCheck {
		for i := range ok {
			ok[i] = true
		}
	} else {
		ok = readyz(d.ctx, targets, d.checkFor, d.cfg.CheckTimeout)
	}
	if d.ctx.Err() != nil {
		return
	}
	var live []*Proc
	d.mu.Lock()
	for i, p := range targets {
		if ok[i] {
			live = append(live, p)
		}
		if was, seen := d.healthy[p.Name]; !seen || was != ok[i] {
			state := "down"
			if ok[i] {
				state = "up"
			}
			d.res.HealthLog = append(d.res.HealthLog, fmt.Sprintf("%s %s %s", d.since(), p.Name, state))
			d.healthy[p.Name] = ok[i]
		}
	}
	d.mu.Unlock()
	d.live.Store(&live)
}

// Live returns the names of the nodes that passed their last health check.
func (d *LoadDriver) Live() []string {
	var names []string
	for _, p := range *d.live.Load() {
		names = append(names, p.Name)
	}
	return names
}

func (d *LoadDriver) clientLoop() {
	defer d.clients.Done()
	n := int64(len(d.cfg.Tenants))
	for d.ctx.Err() == nil {
		live := *d.live.Load()
		if len(live) == 0 {
			d.mu.Lock()
			d.res.NoTarget++
			d.mu.Unlock()
			select {
			case <-d.ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		seq := d.seq.Add(1) - 1
		if seq >= int64(d.cfg.MaxRequests) {
			return
		}
		// Tenant i in round r goes to live node (i+r) mod L: consecutive
		// acquires go to consecutive nodes, and every tenant goes through
		// every node in turn.
		ti, round := seq%n, seq/n
		p := live[int((ti+round)%int64(len(live)))]
		if lease := d.acquire(p, d.cfg.Tenants[ti]); lease != "" && d.cfg.Hold > 0 {
			d.hold(d.cfg.Tenants[ti], lease)
		}
		if d.cfg.Pace > 0 {
			select {
			case <-d.ctx.Done():
			case <-time.After(d.cfg.Pace):
			}
		}
	}
}

// hold keeps tenant's lease for a random part of Hold, then completes it.
func (d *LoadDriver) hold(tenant, lease string) {
	d.mu.Lock()
	tl := d.res.Tenants[tenant]
	tl.held++
	tl.MaxHeld = max(tl.MaxHeld, tl.held)
	d.mu.Unlock()
	time.Sleep(rand.N(d.cfg.Hold)) // the request's upstream call
	// The lease stops counting as held here, before its complete is sent:
	// the owner may free the slot as soon as the complete reaches it, before
	// its answer is back. So the client's holding interval lies inside the
	// owner's, and MaxHeld above the limit means the owner held too many.
	d.mu.Lock()
	tl.held--
	d.mu.Unlock()
	body := fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":%s}`, tenant, lease, d.cfg.Usage)
	var bad string
	unsettled := false
	for try := range 2 {
		live := *d.live.Load()
		if len(live) == 0 {
			bad = "no live node"
			break
		}
		p := live[(rand.IntN(len(live))+try)%len(live)]
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RequestTimeout)
		code, out, err := Post(ctx, d.clientFor(p), p.URL()+"/v1/complete", body)
		cancel()
		if err == nil && code == http.StatusOK {
			bad, unsettled = "", out["settled"] != true
			break
		}
		bad = fmt.Sprintf("complete via %s: %d %v %v", p.Name, code, out, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if bad != "" {
		tl.CompleteErrors++
		tl.Errors++
		d.res.Errors++
		if len(d.res.FirstErrors) < 20 {
			d.res.FirstErrors = append(d.res.FirstErrors, fmt.Sprintf("%s %s: %s", d.since(), tenant, bad))
		}
		return
	}
	tl.Completed++
	if unsettled {
		tl.Unsettled++
	}
}

// acquire sends one acquire for tenant through p, tallies the answer, and
// returns the lease of an allowed one.
func (d *LoadDriver) acquire(p *Proc, tenant string) (lease string) {
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.RequestTimeout)
	defer cancel()
	at := d.since()
	code, out, err := Post(ctx, d.clientFor(p), p.URL()+"/v1/acquire", d.cfg.Body(tenant))
	d.mu.Lock()
	defer d.mu.Unlock()
	tl, nt := d.res.Tenants[tenant], d.res.Nodes[p.Name]
	if nt == nil {
		nt = &NodeTally{}
		d.res.Nodes[p.Name] = nt
	}
	d.res.Sent++
	nt.Sent++
	bad := ""
	switch {
	case err != nil:
		bad = err.Error()
	case code == http.StatusOK && out["allowed"] == true:
		tl.Allowed++
		nt.Allowed++
		lease, _ = out["lease"].(string)
	case code == http.StatusTooManyRequests && out["allowed"] == false:
		tl.Refused++
		nt.Refused++
		tl.Reasons[fmt.Sprint(out["reason"])]++
	default:
		bad = fmt.Sprintf("status %d %v", code, out)
	}
	if bad != "" {
		tl.Errors++
		nt.Errors++
		d.res.Errors++
		if len(d.res.FirstErrors) < 20 || (len(d.res.FirstErrors) < 40 && nt.Errors == 1) { // and the first of each node
			d.res.FirstErrors = append(d.res.FirstErrors, fmt.Sprintf("%s %s via %s: %s", at, tenant, p.Name, bad))
		}
		return
	}
	if out["fallback"] == true {
		tl.Fallbacks++
		nt.Fallbacks++
		d.res.Fallbacks++
		if out["allowed"] == true {
			tl.FallbackAllowed++
			if len(d.res.FallbackAdmissions) < 20 {
				d.res.FallbackAdmissions = append(d.res.FallbackAdmissions, fmt.Sprintf("%s %s via %s: %v", at, tenant, p.Name, out))
			}
		}
	}
	return lease
}

// Tally returns a copy of the tally so far, while the clients may still be
// running (then Elapsed is the time since the start).
func (d *LoadDriver) Tally() LoadResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.res
	r.Tenants = make(map[string]*TenantTally, len(d.res.Tenants))
	for tn, tl := range d.res.Tenants {
		c := *tl
		c.Reasons = make(map[string]int, len(tl.Reasons))
		for k, v := range tl.Reasons {
			c.Reasons[k] = v
		}
		r.Tenants[tn] = &c
	}
	r.Nodes = make(map[string]*NodeTally, len(d.res.Nodes))
	for n, nt := range d.res.Nodes {
		c := *nt
		r.Nodes[n] = &c
	}
	r.FirstErrors = append([]string(nil), d.res.FirstErrors...)
	r.HealthLog = append([]string(nil), d.res.HealthLog...)
	if r.Elapsed == 0 { // still running
		r.Elapsed = time.Since(d.start)
	}
	return r
}

// Mark remembers every tenant's refusals so far, for WaitEachRefused.
func (d *LoadDriver) Mark() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.marked = map[string]int{}
	for tn, tl := range d.res.Tenants {
		d.marked[tn] = tl.Refused
	}
	d.markedAt = time.Now()
}

// WaitEachRefused waits until at least min has passed since the last Mark
// and every tenant has been refused at least n more times since it: the
// clients drove every tenant past its limit after the mark. It returns
// false if that did not happen within timeout, or the driver stopped first.
func (d *LoadDriver) WaitEachRefused(n int, min, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		d.mu.Lock()
		ok := time.Since(d.markedAt) >= min
		for tn, tl := range d.res.Tenants {
			if tl.Refused-d.marked[tn] < n {
				ok = false
				break
			}
		}
		d.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-d.done:
			return false
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// waitAnswered waits until d's clients have had n more answers (allowed
// or refused) through every one of procs than in base, a Tally taken
// earlier (the zero LoadResult counts from the start): the load has run
// through each of them. It returns how long that took, and fails t if it
// did not happen within timeout.
func waitAnswered(t testing.TB, d *LoadDriver, base LoadResult, procs []*Proc, n int, timeout time.Duration) time.Duration {
	t.Helper()
	answered := func(r LoadResult, name string) int {
		if nt := r.Nodes[name]; nt != nil {
			return nt.Allowed + nt.Refused
		}
		return 0
	}
	what := func() string {
		return fmt.Sprintf("%d answers through each of %d nodes; the clients so far: %s", n, len(procs), d.Tally().Summary())
	}
	return eventually(t, timeout, what, func() bool {
		r := d.Tally()
		for _, p := range procs {
			if answered(r, p.Name)-answered(base, p.Name) < n {
				return false
			}
		}
		return true
	})
}

// Stop asks the clients to stop, waits until they have, and returns the
// tally.
func (d *LoadDriver) Stop() LoadResult {
	d.cancel()
	return d.Wait()
}

// Wait waits until the driver has stopped by itself (MaxRequests sent, or
// MaxDuration passed) and returns the tally.
func (d *LoadDriver) Wait() LoadResult {
	<-d.done
	d.client.CloseIdleConnections()
	d.check.CloseIdleConnections()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.res
}
