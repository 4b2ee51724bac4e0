package node

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/ring"
)

// TestSim runs the production node under a simulated network and clock
// (simnet_test.go): 3 to 5 real Nodes, Stepped, over the in-memory
// transport, each following its own membership feed, driven by one seed
// through events:
//
//   - the clock steps simTick: messages due are delivered, views move,
//     every running node's periodic work runs (custody ticks, heartbeats,
//     replication rounds every 100 ms or 1 s by seed, sweeps);
//   - acquires and settles through Do at a random running member (a
//     decision there, or forwarded to the custodian); a settle is
//     sometimes repeated, as a client retrying;
//   - faults: a crash (the process and its memory gone); a crash at the
//     member's next send (the message leaves, nothing after it does) or
//     its next freeze, install or restore (Config.FaultPoint); a restart
//     under a new boot id (half the splits restart a member during them;
//     a third of the restarts crash at their first install); a one-way
//     cut; a split into two sides; a stall of 0.1 to 5 s (the process runs
//     and reads nothing; calls to it fail, one-way messages wait for it,
//     and it may decide a request before its heartbeat runs); and, by
//     seed, loss (0-5%) and duplication (0-5%, the copy up to 1.5 s late)
//     of messages and calls, with delays that reorder, and hosts' clocks
//     skewed by up to ±100 or ±500 ms. Cuts heal after 0.5 to 6.5 s; a new
//     cut or stall waits 2 s after the last heal (see -sim.strict).
//
// Invariants, checked after every event (and at once after a decision at
// a waking member) against the ghost: a record of every admission a client
// was told of (key, when, by whom) and every settle it was told succeeded:
//
//   - single decider: for every partition, at most one running member has
//     it routed here (custody.RouteLocal) while holding the majority's
//     mandate, unfenced;
//   - limit: for every key, the admissions clients were told of within
//     the window (8 s, longer than failure detection) ending now are at
//     most the limit (16) (the window less twice the clocks' skew: a
//     handover to a host ahead expires admissions that much sooner),
//     except those the crash bound forgives: a member
//     that crashed, was declared dead by another while it ran (a stall or
//     a cut looks like a crash), or fenced itself forgives what it admitted
//     in the window before, and, when it crashed or was declared dead,
//     what anyone admitted in it for the partitions it held (state handed
//     to it and not yet replicated dies with it). Fence debts are not
//     charged back: the simulation has no router;
//   - settle once: a lease settles successfully at most once, however
//     often a client repeats the settle, except a settle the crash bound
//     forgives as above (lost with its partition's custodian).
//
// A failing seed prints its replay command and the trace's last lines:
//
//	go test ./node -run 'TestSim$' -sim.seed=N -v
//
// The mutations (ARCHITECTURE.md, "The production-code simulation") were
// each applied by hand once, the simulation run, the first failing seed
// recorded, and the change reverted.
func TestSim(t *testing.T) {
	if *simSeedFlag >= 0 {
		r := runSim(uint64(*simSeedFlag), *simStepsFlag, true)
		t.Logf("seed %d: trace:\n%s", *simSeedFlag, strings.Join(r.trace, "\n"))
		if r.failure != "" {
			t.Fatalf("seed %d: %s", *simSeedFlag, r.failure)
		}
		t.Logf("seed %d: %s", *simSeedFlag, r.summary)
		return
	}
	seeds := *simSeedsFlag
	if seeds <= 0 {
		seeds = 2000
		if raceEnabled || testing.Short() {
			seeds = 100
		}
	}
	var next atomic.Int64
	var mu sync.Mutex
	var first *simResult
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				seed := next.Add(1)
				if seed > int64(seeds) {
					return
				}
				mu.Lock()
				stop := first != nil && first.seed < uint64(seed)
				mu.Unlock()
				if stop {
					return
				}
				r := runSim(uint64(seed), *simStepsFlag, false)
				if r.failure != "" {
					mu.Lock()
					if first == nil || r.seed < first.seed {
						first = &r
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		tail := first.trace[max(0, len(first.trace)-*simTraceFlag):]
		t.Fatalf("seed %d: %s\nreplay: go test ./node -run 'TestSim$' -sim.seed=%d -v\ntrace (last %d lines):\n%s",
			first.seed, first.failure, first.seed, len(tail), strings.Join(tail, "\n"))
	}
	t.Logf("%d seeds passed", seeds)
}

// TestSimDeterministic: a seed replays exactly, which is what makes a
// failing seed worth printing.
func TestSimDeterministic(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		a, b := runSim(seed, 600, true), runSim(seed, 600, true)
		if ja, jb := strings.Join(a.trace, "\n"), strings.Join(b.trace, "\n"); ja != jb {
			t.Fatalf("seed %d ran twice gave two traces:\n%s\n----\n%s", seed, ja, jb)
		}
		if a.summary != b.summary || a.failure != b.failure {
			t.Fatalf("seed %d ran twice: %q %q, then %q %q", seed, a.summary, a.failure, b.summary, b.failure)
		}
	}
}

var (
	simSeedsFlag = flag.Int("sim.seeds", 0, "seeds TestSim runs (0: 2,000, or 100 under -race or -short; make sim runs more)")
	simSeedFlag  = flag.Int("sim.seed", -1, "the one seed TestSim runs, printing its trace")
	simStepsFlag = flag.Int("sim.steps", 2000, "events one seed of TestSim runs")
	simTraceFlag = flag.Int("sim.trace", 200, "lines of trace a failing seed prints")
	simStrict    = flag.String("sim.strict", "", "known gaps to run into instead of avoiding: restarts (a process started alone while others run, cut off), views (failure detection without indirect probes: views that are not transitive), cascade (a cut while another is healing)")
)

// simResult is what one seed did.
type simResult struct {
	seed    uint64
	failure string
	summary string
	trace   []string
}

// simAdmission is one admission a client was told of.
type simAdmission struct {
	key      string
	keyIdx   int
	at       int64 // mono
	by       string
	lease    uint64
	forgiven bool // its decider crashed or fenced within the window after (the crash bound)
}

// simSettle is one settle a client was told succeeded.
type simSettle struct {
	lease    uint64
	keyIdx   int
	by       string
	at       int64 // mono
	forgiven bool  // its settler crashed, or was declared dead, within the window after: the settle may be lost
}

// simGhost is the record the invariants are checked against.
type simGhost struct {
	admitted     []*simAdmission
	open         []*simAdmission // leases not settled yet (a repeat may follow a settle)
	settled      map[uint64]int  // each lease's settles not forgiven
	settles      []*simSettle
	newlySettled map[uint64]int   // the leases settled during the event
	fences       map[string]int64 // each member's fences seen so far (its current node's)
	forgiven     int
}

var simKeys = [...]string{"t:a", "t:b", "t:c", "t:d"}

// simPartitions is the simulated ring's partition count.
const simPartitions = 31

// simPartitionOf is each of simKeys' partition.
var simPartitionOf = func() (ps [len(simKeys)]int) {
	r, err := ring.New(ring.Config{PartitionCount: simPartitions}, []ring.Member{{Name: "n1"}})
	if err != nil {
		panic(err)
	}
	for i, key := range simKeys {
		ps[i] = r.Partition(key)
	}
	return ps
}()

func simLimits(string) limiter.Limits {
	return limiter.Limits{Requests: simLimit, Window: simWindow}
}

// runSim runs one seed for steps events; verbose traces every custody
// message too.
func runSim(seed uint64, steps int, verbose bool) (res simResult) {
	w := &simWorld{
		seed:    seed,
		verbose: verbose,
		rng:     rand.New(rand.NewPCG(seed, 0x7e57)),
		start:   time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		byAddr:  map[string]*simMember{},
		cut:     map[[2]string]int64{},
	}
	w.lossPct = []int{0, 0, 1, 5}[w.rng.IntN(4)]
	w.dupPct = []int{0, 2, 5}[w.rng.IntN(3)]
	w.replicateEvery = []time.Duration{100 * time.Millisecond, time.Second}[w.rng.IntN(2)]
	w.maxSkew = []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond}[w.rng.IntN(3)]
	count := 3 + w.rng.IntN(3)
	for i := range count {
		m := &simMember{w: w, idx: i, name: fmt.Sprintf("n%d", i+1), addr: fmt.Sprintf("10.0.0.%d:7000", i+1)}
		if w.maxSkew > 0 {
			m.skew = time.Duration(w.rng.Int64N(int64(2*w.maxSkew)+1)) - w.maxSkew
		}
		w.members = append(w.members, m)
		w.byAddr[m.addr] = m
	}
	w.logf("seed %d: %d members, loss %d%%, duplication %d%%, replication every %v, clocks skewed up to ±%v", seed, count, w.lossPct, w.dupPct, w.replicateEvery, w.maxSkew)
	g := &simGhost{settled: map[uint64]int{}, newlySettled: map[uint64]int{}, fences: map[string]int64{}}
	w.ghost = g
	defer func() {
		for _, m := range w.members {
			if m.node != nil {
				m.node.Close()
			}
		}
		res.seed, res.trace = seed, w.trace
		res.summary = fmt.Sprintf("%d admissions, %d settles, %d forgiven", len(g.admitted), len(g.settled), g.forgiven)
	}()
	for _, m := range w.members {
		w.start1(m)
	}
	for step := 0; step < steps; step++ {
		w.step(g)
		w.reap(g)
		f := w.failure
		if f == "" {
			f = w.check(g)
		}
		if f != "" {
			w.logf("FAIL: %s", f)
			res.failure = f
			return res
		}
	}
	return res
}

// step runs one event the seed picks.
func (w *simWorld) step(g *simGhost) {
	switch r := w.rng.IntN(1000); {
	case r < 600:
		w.tick()
	case r < 840:
		w.acquire(g)
	case r < 992:
		w.settle(g)
	default:
		w.fault(g)
	}
}

// tick moves the clock one step and lets everything due happen.
func (w *simWorld) tick() {
	w.mono += int64(simTick)
	for _, m := range w.members {
		if m.stallUntil != 0 && w.mono >= m.stallUntil {
			m.stallUntil = 0
			w.logf("%s wakes", m.name)
			if !w.strict("views") {
				// Its suspicions start over from what it probes now,
				// rather than declare dead at once, on timers that ran
				// out in its sleep, members that rejoined meanwhile.
				for _, s := range m.seen {
					if s.pending >= 0 {
						s.pending = w.mono
					}
				}
			}
			if w.rng.IntN(2) == 0 {
				// A request its HTTP server read before its heartbeat
				// runs, checked at once: the heartbeat may fence it next.
				w.acquireAt(m, w.ghost)
				if f := w.check(w.ghost); f != "" && w.failure == "" {
					w.failure = "at the wake of " + m.name + ": " + f
				}
			}
		}
	}
	w.healAndRestart()
	w.deliverDue()
	w.observe()
	for _, m := range w.members {
		if m.running() {
			m.node.FollowFeed(m.feed)
		}
	}
	for _, m := range w.members {
		if m.running() {
			simDebug(w, m)
			m.node.RunDue()
			simDebug(w, m)
		}
	}
}

var simDebug = func(*simWorld, *simMember) {}

// start1 starts m's process: a new incarnation, with an empty memory, its
// first view what it reaches now.
func (w *simWorld) start1(m *simMember) {
	m.inc++
	m.boot = fmt.Sprintf("b%d", m.inc)
	m.heard, m.heardFrom, m.seen = map[string]int64{}, map[string]int64{}, map[string]*simSeen{}
	m.dying, m.armed, m.armedAt, m.stallUntil = false, false, "", 0
	if m.inc > 1 && w.rng.IntN(3) == 0 {
		m.armedAt = "install" // a restart takes partitions over: crash in the middle of one
	}
	ids := &m.ids
	base := uint64(m.idx+1)<<56 | uint64(m.inc)<<40
	cfg := Config{
		Name: m.name, PeerAddr: m.addr, LimitsFor: simLimits,
		Clock: simClock{w, m.skew}, Transport: simPort{m}, Stepped: true,
		FaultPoint: func(where string) {
			if m.armedAt == where {
				m.armedAt, m.dying, m.heldAtDeath = "", true, simHeld(m)
				w.logf("%s crashes at %s", m.name, where)
			}
		},
		Ring:                ring.Config{PartitionCount: simPartitions},
		HotKeyRate:          -1,
		ReplicationInterval: w.replicateEvery,
		Policy:              limiter.Policy{IDs: func() uint64 { return base | atomic.AddUint64(ids, 1) }},
	}
	n, err := New(cfg)
	if err != nil {
		panic(err)
	}
	m.node = n
	m.feed = &simFeed{m: m, events: make(chan gossip.Snapshot, 1)}
	// Its first view is what the members it reaches show (memberlist's
	// push and pull at join): one they show but it cannot reach is shown
	// until its own failure detection drops it.
	m.seen[m.name] = &simSeen{shown: true, boot: m.boot, pending: -1}
	for _, o := range w.members {
		if o == m || !w.reachable(m, o) {
			continue
		}
		for name, s := range o.seen {
			if name != m.name && s.shown && m.seen[name] == nil {
				m.seen[name] = &simSeen{shown: true, boot: s.boot, pending: -1}
			}
		}
	}
	m.feed.cur = w.viewOf(m)
	// Joining is a push and pull with the members it reaches: they learn
	// of it at once, as memberlist's join makes them.
	for _, o := range w.members {
		if o != m && o.running() && w.reachable(o, m) {
			if s := o.seen[m.name]; s == nil || !s.shown || s.boot != m.boot {
				o.seen[m.name] = &simSeen{shown: true, boot: m.boot, pending: -1}
				o.feed.push(w.viewOf(o), "join "+m.name)
			}
		}
	}
	if err := n.JoinFeed(context.Background(), m.feed, simDetect); err != nil {
		panic(err)
	}
	w.logf("%s starts as %s, seeing %d members", m.name, m.boot, len(m.feed.cur))
}

// acquire asks a running member to admit one request for a key.
func (w *simWorld) acquire(g *simGhost) {
	if m := w.pickRunning(); m != nil {
		w.acquireAt(m, g)
	}
}

// acquireAt asks m to admit one request for a key the seed picks.
func (w *simWorld) acquireAt(m *simMember, g *simGhost) {
	keyIdx := w.rng.IntN(len(simKeys))
	key := simKeys[keyIdx]
	a, err := m.node.Do(context.Background(), Call{Op: OpAcquire, Key: key})
	by := w.memberNamed(a.Owner)
	if w.verbose && err != nil {
		w.logf("%s: acquire %s: %v", m.name, key, err)
	}
	if err != nil || !a.Decision.Allowed || m.dying || by == nil || by.dying {
		return // refused, failed, or the answer never reached the client
	}
	ad := &simAdmission{key: key, keyIdx: keyIdx, at: w.mono, by: a.Owner, lease: a.Decision.Lease}
	g.admitted = append(g.admitted, ad)
	g.open = append(g.open, ad)
	w.logf("%s admits %s (partition %d) at %s (lease %x)", a.Owner, key, m.node.Ring().Partition(key), m.name, ad.lease)
}

// settle settles an open lease at a running member; a fifth of the time
// the lease stays open, so that the settle is repeated later.
func (w *simWorld) settle(g *simGhost) {
	m := w.pickRunning()
	if m == nil || len(g.open) == 0 {
		return
	}
	i := w.rng.IntN(len(g.open))
	ad := g.open[i]
	if w.rng.IntN(5) > 0 {
		g.open[i] = g.open[len(g.open)-1]
		g.open = g.open[:len(g.open)-1]
	}
	a, err := m.node.Do(context.Background(), Call{Op: OpSettle, Key: ad.key, Lease: ad.lease})
	if err != nil || !a.OK || m.dying {
		return
	}
	g.settled[ad.lease]++
	g.settles = append(g.settles, &simSettle{lease: ad.lease, keyIdx: ad.keyIdx, by: a.Owner, at: w.mono})
	g.newlySettled[ad.lease] = g.settled[ad.lease]
	w.logf("%s settles %s lease %x (%d)", a.Owner, ad.key, ad.lease, g.settled[ad.lease])
}

func (w *simWorld) pickRunning() *simMember {
	var up []*simMember
	for _, m := range w.members {
		if m.running() {
			up = append(up, m)
		}
	}
	if len(up) == 0 {
		return nil
	}
	return up[w.rng.IntN(len(up))]
}

func (w *simWorld) memberNamed(name string) *simMember {
	for _, m := range w.members {
		if m.name == name {
			return m
		}
	}
	return nil
}
