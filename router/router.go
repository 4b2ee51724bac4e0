package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/tracing"
)

// Cluster is what the router needs of the node: execute a call at its key's
// owner, and a view of the ring for admin and fallback shares. *node.Node
// implements it.
type Cluster interface {
	// Do executes c at the owner of c.Key, here or forwarded. An error means
	// the owner could not be reached (wrapping node.ErrPeerDown), its key's
	// state is still on its way (node.ErrTransferPending), or ctx ended
	// (wrapping ctx.Err(): the router's cap on a live but slow owner, or the
	// client gone).
	Do(ctx context.Context, c node.Call) (node.Answer, error)
	// Ring is the current ring; nil on a node that has not joined a cluster.
	Ring() *ring.Ring
	// Name is this member's name.
	Name() string
}

// Config configures a Router. Zero fields take the documented defaults.
type Config struct {
	// Limits gives the limits of a limiter key (TenantKey, PoolKey,
	// GroupKey, ModelKey, and the descriptor keys DecideHits is given).
	// Required.
	Limits func(key string) limiter.Limits
	// PoolFor maps a model name to its pool, if any. Nil means no pools.
	PoolFor func(model string) (pool string, ok bool)
	// Price gives a model's price (limiter.Request.Price), if it has one;
	// Budgeted reports whether any key has a spend limit, so that an
	// unpriced acquire is refused where a budget could not count it
	// (UnpricedError). Nil: nothing is priced, nothing budgeted.
	Price    func(model string) (limiter.Price, bool)
	Budgeted func() bool
	// Weight gives a tenant's weight in the fair shares of its pool
	// (limiter.Request.Weight; the pool's limits say whether it is
	// fair). Nil: every tenant weighs 1.
	Weight func(tenant string) int64
	// Chain gives the groups above a tenant and the models entries that
	// apply to a model at each level (chain.go); model may be "". Nil
	// means every tenant stands alone, without per-model limits. Limits
	// must then give the limits of GroupKey and ModelKey keys too. It is
	// called on every acquire, concurrently.
	Chain func(tenant, model string) Chain
	// Fallback is the policy when an owner is unreachable. Empty means
	// fallback.Degraded.
	Fallback fallback.Policy
	// ForwardTimeout is the config's forward_timeout: how long a forward
	// waits before the node probes the owner (node.ForwardConfig.ProbeAfter,
	// wired there). It no longer bounds a decision: the router uses it only
	// as the retry-after of the closed policy's refusals, the time after
	// which an unreachable owner is worth asking again. Kept rather than
	// removed so callers and the config keep their meaning. Zero means 15ms.
	ForwardTimeout time.Duration
	// ForwardMaxWait is the hard cap on waiting for a key's owner that is
	// alive but slow (plus the call's wait_ms for an acquire). An owner
	// that is unreachable fails sooner (the node's liveness rule) and the
	// fallback answers; an owner still silent at the cap gets no fallback:
	// the request is refused with a 503 and admits nothing, since the owner
	// may yet count it. Zero means 2s.
	ForwardMaxWait time.Duration
	// Registry receives the router's metrics. Nil registers nothing.
	Registry prometheus.Registerer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// DebtInterval is how often fallback debts are charged to their keys'
	// owners (fallback.Debts). Zero means fallback.DefaultDebtInterval
	// (100ms).
	DebtInterval time.Duration
	// Logger receives the router's logs. Nil discards them.
	Logger *slog.Logger
	// MaxFallbackKeys bounds the keys the fallback remembers (owner
	// reports, local windows, debts). A new key past it takes the place of
	// one that holds nothing, or its fallback acquire is refused with a
	// 503 (max_keys); debts recorded for admissions made elsewhere always
	// enter. Zero means fallback.DefaultMaxKeys (1,000,000).
	MaxFallbackKeys int
	// Tracer, if not nil, makes the spans of decisions (trace.go); nil is
	// tracing off.
	Tracer *tracing.Tracer
}

// Router turns the front ends' requests into decisions across the keys
// they charge. Safe for concurrent use.
type Router struct {
	cfg          Config
	cluster      Cluster
	quick        immediate       // cluster, when it tells which keys it decides at once (Quick)
	degraded     *fallback.State // per key: the owner's last report, the local fallback window, the debts
	debts        *fallback.Debts // charges the debts to the keys' owners
	metrics      *metrics
	timeouts     prometheus.Counter // tokenring_owner_timeouts_total
	log          *slog.Logger
	warn         rate.Sometimes // at most one fallback warning a second: an outage must not flood the log
	redeliveries *redeliveries  // rollbacks sent again once their owner is back
	activity     Activity       // refusals and pool admissions answered here, for the admin console (activity.go)
}

// New returns a Router deciding through cluster.
func New(cluster Cluster, cfg Config) (*Router, error) {
	if cfg.Limits == nil {
		return nil, errors.New("router: Limits is required")
	}
	if cfg.PoolFor == nil {
		cfg.PoolFor = func(string) (string, bool) { return "", false }
	}
	if cfg.Fallback == "" {
		cfg.Fallback = fallback.Degraded
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 15 * time.Millisecond
	}
	if cfg.ForwardMaxWait <= 0 {
		cfg.ForwardMaxWait = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DebtInterval <= 0 {
		cfg.DebtInterval = fallback.DefaultDebtInterval
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	timeouts := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tokenring_owner_timeouts_total",
		Help: "Calls refused with a 503 because the key's owner, alive but slow, did not answer within forward_max_wait (nothing admitted, no fallback).",
	})
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(timeouts); err != nil {
			return nil, fmt.Errorf("router metrics: %w", err)
		}
	}
	r := &Router{
		cfg:          cfg,
		cluster:      cluster,
		degraded:     fallback.NewState(cfg.Now, cfg.MaxFallbackKeys),
		metrics:      m,
		timeouts:     timeouts,
		log:          cfg.Logger,
		warn:         rate.Sometimes{Interval: time.Second},
		redeliveries: newRedeliveries(),
	}
	if r.debts, err = fallback.NewDebts(r.degraded, fallback.DebtsConfig{
		Charge: r.charge, Limits: cfg.Limits, Now: cfg.Now, MaxWait: cfg.ForwardMaxWait,
		Interval: cfg.DebtInterval, Registry: cfg.Registry, Log: r.log,
	}); err != nil {
		return nil, err
	}
	if rs, ok := cluster.(releaser); ok {
		// Cut off from a key's new owner, this node falls back from
		// what it had counted itself: it must not hand out what is
		// already spent.
		rs.OnRelease(r.degraded.Report)
	}
	r.quick, _ = cluster.(immediate)
	return r, nil
}

// releaser is a Cluster that reports the keys leaving its table
// (*node.Node).
type releaser interface {
	OnRelease(node.ReleaseSink)
}

// holder is a Cluster that shows the status of a key whose state its
// table holds (*node.Node).
type holder interface {
	Held(key string) (limiter.Status, bool)
}

// reportHeld makes this node's own count of key its report when its table
// still holds the key's state but it cannot decide (its lease lapsed): the
// degraded share then starts from what is left, exactly as counted here,
// as it does from a forwarded answer or a released key's status.
func (r *Router) reportHeld(key string) {
	if h, ok := r.cluster.(holder); ok {
		if st, held := h.Held(key); held {
			r.degraded.Report(key, st, r.cfg.Now())
		}
	}
}

// sharers is implemented by a Cluster that knows how many members may
// fall back at once (*node.Node: the membership its majority rule counts,
// which a member that died or was cut off stays part of).
type sharers interface{ Sharers() int }

// members is the number of members a fallback share divides by: the
// cluster's sharers when it knows them, else the ring's members.
func (r *Router) members() int {
	if s, ok := r.cluster.(sharers); ok {
		if n := s.Sharers(); n > 0 {
			return n
		}
	}
	if rg := r.cluster.Ring(); rg != nil {
		if n := len(rg.Members()); n > 0 {
			return n
		}
	}
	return 1
}

// charge sends the debts c of key to its owner (fallback.DebtsConfig.Charge).
func (r *Router) charge(ctx context.Context, key string, c fallback.Charge) (limiter.Status, bool, error) {
	call := node.Call{Op: node.OpCharge, Key: key, Charge: node.Charge{Requests: c.Requests, Tokens: c.Tokens, At: c.At}}
	a, err := r.cluster.Do(ctx, call)
	return a.Decision.Status, a.OK, err
}

// Close stops the router's background work: the loop charging fallback
// debts (which runs only while some are owed). Debts still owed then are
// never charged. It is safe to call more than once.
func (r *Router) Close() error {
	r.debts.Close()
	r.redeliveries.close()
	return nil
}

// Limits gives the limits of key (Config.Limits).
func (r *Router) Limits(key string) limiter.Limits { return r.cfg.Limits(key) }

// Owe records requests and tokens admitted for key at at that its owner has
// not counted: what a member fenced off on the minority side of a network
// split admitted after its last replication (node.FenceSink). They are
// debts like fallback admissions, charged to the key's owner once one is
// reachable, so that the merged window holds both sides' admissions.
func (r *Router) Owe(key string, requests, tokens int64, at time.Time) {
	if requests <= 0 && tokens <= 0 {
		return
	}
	r.degraded.OweUnits(key, requests, tokens, at)
	r.debts.Recorded(key, requests)
}

// PayDebts charges every debt still owed, a round every debt interval,
// until none is left or ctx ends, and returns how many keys still owe. A
// draining node calls it once its partitions are handed on and before it
// leaves, so that its fallback admissions are not lost with it.
func (r *Router) PayDebts(ctx context.Context) (owing int) { return r.debts.Pay(ctx) }
