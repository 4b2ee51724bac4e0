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
	"github.com/tokenring/tokenring/internal/lazyctx"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
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
	// GroupKey, ModelKey). Required.
	Limits func(key string) limiter.Limits
	// PoolFor maps a model name to its pool, if any. Nil means no pools.
	PoolFor func(model string) (pool string, ok bool)
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
}

// TenantKey is the limiter key of a tenant.
func TenantKey(tenant string) string { return "t:" + tenant }

// PoolKey is the limiter key of a pool.
func PoolKey(pool string) string { return "p:" + pool }

// Router turns the front ends' requests into decisions across the keys
// they charge. Safe for concurrent use.
type Router struct {
	cfg      Config
	cluster  Cluster
	quick    immediate       // cluster, when it tells which keys it decides at once (Quick)
	degraded *fallback.State // per key: the owner's last report, the local fallback window, the debts
	debts    *fallback.Debts // charges the debts to the keys' owners
	metrics  *metrics
	timeouts prometheus.Counter // tokenring_owner_timeouts_total
	log      *slog.Logger
	warn     rate.Sometimes // at most one fallback warning a second: an outage must not flood the log
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
		cfg:      cfg,
		cluster:  cluster,
		degraded: fallback.NewState(cfg.Now, cfg.MaxFallbackKeys),
		metrics:  m,
		timeouts: timeouts,
		log:      cfg.Logger,
		warn:     rate.Sometimes{Interval: time.Second},
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

// outcome is the result of one call, possibly decided by the fallback.
type outcome struct {
	answer   node.Answer
	fallback bool // decided locally because the owner was unreachable
}

// OwnerTimeoutRetry is the retry-after of a 503 for an owner that did not
// answer within the cap: it is alive, but too busy to be asked again at once.
const OwnerTimeoutRetry = time.Second

// OwnerTimeoutError is decide's error for an owner that is alive (its
// connection is not silent) but did not answer within ForwardMaxWait. Nothing
// was admitted: the HTTP answer is a 503.
type OwnerTimeoutError struct {
	key  string
	wait time.Duration
}

func (e *OwnerTimeoutError) Error() string {
	return fmt.Sprintf("owner of %s did not answer within %v", e.key, e.wait)
}

// decide executes c at its owner. It waits for a live owner up to the hard
// cap ForwardMaxWait (plus wait_ms for an acquire); the node gives up sooner,
// with an error wrapping node.ErrPeerDown, when the owner is unreachable
// (refused, reset, or silent past its liveness interval after a probe), and
// then decide applies the fallback policy, as it does for
// node.ErrTransferPending. The cap passing means the owner is alive but slow:
// no fallback, since the owner may still count the call; decide returns an
// *OwnerTimeoutError and admits nothing. ctx's own end (client gone) is
// returned as an error.
//
// Other errors (node.ErrNoOwner while rings disagree, an error text from a
// remote node) fall back as they always did.
func (r *Router) decide(ctx context.Context, c *node.Call, tokens int64) (outcome, error) {
	wait := r.cfg.ForwardMaxWait
	if c.Op == node.OpAcquire {
		wait += c.Req.Wait
	}
	cctx, cancel := lazyctx.WithTimeout(ctx, wait)
	start := r.cfg.Now()
	a, err := r.cluster.Do(cctx, *c)
	cancel()
	where := "local"
	switch {
	case err != nil:
		where = "failed"
	case a.Owner != r.cluster.Name():
		where = "forwarded"
	}
	end := r.cfg.Now()
	r.metrics.observe(c.Op, where, end.Sub(start))
	if err == nil && a.Decision.Reason == limiter.TableFull {
		return outcome{}, &TableFullError{owner: a.Owner, retry: a.Decision.RetryAfter}
	}
	if err == nil {
		// Every answer carries the key's status: remember what another
		// owner reported as remaining, for the degraded share. This
		// node's own answers are not reported one by one: its table is
		// their report while it holds the key (reportHeld), and the
		// key's status is handed to the fallback as its state leaves the
		// table (node.OnRelease), before any call for it goes elsewhere.
		if where == "forwarded" {
			r.degraded.Report(c.Key, a.Decision.Status, end)
		}
		return outcome{answer: a}, nil
	}
	if ctx.Err() != nil {
		return outcome{}, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, node.ErrPeerDown) && !errors.Is(err, node.ErrTransferPending) {
		r.timeouts.Inc()
		r.warn.Do(func() {
			r.log.Warn("owner alive but slow: refused without fallback (logged at most once a second)", "op", c.Op.String(), "key", c.Key, "cap", wait, "err", err)
		})
		return outcome{}, &OwnerTimeoutError{key: c.Key, wait: wait}
	}
	r.warn.Do(func() {
		r.log.Warn("owner unreachable, falling back (logged at most once a second)", "op", c.Op.String(), "key", c.Key, "policy", string(r.cfg.Fallback), "err", err)
	})
	return r.fallback(c, tokens)
}

// fallback decides c here, by the fallback policy, its owner being out of
// reach: an acquire is admitted or refused, anything else changes nothing
// (the owner holds the lease; it expires there by its TTL).
func (r *Router) fallback(c *node.Call, tokens int64) (outcome, error) {
	o := outcome{fallback: true, answer: node.Answer{Owner: r.cluster.Name()}}
	switch c.Op {
	case node.OpAcquire:
		// Every fallback admission is a debt, charged to the key's window
		// at its owner once one is reachable (fallback.Debts). One that could not
		// be accounted for (too many keys owing) is refused.
		d := &o.answer.Decision
		switch {
		case r.cfg.Fallback == fallback.Closed:
			d.Reason = limiter.Requests
			d.RetryAfter = r.cfg.ForwardTimeout
		case !r.debts.Room(c.Key):
			d.Reason = limiter.Requests
			d.RetryAfter = r.cfg.DebtInterval
		case r.cfg.Fallback == fallback.Open:
			if d.Allowed = r.degraded.Owe(c.Key, tokens); !d.Allowed {
				d.Reason, d.RetryAfter = limiter.TableFull, fallback.FullRetry
			}
		default:
			r.reportHeld(c.Key)
			id, reason, retry := r.degraded.Acquire(c.Key, r.cfg.Limits(c.Key), r.members(), tokens)
			d.Allowed, d.Lease, d.Reason, d.RetryAfter = reason == limiter.None, id, reason, retry
		}
		if d.Reason == limiter.TableFull && !d.Allowed {
			r.metrics.fallback(r.cfg.Fallback, false)
			return outcome{}, &TableFullError{owner: "this node's fallback", retry: d.RetryAfter}
		}
		if d.Allowed {
			d.Reserved = tokens
			r.debts.Recorded(c.Key, 1)
		}
		r.metrics.fallback(r.cfg.Fallback, d.Allowed)
	case node.OpSettle, node.OpRelease, node.OpCancel, node.OpRenew:
		// The owner holds the lease; it will expire there by its TTL.
	}
	return o, nil
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
