package fallback

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/limiter"
)

// Every fallback admission (degraded or open policy) is a debt: one
// request and its reserved tokens, admitted at a time, owed to the key's
// window at its owner. State keeps each key's unpaid debts; Debts keeps
// the set of keys that owe, and a background loop that charges them: every
// interval it sends each such key's debts, summed, to the key's current
// owner (DebtsConfig.Charge: an OpCharge through the node), and removes
// them only once the owner acknowledged. A failed charge (owner still
// unreachable, its key still in transfer) is retried at the next round, at
// whichever owner the ring names then: the returning owner, or the new one
// after the ring moved, so debts survive the crash of the owner they were
// owed to. A debt whose latest admission is older than the key's window
// expires unpaid: the owner would count none of it any more.
//
// A charge whose acknowledgement is lost (the connection failed after the
// owner applied it) is charged again: debts are paid at least once, which
// only ever counts more, never less.
//
// The loop runs only while some key owes: the first debt starts it, and it
// ends after a round that leaves nothing owed, so a router that never
// falls back runs no goroutine. Close stops it.
type Debts struct {
	charger  func(ctx context.Context, key string, c Charge) (st limiter.Status, ok bool, err error)
	states   *State
	window   func(key string) time.Duration
	now      func() time.Time
	maxWait  time.Duration // cap of one charge call
	interval time.Duration
	// ticker makes the loop's ticker; tests inject their own.
	ticker  func(time.Duration) (<-chan time.Time, func())
	metrics *debtMetrics
	log     Logger

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

// Logger is the part of *slog.Logger Debts uses.
type Logger interface {
	Warn(msg string, args ...any)
	Debug(msg string, args ...any)
}

// DebtsConfig configures Debts. Every field is required.
type DebtsConfig struct {
	// Charge sends the debts c of key to the key's current owner and
	// returns the owner's status after it; ok is true when the owner
	// acknowledged. It is called concurrently, ctx bounded by MaxWait.
	Charge func(ctx context.Context, key string, c Charge) (st limiter.Status, ok bool, err error)
	// Limits gives a key's limits: a debt older than its key's window
	// expires unpaid.
	Limits func(key string) limiter.Limits
	// Now is the clock.
	Now func() time.Time
	// MaxWait caps one charge.
	MaxWait time.Duration
	// Interval is how often owed debts are charged (DefaultDebtInterval).
	Interval time.Duration
	// Registry receives the debts' metrics; nil registers none.
	Registry prometheus.Registerer
	// Log receives the debts' logs.
	Log Logger
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

// NewDebts returns the debts of states, charged by cfg.Charge, with their
// metrics registered on cfg.Registry.
func NewDebts(states *State, cfg DebtsConfig) (*Debts, error) {
	m, err := newDebtMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Debts{
		charger: cfg.Charge,
		states:  states,
		window: func(key string) time.Duration {
			if w := cfg.Limits(key).Window; w > 0 {
				return w
			}
			return limiter.DefaultWindow
		},
		now:      cfg.Now,
		maxWait:  cfg.MaxWait,
		interval: cfg.Interval,
		ticker:   realTicker,
		metrics:  m,
		log:      cfg.Log,
		ctx:      ctx,
		cancel:   cancel,
		keys:     make(map[string]struct{}),
		stop:     make(chan struct{}),
	}, nil
}

// Room reports whether a fallback admission for key can be accounted for:
// key owes already, or fewer than maxDebtKeys keys do.
func (d *Debts) Room(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.keys[key]
	return ok || len(d.keys) < maxDebtKeys
}

// Recorded notes new debts of key (requests of them) (already added to its state) and
// starts the loop if it is not running. It is called after the debt was
// added, so that a round dropping key from the set for owing nothing
// cannot miss it.
func (d *Debts) Recorded(key string, requests int64) {
	d.metrics.recorded(requests)
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
func (d *Debts) loop() {
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
func (d *Debts) round() {
	d.rounds.Lock() // the loop's and Pay's rounds never charge a key twice at once
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
			d.metrics.expired(expired)
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
func (d *Debts) charge(key string, c Charge) {
	ctx, cancel := context.WithTimeout(d.ctx, d.maxWait)
	defer cancel()
	st, ok, err := d.charger(ctx, key, c)
	if err != nil || !ok {
		d.metrics.chargeFailed()
		d.log.Debug("fallback debt not charged yet; retried next round", "key", key, "debts", c.Requests, "err", err)
		return
	}
	d.states.repaid(key, c, st, d.now())
	d.metrics.repaid(c.Requests)
	d.forget(key)
}

// forget drops key from the owing set if it still owes nothing: the check
// runs under the set's lock, and a new debt adds its key after it is owed.
func (d *Debts) forget(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.states.owes(key) {
		delete(d.keys, key)
	}
}

// owing reports how many keys owe.
func (d *Debts) owing() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.keys)
}

// Close stops the loop and waits for it; charges in flight give up.
// Debts still owed stay unpaid. A second Close does nothing.
func (d *Debts) Close() {
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

// Pay charges every debt still owed, a round every interval, until none
// is left or ctx ends, and returns how many keys still owe.
func (d *Debts) Pay(ctx context.Context) (owing int) {
	tick := time.NewTicker(d.interval)
	defer tick.Stop()
	for {
		d.round()
		if owing = d.owing(); owing == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return owing
		case <-tick.C:
		}
	}
}
