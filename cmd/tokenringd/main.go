// Command tokenringd runs one tokenring node: the decision API, admin and
// metrics on -http, the peer protocol on -peer, and gossip membership on
// -gossip. Every flag can also be given as an environment variable
// TOKENRING_<NAME> (e.g. TOKENRING_JOIN); a flag on the command line wins.
//
// The cluster secret is the config's cluster_secret or, when that is
// empty, TOKENRING_CLUSTER_SECRET: not a flag, so it never shows in ps.
// Protected mode: a node with a non-loopback -http, -peer or -gossip and
// neither client tokens nor a cluster secret refuses to start (exit 2)
// unless given -insecure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokenring/tokenring/admin"
	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/node/replica"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/tracing"

	"github.com/hashicorp/go-sockaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quietRedis(os.Args[1:], os.Getenv, os.Stderr)
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Getenv, os.Stderr), os.Stderr))
}

// exitCode reports err on stderr and returns the exit status: 0 for none
// or for -h (the flag package has printed the usage), 2 for a usage error,
// 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "tokenringd:", err)
		return 2
	}
	fmt.Fprintln(stderr, "tokenringd:", err)
	return 1
}

var errUsage = errors.New("usage")

// flags are tokenringd's command line (docs/configuration.md, "Flags").
type flags struct {
	config, name, http, peer, gossip, join, redis string
	grpc, otlpEndpoint                            string
	advertise                                     string
	gossipProfile, logLevel, logFormat            string
	batchWait                                     time.Duration
	batchMax                                      int
	insecure                                      bool
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("tokenringd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "YAML config `file` (built-in defaults when empty)")
	fs.StringVar(&f.name, "name", "", "node `name`, unique in the cluster (default: host-httpport)")
	fs.StringVar(&f.http, "http", "127.0.0.1:8080", "`addr` for the client API, LLM proxy, admin and metrics")
	fs.StringVar(&f.grpc, "grpc", "", "`addr` for Envoy's rate limit service over gRPC (default: grpc.addr in the config; neither: no gRPC server)")
	fs.StringVar(&f.peer, "peer", "", "`addr` for the node-to-node protocol (default: 127.0.0.1, a free port)")
	fs.StringVar(&f.gossip, "gossip", "127.0.0.1:7946", "memberlist bind `addr`")
	fs.StringVar(&f.join, "join", "", "gossip `addrs` of existing members, comma separated; a host name is resolved at every attempt and each of its addresses tried (none: a new cluster)")
	fs.StringVar(&f.advertise, "advertise", "", "IP or host `name` other nodes and clients reach this host at; advertised with each listener's port for HTTP, peer and gossip (default: the bound IP, or the host's first private IPv4 when bound to all interfaces)")
	fs.StringVar(&f.redis, "redis", "", "optional checkpoint store `URL` (redis://host:port/db): restores a crashed owner's keys when no newer replica exists")
	fs.StringVar(&f.gossipProfile, "gossip-profile", "lan", "memberlist timings: lan, or local (fast failure detection, loopback tests)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "", "logfmt or json (default: log.format in the config, logfmt)")
	fs.DurationVar(&f.batchWait, "peer-batch-wait", 0, "how long a peer connection lingers for more calls before writing a frame (0: write what queued up while the previous write was in flight)")
	fs.IntVar(&f.batchMax, "peer-batch-max", 1000, "most calls per peer frame (1 disables batching)")
	fs.BoolVar(&f.insecure, "insecure", false, "allow a non-loopback bind with no client tokens and no cluster secret")
	fs.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "OpenTelemetry collector base `URL` to export traces to (default: tracing.otlp_endpoint in the config, else OTEL_EXPORTER_OTLP_ENDPOINT; none: no tracing)")
	if err := fs.Parse(args); err != nil {
		return f, fmt.Errorf("%w: %w", errUsage, err) // -h: flag.ErrHelp, usage printed (exitCode: 0)
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var envErr error
	fs.VisitAll(func(fl *flag.Flag) {
		env := "TOKENRING_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v := getenv(env); v != "" && !set[fl.Name] {
			if err := fl.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%w: %s: %v", errUsage, env, err)
			}
		}
	})
	if envErr != nil {
		return f, envErr
	}
	if f.batchWait < 0 || f.batchMax < 1 {
		return f, fmt.Errorf("%w: -peer-batch-wait must be >= 0 and -peer-batch-max >= 1", errUsage)
	}
	return f, nil
}

// run is tokenringd: it builds the parts in the order each needs the one
// before (config and logger, checkpoint store, HTTP listener, node, gossip,
// router, HTTP server), serves until ctx ends, drains, and shuts the parts
// down in the reverse order (the deferred calls).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	f, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	cfg, base, err := setup(ctx, f, getenv, stderr)
	if err != nil {
		return err
	}
	checkpoint, rc, err := openCheckpoint(f.redis, cfg)
	if err != nil {
		return err
	}
	if rc != nil {
		defer rc.Close()
	}
	httpLn, err := listenHTTP(f.http, cfg.HTTP, base)
	if err != nil {
		return err
	}
	defer httpLn.Close()
	if f.name == "" {
		f.name = defaultName(httpLn.Addr())
	}
	log := base.With("node", f.name)
	// "stopped" is the last line: after the deferred shutdowns below (the
	// node's Close ends its replication and checkpoint rounds).
	served := false
	defer func() {
		if served {
			log.Info("stopped")
		}
	}()
	cur := newLive(cfg)
	n, closeNode, err := startTracedNode(ctx, f, cfg, cur.limits, checkpoint, getenv, base) // tracing.go: the node and its tracer
	if err != nil {
		return err
	}
	defer closeNode() // the node's Close, then its last spans flushed
	// The router is made before the node joins: loading the tokenizer
	// takes a second of CPU, and a member that owns partitions must not
	// spend it instead of answering its peers.
	var draining atomic.Bool // SIGTERM came: /readyz fails
	reg := newRegistry(httpLn.collectors()...)
	r, rs, err := newFrontEnds(f, n, cfg, cur, func() bool { return n.Ready() && !draining.Load() }, reg, log)
	if err != nil {
		return err
	}
	defer r.Close() // stops charging fallback debts
	runtime.GC()    // the tokenizer's garbage, collected before this node owns anything
	// A fence (this node on the minority side of a split) hands what it
	// admitted since its last replication to the router's debts.
	n.OnFence(r.Owe)
	members, err := joinCluster(ctx, f, cfg, limitsHash(cfg, cur.descs.Load()), n, httpLn.Addr().String(), rc, base, log)
	if err != nil {
		return err
	}
	defer members.Shutdown()
	srv := newServer(closeWhileDraining(r, &draining), decisions{plain: r.ServePlain, quick: r.ServeQuick}, cfg.HTTP, draining.Load, log.With("component", "http"))
	reg.MustRegister(append(serverCollectors(srv), members.Collectors()...)...)
	errc := serve(srv, httpLn, rs)
	defer background(ctx, func(ctx context.Context) { returnMemory(ctx, log, n.Keys) })()
	if f.config != "" {
		defer background(ctx, watchConfig(f.config, cfg, getenv, reg, log, reloaded(cur, n, r, rs, members, log),
			watchRLS(cfg, cur, rs, n, members, reg, log)))()
	}
	log.Info("tokenringd serving", "http", httpLn.Addr().String(), "grpc", rs.listening(), "event_loops", eventLoops(cfg.HTTP.EventLoops), "peer", n.PeerAddr(), "gossip", members.Local().Addr, "join", f.join)

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	served = true
	rs.drain() // Envoy's health checks move away while this node still answers
	drain(log, &draining, n, r, members, cfg.Drain)
	rs.stop(10 * time.Second)
	shutdownHTTP(srv, log)
	return nil
}

// shutdownHTTP closes srv's idle connections and waits up to 10 s for the
// answers in progress.
func shutdownHTTP(srv httpServer, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("http shutdown", "err", err)
	}
}

// reloaded applies a reloaded config to a running node: the limits, chains,
// pools and proxy keys in force (cur), the node's keys told to look at
// their limits again, the clients of the decision API and of the rate
// limit service (rs; nil: none), and the new limits hash gossiped.
func reloaded(cur *live, n *node.Node, r *frontdoor.Door, rs *rlsServer, members *gossip.Cluster, log *slog.Logger) func(config.Config) {
	return func(next config.Config) {
		cur.set(next)
		n.LimitsChanged()
		r.SetClients(clientTokens(next), clientCerts(next), limitSetters(next))
		if rs != nil {
			rs.srv.SetClients(api.NewClients(clientTokens(next), clientCerts(next), limitSetters(next)))
		}
		if err := members.SetLimitsHash(limitsHash(next, cur.descs.Load()), time.Second); err != nil {
			log.Warn("limits hash not published", "err", err)
		}
	}
}

// setup reads the log level and the config file (built-in defaults
// without one, and TOKENRING_CLUSTER_SECRET), checks protected mode, and
// makes the logger.
func setup(ctx context.Context, f flags, getenv func(string) string, stderr io.Writer) (config.Config, *slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return config.Config{}, nil, fmt.Errorf("%w: -log-level: %v", errUsage, err)
	}
	cfg := config.Default()
	if f.config != "" {
		var err error
		if cfg, err = config.Load(f.config, getenv); err != nil {
			return config.Config{}, nil, err // names the file, the line and the field
		}
	}
	if f.logFormat != "" {
		cfg.Log.Format = config.LogFormat(f.logFormat)
		if err := cfg.Validate(); err != nil {
			return config.Config{}, nil, fmt.Errorf("%w: -log-format: %v", errUsage, err)
		}
	}
	log := newLogger(stderr, cfg.Log.Format, level)
	cfg, err := protect(ctx, f, cfg, getenv)
	if err != nil {
		return config.Config{}, nil, err
	}
	if cfg, err = hostCgroup.fit(cfg, autoMaxConns(), log); err != nil {
		return config.Config{}, nil, err
	}
	if f.redis == "" && cfg.Budgeted() {
		log.Warn("budgets without -redis: spend lives in the members' memory and their copies; a restart of the whole cluster at once (every member down together) starts every budget's period from $0")
	}
	return cfg, log, nil
}

// openCheckpoint connects the optional Redis checkpoint store at url; with
// no url there is none (nil, nil). The caller closes the client.
func openCheckpoint(url string, cfg config.Config) (replica.Checkpoint, *redis.Client, error) {
	if url == "" {
		return nil, nil, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: -redis: want redis://[user:password@]host:port[/db], got %q: %v", errUsage, url, err)
	}
	rc := redis.NewClient(opts)
	// Checkpoints outlive what they describe by little: a window plus a
	// lease TTL.
	return &replica.RedisCheckpoint{Client: rc, Prefix: "tokenring:", TTL: cfg.Limits.Window + cfg.Limits.LeaseTTL}, rc, nil
}

// defaultName is the node name when -name is not given: host-httpport.
func defaultName(httpAddr net.Addr) string {
	host, _ := os.Hostname()
	_, port, _ := net.SplitHostPort(httpAddr.String())
	return host + "-" + port
}

// newNode makes the node (it serves the peer protocol at once; it joins
// the cluster in joinCluster).
func newNode(f flags, cfg config.Config, limits func(string) limiter.Limits, checkpoint replica.Checkpoint, tracer *tracing.Tracer, log *slog.Logger) (*node.Node, error) {
	return node.New(node.Config{
		Name:                f.name,
		PeerAddr:            f.peer,
		Policy:              limiter.Policy{DefaultMaxTokens: cfg.DefaultMaxTokens, QueueLen: cfg.Queue.MaxWaiters, Aging: cfg.Queue.Aging},
		LimitsFor:           limits,
		Batch:               node.BatchConfig{Wait: f.batchWait, Max: f.batchMax},
		Forward:             node.ForwardConfig{ProbeAfter: cfg.ForwardTimeout, Liveness: cfg.PeerLiveness},
		HopTimeout:          cfg.ForwardMaxWait / 2, // a call forwarded here answers before its forwarder's cap
		Checkpoint:          checkpoint,
		ReplicationInterval: cfg.Replication.Interval,
		// A dead custodian's keys are worth restoring as long as their
		// windows and leases can still count.
		HandoffHorizon:    cfg.Limits.Window + cfg.Limits.LeaseTTL,
		ReplicationSync:   cfg.Replication.Mode == config.ReplicationSync,
		ReplicationCopies: cfg.Replication.Copies,
		Logger:            log,
		Secrets:           clusterSecrets(cfg),
		MaxKeys:           cfg.MaxKeys,
		HotKeyRate:        hotKeyRate(cfg.HotKeyRate),
		MaxFrame:          cfg.Peer.MaxFrameBytes,
		MaxPeerConns:      cfg.Peer.MaxConns,
		Tracer:            tracer,
	})
}

// joinCluster starts gossip for n, publishing hash as its limits hash,
// and joins the members at -join, after
// preloading the checkpoint from rc when there is one. The meta's BootID is
// left empty: gossip.Start makes a new one at every start.
func joinCluster(ctx context.Context, f flags, cfg config.Config, hash string, n *node.Node, httpAddr string, rc *redis.Client, base, log *slog.Logger) (*gossip.Cluster, error) {
	gcfg := gossip.DefaultLANConfig()
	if f.gossipProfile == "local" {
		gcfg = gossip.DefaultLocalConfig()
	} else if f.gossipProfile != "lan" {
		return nil, fmt.Errorf("%w: -gossip-profile: want lan or local, got %q", errUsage, f.gossipProfile)
	}
	gcfg.Name = f.name
	var err error
	if gcfg.BindAddr, gcfg.BindPort, err = splitHostPort(f.gossip); err != nil {
		return nil, fmt.Errorf("%w: -gossip: %v", errUsage, err)
	}
	gcfg.AdvertiseAddr, err = advertiseGossipIP(gcfg.BindAddr, f.advertise, sockaddr.GetPrivateIP, net.DefaultResolver.LookupIP)
	if err != nil {
		return nil, fmt.Errorf("-gossip %s: %w", f.gossip, err)
	}
	advHTTP, err := advertiseAddr(httpAddr, f.advertise, sockaddr.GetPrivateIP)
	if err != nil {
		return nil, fmt.Errorf("-http %s: %w", httpAddr, err)
	}
	advPeer, err := advertiseAddr(n.PeerAddr(), f.advertise, sockaddr.GetPrivateIP)
	if err != nil {
		return nil, fmt.Errorf("-peer %s: %w", n.PeerAddr(), err)
	}
	gcfg.Meta = gossip.Meta{HTTP: advHTTP, Peer: advPeer, LimitsHash: hash}
	gcfg.Secrets = clusterSecrets(cfg)
	log.Info("advertising", "http", advHTTP, "peer", advPeer, "gossip", gcfg.AdvertiseAddr)
	if f.join != "" {
		gcfg.Join = strings.Split(f.join, ",")
	}
	gcfg.Logger = base
	if rc != nil {
		preloadCheckpoint(ctx, log, n, rc)
	}
	return n.Join(ctx, gcfg)
}

// newRegistry is the metrics registry /metrics serves: Go's and the
// process's collectors, and extra.
func newRegistry(extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	return reg
}

// newRouter makes the HTTP side: the decision API, the LLM proxy (with the
// prompt counter and the upstream client), admin and metrics on reg. ready
// is what /readyz answers.
func newRouter(n *node.Node, cfg config.Config, cur *live, ready func() bool, reg *prometheus.Registry, log *slog.Logger) (*frontdoor.Door, error) {
	reg.MustRegister(n.Collectors()...)
	reg.MustRegister(admin.LimitsMismatchCollector(n), admin.PoolSharesCollector(n, cur.pools, time.Now))
	counter, err := newCounter(cfg)
	if err != nil {
		return nil, err
	}
	anth := cfg.Anthropic()
	return frontdoor.New(n, frontdoor.Config{
		Limits:          cur.limits,
		PoolFor:         cur.poolFor,
		Price:           cur.price,
		Budgeted:        cur.budgeted,
		Weight:          cur.weight,
		LimitsSource:    cur.source,
		Chain:           cur.chain,
		Counter:         counter,
		MaxPromptBytes:  cfg.Limits.MaxPromptBytes,
		Fallback:        fallback.Policy(cfg.Fallback),
		ForwardTimeout:  cfg.ForwardTimeout,
		ForwardMaxWait:  cfg.ForwardMaxWait,
		AdminToken:      cfg.AdminToken,
		Ready:           ready,
		Registry:        reg,
		Gatherer:        reg,
		Logger:          log,
		Tracer:          n.Tracer(),
		ClusterSecrets:  clusterSecrets(cfg),
		Clients:         clientTokens(cfg),
		ClientCerts:     clientCerts(cfg),
		LimitSetters:    limitSetters(cfg),
		MaxFallbackKeys: cfg.MaxKeys,
		Proxy: proxy.Config{
			Tenant:    cur.tenant,
			Account:   cur.account,
			OpenAI:    proxyUpstream(cfg.Upstream),
			Anthropic: proxyUpstream(anth),
			// Client nil: each upstream gets proxy.NewUpstreamClient
			// with its timeouts (no overall timeout: streams run long).
		},
	})
}

// newCounter is the node's prompt counter: its encodings loaded now under
// preload_encodings, else each at its first count.
func newCounter(cfg config.Config) (*prompt.Counter, error) {
	counter := prompt.NewCounter()
	if cfg.PreloadEncodings {
		if err := counter.Load(); err != nil {
			return nil, fmt.Errorf("load tiktoken encodings: %w", err)
		}
	}
	return counter, nil
}

// proxyUpstream is u as the LLM proxy takes it.
func proxyUpstream(u config.Upstream) proxy.Upstream {
	return proxy.Upstream{BaseURL: u.BaseURL, APIKey: u.APIKey, Timeouts: proxy.UpstreamTimeouts{
		Dial: u.DialTimeout, TLS: u.TLSTimeout, ResponseHeader: u.ResponseHeaderTimeout, StreamIdle: u.StreamIdleTimeout,
	}}
}

// clientTokens are the config's token clients as the router takes them:
// token -> tenants. A cert entry is not one: its key is only a name.
func clientTokens(cfg config.Config) map[string][]string {
	m := make(map[string][]string, len(cfg.Clients))
	for tok, c := range cfg.Clients {
		if c.Cert == "" {
			m[tok] = c.Tenants
		}
	}
	return m
}

// limitSetters are the config's client tokens that may send limits with
// their acquires (may_set_limits).
func limitSetters(cfg config.Config) map[string]bool {
	m := map[string]bool{}
	for tok, c := range cfg.Clients {
		if c.Cert == "" && c.MaySetLimits {
			m[tok] = true
		}
	}
	return m
}

// clientCerts are the config's certificate clients (clients: entries with
// a cert) as the router takes them: by the identity the certificate
// carries.
func clientCerts(cfg config.Config) map[string]api.CertClient {
	m := map[string]api.CertClient{}
	for name, c := range cfg.Clients {
		if c.Cert != "" {
			m[c.Cert] = api.CertClient{Name: name, Tenants: c.Tenants, MaySetLimits: c.MaySetLimits}
		}
	}
	return m
}

// preloadCheckpoint reads the Redis checkpoint into n before it joins, so
// that the partitions it restores after a whole-cluster restart come back
// with every checkpointed key. A Redis that does not answer within a few
// seconds only costs a warning: the node starts, and restores keys one by
// one on first use, as without a preload.
func preloadCheckpoint(ctx context.Context, log *slog.Logger, n *node.Node, rc *redis.Client) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := rc.Ping(pctx).Err()
	cancel()
	if err != nil {
		log.Warn("checkpoint not preloaded: redis does not answer", "after", time.Since(start), "err", err)
		return
	}
	pctx, cancel = context.WithTimeout(ctx, time.Minute)
	defer cancel()
	keys, err := n.Preload(pctx)
	if err != nil {
		log.Warn("checkpoint preloaded in part", "keys", keys, "took", time.Since(start), "err", err)
		return
	}
	log.Info("checkpoint preloaded", "keys", keys, "took", time.Since(start))
}

// drain leaves the cluster without a client noticing (ARCHITECTURE.md, "Drain"):
// /readyz fails at once and every answer closes its connection, so load
// balancers and clients move elsewhere (a request already on its way is
// still answered; closing idle connections at once would race with it), while the node keeps serving and
// forwarding for drainFor; then it tells the cluster it is leaving, hands
// every partition on and waits for the acknowledgements, tells the cluster
// it is done (departed), leaves the gossip cluster, and only then is the
// HTTP server shut down.
func drain(log *slog.Logger, draining *atomic.Bool, n *node.Node, r *frontdoor.Door, members *gossip.Cluster, drainFor time.Duration) {
	draining.Store(true) // answers now close their connections (closeWhileDraining)
	if members.NumMembers() <= 1 {
		return // the last member has nobody to hand to
	}
	log.Info("draining: not ready, still serving", "for", drainFor)
	time.Sleep(drainFor)
	if err := members.SetLeaving(2 * time.Second); err != nil {
		log.Warn("drain: announce leaving", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := n.Drain(ctx)
	cancel()
	if err != nil {
		log.Warn("drain: partitions not handed on; their new owners restore them from replicas", "err", err)
	} else {
		log.Info("drain: every partition handed on")
	}
	// Fallback admissions still owed go to their owners before we leave.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
	if owing := r.PayDebts(ctx); owing > 0 {
		log.Warn("drain: fallback debts not charged; they are lost with this node", "keys", owing)
	}
	cancel()
	// Only a drain that handed everything on announces the departure: the
	// others then stop counting this node at once (node/custody/quorum.go). After
	// a failed drain it leaves unannounced and stays counted like a
	// crashed member until a majority sees it gone (or 72 h pass): the
	// safe side, since a departure can no longer be told from a cut.
	if err == nil {
		if err := members.SetDeparted(2 * time.Second); err != nil {
			log.Warn("drain: announce departure", "err", err)
		}
	}
	if err := members.Leave(5 * time.Second); err != nil {
		log.Warn("drain: leave", "err", err)
	}
}

// closeWhileDraining answers with "Connection: close" once draining is
// set: a client (or a TCP load balancer's pinned connection) finishes its
// request here and opens its next connection to a node that is ready.
func closeWhileDraining(h http.Handler, draining *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, req)
	})
}

func splitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	var p int
	if _, err := fmt.Sscan(port, &p); err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return host, p, nil
}

// hotKeyRate is the node's HotKeyRate for the config's hot_key_rate, where
// 0 turns slices off.
func hotKeyRate(perSecond int) int {
	if perSecond == 0 {
		return -1
	}
	return perSecond
}
