package router

import (
	"context"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// Every fallback admission (degraded or open policy) is a debt: one
// request and its reserved tokens, admitted at a time, owed to the key's
// window at its owner. degraded keeps each key's unpaid debts; debts keeps
// the set of keys that owe, and a background loop that charges them: every
// interval it sends each such key's debts, summed, to the key's current
// owner through Cluster.Do as an OpCharge, and removes them only once the
// owner acknowledged. A failed charge (owner still unreachable, its key
// still in transfer) is retried at the next round, at whichever owner the
// ring names then: the returning owner, or the new one after the ring
// moved, so debts survive the crash of the owner they were owed to. A debt
// whose latest admission is older than the key's window expires unpaid:
// the owner would count none of it any more.
//
// A charge whose acknowledgement is lost (the connection failed after the
// owner applied it) is charged again: debts are paid at least once, which
// only ever counts more, never less.
//
// The loop runs only while some key owes: the first debt starts it, and it
// ends after a round that leaves nothing owed, so a router that never
// falls back runs no goroutine. Close stops it.
type debts struct {
	cluster  Cluster
	states   *degraded
	window   func(key string) time.Duration
	now      func() time.Time
	maxWait  time.Duration // cap of one charge call
	interval time.Duration
	// ticker makes the loop's ticker; tests inject their own.
	ticker  func(time.Duration) (<-chan time.Time, func())
	metrics *metrics
	log     logger

	ctx    context.Context // ended by Close: charges in flight give up
	cancel context.CancelFunc

	rounds  sync.Mutex // held by a round
	mu      sync.Mutex // guards keys, running, closed
	keys    map[string]struct{}
	running bool
	closed  bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// logger is the part of *slog.Logger debts uses.
type logger interface {
	Warn(msg string, args ...any)
	Debug(msg string, args ...any)
}

const (
	// DefaultDebtInterval is how often owed debts are charged.
	DefaultDebtInterval = 100 * time.Millisecond
	// maxDebtKeys bounds the keys that may owe at once; past it, the
	// fallback refuses what it could not account for.
	maxDebtKeys = 100_000
	// chargeParallel bounds the charges of one round in flight at once.
	chargeParallel = 32
)

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

func newDebts(r *Router, interval time.Duration) *debts {
	ctx, cancel := context.WithCancel(context.Background())
	return &debts{
		cluster: r.cluster,
		states:  r.degraded,
		window: func(key string) time.Duration {
			if w := r.cfg.Limits(key).Window; w > 0 {
				return w
			}
			return limiter.DefaultWindow
		},
		now:      r.cfg.Now,
		maxWait:  r.cfg.ForwardMaxWait,
		interval: interval,
		ticker:   realTicker,
		metrics:  r.metrics,
		log:      r.log,
		ctx:      ctx,
		cancel:   cancel,
		keys:     make(map[string]struct{}),
		stop:     make(chan struct{}),
	}
}

// room reports whether a fallback admission for key can be accounted for:
// key owes already, or fewer than maxDebtKeys keys do.
func (d *debts) room(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.keys[key]
	return ok || len(d.keys) < maxDebtKeys
}

// recorded notes new debts of key (requests of them) (already added to its state) and
// starts the loop if it is not running. It is called after the debt was
// added, so that a round dropping key from the set for owing nothing
// cannot miss it.
func (d *debts) recorded(key string, requests int64) {
	d.metrics.debtRecorded(requests)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.keys[key]; !ok {
		d.keys[key] = struct{}{}
	}
	if d.running || d.closed {
		return
	}
	d.running = true
	d.wg.Add(1)
	go d.loop()
}

// loop charges debts every interval until nothing is owed or Close.
func (d *debts) loop() {
	defer d.wg.Done()
	tick, stop := d.ticker(d.interval)
	defer stop()
	for {
		select {
		case <-d.stop:
			return
		case <-tick:
		}
		d.round()
		d.mu.Lock()
		if len(d.keys) == 0 || d.closed {
			d.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
	}
}

// round sends every owing key's debts to its owner once, waits for the
// answers, and removes what was acknowledged.
func (d *debts) round() {
	d.rounds.Lock() // the loop's and PayDebts' rounds never charge a key twice at once
	defer d.rounds.Unlock()
	d.mu.Lock()
	keys := make([]string, 0, len(d.keys))
	for k := range d.keys {
		keys = append(keys, k)
	}
	d.mu.Unlock()
	sem := make(chan struct{}, chargeParallel)
	var wg sync.WaitGroup
	for _, key := range keys {
		if d.ctx.Err() != nil {
			break
		}
		now := d.now()
		c, expired, ok := d.states.owed(key, now, d.window(key))
		if expired > 0 {
			d.metrics.debtsExpired(expired)
			d.log.Debug("fallback debts expired unpaid: older than the window", "key", key, "debts", expired)
		}
		if !ok {
			d.forget(key)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.charge(key, c)
		}()
	}
	wg.Wait()
}

// charge sends one key's debts to its owner.
func (d *debts) charge(key string, c charge) {
	ctx, cancel := context.WithTimeout(d.ctx, d.maxWait)
	defer cancel()
	call := node.Call{Op: node.OpCharge, Key: key, Charge: node.Charge{Requests: c.requests, Tokens: c.tokens, At: c.at}}
	a, err := d.cluster.Do(ctx, call)
	if err != nil || !a.OK {
		d.metrics.debtChargeFailed()
		d.log.Debug("fallback debt not charged yet; retried next round", "key", key, "debts", c.requests, "err", err)
		return
	}
	d.states.repaid(key, c, a.Decision.Status, d.now())
	d.metrics.debtsRepaid(c.requests)
	d.forget(key)
}

// forget drops key from the owing set if it still owes nothing: the check
// runs under the set's lock, and a new debt adds its key after it is owed.
func (d *debts) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.states.owes(key) {
		delete(d.keys, key)
	}
}

// owing reports how many keys owe.
func (d *debts) owing() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.keys)
}

// close stops the loop and waits for it; charges in flight give up.
// Debts still owed stay unpaid. A second close does nothing.
func (d *debts) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	close(d.stop)
	d.cancel()
	d.mu.Unlock()
	d.wg.Wait()
}

// Close stops the router's background work: the loop charging fallback
// debts (which runs only while some are owed) and the proxy's timeouts and
// lease renewals (an upstream call still waiting then is no longer cut nor
// its lease renewed), and closes the
// LLM proxy's idle upstream connections. Debts still owed then are never charged.
// Close does not stop serving HTTP. It is safe to call more
// than once.
func (r *Router) Close() error {
	r.debts.close()
	r.alarms.Close()
	for _, c := range r.upstreams {
		c.CloseIdleConnections()
	}
	return nil
}

// Owe records requests and tokens admitted for key at at that its owner has
// not counted: what a member fenced off on the minority side of a network
// split admitted after its last replication (node.FenceSink). They are
// debts like fallback admissions, charged to the key's owner once one is
// reachable, so that the merged window holds both sides' admissions.
func (r *Router) Owe(key string, requests, tokens int64, at time.Time) {
	if requests <= 0 && tokens <= 0 {
		return
	}
	r.degraded.oweUnits(key, requests, tokens, at)
	r.debts.recorded(key, requests)
}

// PayDebts charges every debt still owed, a round every debt interval,
// until none is left or ctx ends, and returns how many keys still owe. A
// draining node calls it once its partitions are handed on and before it
// leaves, so that its fallback admissions are not lost with it.
func (r *Router) PayDebts(ctx context.Context) (owing int) {
	tick := time.NewTicker(r.debts.interval)
	defer tick.Stop()
	for {
		r.debts.round()
		if owing = r.debts.owing(); owing == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return owing
		case <-tick.C:
		}
	}
}
