package test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
	"github.com/tokenring/tokenring/tracing"
)

// InProc is a tokenring cluster whose members all run in this process, each
// wired the way cmd/tokenringd wires a daemon: a node.Node joined to gossip
// on loopback (gossip.DefaultLocalConfig), a router.Router deciding through
// it, and an http.Server serving the router on a loopback port. Tests reach
// the members over real HTTP, peer and gossip sockets, as they reach a
// Cluster of processes, but start in milliseconds, run under the race
// detector as one program, and can look inside a member (InProcMember.Node).
//
// An InProc is a value owned by one test; there is no package state.
// Everything it starts is stopped by t.Cleanup, and once that has run no
// goroutine of its members is left (memberlist stops its own goroutines
// shortly after Shutdown returns; goleak's retries cover that).
//
// NewInProc, Add and WaitConverged call t.Fatal on failure, and Leave and
// Crash may, so they belong on the test's goroutine; URL, Member, Live and
// Ring are safe from any goroutine.
type InProc struct {
	t      testing.TB
	limits func(key string) limiter.Limits
	cfg    inProcConfig
	logs   *lockedBuffer // every member's logs, printed when the test fails

	mu      sync.Mutex // guards members and next
	members []*InProcMember
	next    int
}

// InProcMember is one member of an InProc cluster.
type InProcMember struct {
	Name       string
	HTTP       string // loopback address of the client API, admin and metrics
	GossipAddr string // memberlist address, host:port

	Node     *node.Node
	Gossip   *gossip.Cluster
	Registry *prometheus.Registry // the node's and the router's metrics

	srv      *http.Server
	rt       *frontdoor.Door // closed once srv's handlers are done: stops its debt loop
	served   chan struct{}   // closed when srv.Serve has returned
	handlers sync.WaitGroup  // requests being handled; srv.Close does not wait for them
	hmu      sync.Mutex      // guards down, and orders handlers.Add before handlers.Wait
	down     bool            // stopped: handle no more requests
	cancel   context.CancelFunc
	state    memberState // guarded by InProc.mu
}

type memberState int

const (
	memberRunning memberState = iota
	memberLeft                // left gracefully (or stopped by cleanup)
	memberCrashed             // stopped without leaving
)

// URL is the member's base URL, e.g. http://127.0.0.1:41234.
func (m *InProcMember) URL() string { return "http://" + m.HTTP }

// inProcConfig is what InProcOptions set.
type inProcConfig struct {
	forwardTimeout time.Duration
	forwardMaxWait time.Duration
	fallback       fallback.Policy
	poolFor        func(model string) (string, bool)
	chain          func(tenant, model string) router.Chain
	price          func(model string) (limiter.Price, bool)
	weight         func(tenant string) int64
	hotKeyRate     int
	policy         limiter.Policy
	batch          node.BatchConfig
	gossip         func(*gossip.Config)
	logLevel       slog.Level
	tracer         func(member string) *tracing.Tracer // WithTracing (tracing_test.go); nil: tracing off
}

// InProcOption changes how NewInProc and Add configure members.
type InProcOption func(*inProcConfig)

// WithForwardTimeout sets forward_timeout on every member, wired as
// tokenringd wires it: router.Config.ForwardTimeout and the node's
// ForwardConfig.ProbeAfter (how long a forward waits before it probes the
// owner). The default is 15ms. A slow forward no longer falls back: it is
// waited for up to the forward max wait (WithForwardMaxWait).
func WithForwardTimeout(d time.Duration) InProcOption {
	return func(c *inProcConfig) { c.forwardTimeout = d }
}

// WithForwardMaxWait sets router.Config.ForwardMaxWait on every member: how
// long a live but slow owner is waited for before the request gets a 503.
// The default is router's (2s). All members and the test's clients share
// one Go scheduler, so under load a forward queues behind every runnable
// goroutine at each hop: 900 concurrent acquires pushed forwards to
// 250ms-1s under -race on 2 cores (15-250ms without -race).
func WithForwardMaxWait(d time.Duration) InProcOption {
	return func(c *inProcConfig) { c.forwardMaxWait = d }
}

// WithFallback sets the routers' fallback policy (default degraded).
func WithFallback(p fallback.Policy) InProcOption {
	return func(c *inProcConfig) { c.fallback = p }
}

// WithPools sets router.Config.PoolFor: which models map to a pool key.
// Default: no pools.
func WithPools(poolFor func(model string) (pool string, ok bool)) InProcOption {
	return func(c *inProcConfig) { c.poolFor = poolFor }
}

// WithChain sets router.Config.Chain on every member: the groups above a
// tenant and the models entries that apply at each level.
func WithChain(chain func(tenant, model string) router.Chain) InProcOption {
	return func(c *inProcConfig) { c.chain = chain }
}

// WithPrices sets router.Config.Price on every member: each model's price,
// for keys whose limits have a budget (limiter.Limits.Spend).
func WithPrices(price func(model string) (limiter.Price, bool)) InProcOption {
	return func(c *inProcConfig) { c.price = price }
}

// WithWeights sets router.Config.Weight on every member: each tenant's
// weight in its pool's fair shares.
func WithWeights(weight func(tenant string) int64) InProcOption {
	return func(c *inProcConfig) { c.weight = weight }
}

// WithHotKeyRate sets node.Config.HotKeyRate on every member: how many
// acquires a second a member forwards for a key before it asks the owner
// for slices; negative turns slices off.
func WithHotKeyRate(rate int) InProcOption {
	return func(c *inProcConfig) { c.hotKeyRate = rate }
}

// WithPolicy sets the limiter policy of every node.
func WithPolicy(p limiter.Policy) InProcOption {
	return func(c *inProcConfig) { c.policy = p }
}

// WithBatch sets the peer protocol's batching on every node.
func WithBatch(b node.BatchConfig) InProcOption {
	return func(c *inProcConfig) { c.batch = b }
}

// WithGossip lets a test adjust each member's gossip configuration after
// the harness has filled it in (name, addresses, metadata, join list).
func WithGossip(f func(*gossip.Config)) InProcOption {
	return func(c *inProcConfig) { c.gossip = f }
}

// WithLogLevel sets the level of the members' logs, which are kept in
// memory and printed only if the test fails. Default: info.
func WithLogLevel(l slog.Level) InProcOption {
	return func(c *inProcConfig) { c.logLevel = l }
}

// NewInProc starts n members, the first alone and each next one joining the
// first live member, waits until every member's ring lists all n, and
// returns the cluster. limits gives every key's limits (router.TenantKey,
// router.PoolKey), on every member.
func NewInProc(t testing.TB, n int, limits func(key string) limiter.Limits, opts ...InProcOption) *InProc {
	t.Helper()
	c := &InProc{t: t, limits: limits, logs: &lockedBuffer{}}
	c.cfg.logLevel = slog.LevelInfo
	for _, o := range opts {
		o(&c.cfg)
	}
	t.Cleanup(c.stopAll)
	for range n {
		c.Add()
	}
	c.WaitConverged(15 * time.Second)
	return c
}

// Add starts one more member, joining the first live one (a new cluster if
// none is live), and returns its index once it is ready: gossip joined and
// its first ring built. The other members may not have seen it yet; see
// WaitConverged.
func (c *InProc) Add() int {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	name := fmt.Sprintf("n%d", c.next)
	var join []string
	for _, m := range c.members {
		if m.state == memberRunning {
			join = []string{m.GossipAddr}
			break
		}
	}
	c.mu.Unlock()

	m, err := c.start(name, join)
	if err != nil {
		c.t.Fatalf("start %s: %v\n%s", name, err, tail(c.logs.String(), 8000))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members = append(c.members, m)
	return len(c.members) - 1
}

// start wires one member as cmd/tokenringd does: an HTTP listener, a node,
// its gossip, a metrics registry, a router, and an HTTP server serving the
// router on the listener. On error, whatever it started is stopped again.
func (c *InProc) start(name string, join []string) (m *InProcMember, err error) {
	log := slog.New(slog.NewTextHandler(c.logs, &slog.HandlerOptions{Level: c.cfg.logLevel}))
	var undo undoStack
	defer func() {
		if err != nil {
			undo.run()
		}
	}()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	undo.push(func() { ln.Close() })
	n, err := c.newNode(name, log)
	if err != nil {
		return nil, err
	}
	undo.push(func() { n.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	undo.push(cancel)
	meta := gossip.Meta{HTTP: ln.Addr().String(), Peer: n.PeerAddr()}
	members, err := n.Join(ctx, c.gossipConfig(name, join, meta, log))
	if err != nil {
		return nil, err
	}
	undo.push(func() { members.Shutdown() })
	reg, err := registryOf(n)
	if err != nil {
		return nil, err
	}
	r, err := c.newRouter(n, reg, log.With("node", name))
	if err != nil {
		return nil, err
	}

	m = &InProcMember{
		Name:       name,
		HTTP:       ln.Addr().String(),
		GossipAddr: members.Local().Addr,
		Node:       n,
		Gossip:     members,
		Registry:   reg,
		rt:         r,
		served:     make(chan struct{}),
		cancel:     cancel,
	}
	m.srv = &http.Server{Handler: m.guard(r), ReadHeaderTimeout: 10 * time.Second}
	go c.serve(m, ln)
	return m, nil
}

// undoStack is the stops of what a failing start had started, run in the
// reverse order of the starts.
type undoStack []func()

// push adds the stop of the latest thing started.
func (u *undoStack) push(stop func()) { *u = append(*u, stop) }

// run calls the stops, the latest first.
func (u undoStack) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// newNode creates member name's node, with the cluster's limits, policy,
// batching and forward timeout, its peer listener on a free loopback port.
func (c *InProc) newNode(name string, log *slog.Logger) (*node.Node, error) {
	return node.New(node.Config{
		Name:       name,
		PeerAddr:   "127.0.0.1:0",
		Policy:     c.cfg.policy,
		LimitsFor:  c.limits,
		Batch:      c.cfg.batch,
		Forward:    node.ForwardConfig{ProbeAfter: c.cfg.forwardTimeout},
		HotKeyRate: c.cfg.hotKeyRate,
		Logger:     log,
		Tracer:     c.tracerOf(name),
	})
}

// tracerOf is member name's tracer: nil (tracing off) unless the cluster
// was made WithTracing.
func (c *InProc) tracerOf(name string) *tracing.Tracer {
	if c.cfg.tracer == nil {
		return nil
	}
	return c.cfg.tracer(name)
}

// gossipConfig is member name's gossip configuration: local defaults on a
// free loopback port, advertising meta and joining join (a new cluster if
// empty), then adjusted by WithGossip's function if one was given.
func (c *InProc) gossipConfig(name string, join []string, meta gossip.Meta, log *slog.Logger) gossip.Config {
	gcfg := gossip.DefaultLocalConfig()
	gcfg.Name = name
	gcfg.BindAddr = "127.0.0.1"
	gcfg.BindPort = 0 // memberlist picks a port free for both TCP and UDP
	gcfg.Meta = meta
	gcfg.Join = join
	gcfg.Logger = log
	if c.cfg.gossip != nil {
		c.cfg.gossip(&gcfg)
	}
	return gcfg
}

// registryOf returns a new registry holding n's collectors: one per
// member, as no metric is global.
func registryOf(n *node.Node) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	for _, col := range n.Collectors() {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return reg, nil
}

// newRouter creates a router deciding through n with the cluster's limits,
// pools, fallback and forward settings, registering its metrics in reg and
// serving reg's on its metrics endpoint.
func (c *InProc) newRouter(n *node.Node, reg *prometheus.Registry, log *slog.Logger) (*frontdoor.Door, error) {
	return frontdoor.New(n, frontdoor.Config{
		Limits:         c.limits,
		PoolFor:        c.cfg.poolFor,
		Chain:          c.cfg.chain,
		Price:          c.cfg.price,
		Budgeted:       func() bool { return c.cfg.price != nil },
		Weight:         c.cfg.weight,
		Fallback:       c.cfg.fallback,
		ForwardTimeout: c.cfg.forwardTimeout,
		ForwardMaxWait: c.cfg.forwardMaxWait,
		Ready:          n.Ready,
		Registry:       reg,
		Gatherer:       reg,
		Logger:         log,
		Tracer:         n.Tracer(),
	})
}

// guard wraps h so that release can wait for the requests m is handling
// (m.handlers counts them), and so that once m is down it refuses requests
// with a 503 instead of handling them.
func (m *InProcMember) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		m.hmu.Lock()
		if m.down { // a request read just before a crash: its connection is gone
			m.hmu.Unlock()
			http.Error(w, "member stopped", http.StatusServiceUnavailable)
			return
		}
		m.handlers.Add(1)
		m.hmu.Unlock()
		defer m.handlers.Done()
		h.ServeHTTP(w, req)
	})
}

// serve runs m's HTTP server on ln until the server is closed, then closes
// m.served. Any other end of serving fails the test.
func (c *InProc) serve(m *InProcMember, ln net.Listener) {
	defer close(m.served)
	if err := m.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		c.t.Errorf("%s: serve http: %v", m.Name, err)
	}
}

// Member returns member i, in the order Add started them.
func (c *InProc) Member(i int) *InProcMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i]
}

// URL is member i's base URL.
func (c *InProc) URL(i int) string { return c.Member(i).URL() }

// Len is how many members were ever started, live or not.
func (c *InProc) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members)
}

// Live returns the members neither left nor crashed.
func (c *InProc) Live() []*InProcMember {
	c.mu.Lock()
	defer c.mu.Unlock()
	var live []*InProcMember
	for _, m := range c.members {
		if m.state == memberRunning {
			live = append(live, m)
		}
	}
	return live
}

// take marks m stopped with st, and reports false if it was stopped already.
func (c *InProc) take(m *InProcMember, st memberState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.state != memberRunning {
		return false
	}
	m.state = st
	return true
}

// Leave stops member i gracefully, as tokenringd does on SIGTERM: announce
// the departure to gossip, drain the HTTP server, then shut gossip down and
// close the node.
func (c *InProc) Leave(i int) {
	c.t.Helper()
	m := c.Member(i)
	if !c.take(m, memberLeft) {
		return
	}
	if err := m.Gossip.Leave(5 * time.Second); err != nil {
		c.t.Errorf("%s: gossip leave: %v", m.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		c.t.Errorf("%s: http shutdown: %v", m.Name, err)
		m.srv.Close()
	}
	c.release(m)
}

// Crash stops member i abruptly, as a SIGKILL would: gossip stops without a
// leave message (the others detect the failure by probing), and the node's
// peer listener and connections and the HTTP server and its connections
// close at once, so the others' forwards to it fail as they would against a
// dead process. Requests the member was handling run on to their end (a
// closed node.Node still forwards, over a new peer connection that lasts
// until the peer closes it), and Crash waits for them.
func (c *InProc) Crash(i int) {
	c.t.Helper()
	m := c.Member(i)
	if !c.take(m, memberCrashed) {
		return
	}
	m.srv.Close()
	c.release(m)
}

// release shuts m's gossip down, closes its node, waits for its HTTP
// server's goroutines and closes its router; m's HTTP server is already
// closed. Requests still being handled after a crash (srv.Close does not
// wait for them) end within their forward timeout, their clients long
// gone.
func (c *InProc) release(m *InProcMember) {
	if err := m.Gossip.Shutdown(); err != nil {
		c.t.Errorf("%s: gossip shutdown: %v", m.Name, err)
	}
	if err := m.Node.Close(); err != nil {
		c.t.Errorf("%s: node close: %v", m.Name, err)
	}
	m.cancel()
	<-m.served
	m.hmu.Lock()
	m.down = true
	m.hmu.Unlock()
	m.handlers.Wait()
	m.rt.Close()
}

// stopAll stops every live member without a graceful leave: the whole
// cluster goes away, so nobody needs to hear about it. On failure it prints
// the members' logs.
func (c *InProc) stopAll() {
	for _, m := range c.Live() {
		if !c.take(m, memberLeft) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := m.srv.Shutdown(ctx); err != nil {
			m.srv.Close()
		}
		cancel()
		c.release(m)
	}
	if c.t.Failed() {
		c.t.Logf("--- logs of the in-process members\n%s", tail(c.logs.String(), 16000))
	}
}

// Ring fetches member m's view of the ring over HTTP.
func (c *InProc) Ring(m *InProcMember) (RingView, error) {
	var v RingView
	err := GetJSON(m.URL()+"/admin/ring", &v)
	return v, err
}

// WaitConverged polls every live member's GET /admin/ring until each lists
// exactly the live members and all report the same ring version, and
// returns how long that took. It calls t.Fatal after timeout.
func (c *InProc) WaitConverged(timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var last string // the latest disagreement, for the failure message
	for {
		ok, why := c.converged()
		if ok {
			return time.Since(start)
		}
		last = why
		if time.Now().After(deadline) {
			c.t.Fatalf("in-process cluster not converged after %v: %s\n%s", timeout, last, tail(c.logs.String(), 8000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// converged reports whether every live member's ring holds exactly the live
// members, at one version, and if not, why.
func (c *InProc) converged() (bool, string) {
	live := c.Live()
	want := make(map[string]bool, len(live))
	for _, m := range live {
		want[m.Name] = true
	}
	version := ""
	for _, m := range live {
		v, err := c.Ring(m)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", m.Name, err)
		}
		var names []string
		exact := len(v.Members) == len(live)
		for _, rm := range v.Members {
			names = append(names, rm.Name)
			exact = exact && want[rm.Name]
		}
		if !exact {
			return false, fmt.Sprintf("%s sees %v, live are %d", m.Name, names, len(live))
		}
		if version != "" && v.Version != version {
			return false, fmt.Sprintf("%s has ring version %s, another %s", m.Name, v.Version, version)
		}
		version = v.Version
	}
	return true, ""
}
