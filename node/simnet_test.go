package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
)

// The simulation's world (sim_test.go runs it): one simulated clock, an
// in-memory network between real Nodes (Config.Transport), and each
// member's membership feed (JoinFeed), everything driven from one
// goroutine by one seed. Nodes are Stepped: they start no goroutine, their
// periodic work runs when the world's clock passes it (RunDue).
//
// The network. Custody messages and pings are one-way: queued with a delay
// (simMinDelay to simMaxDelay), lost, duplicated (the copy up to
// simDupDelay later, so reordered too), or cut by a one-way partition, each by the seed.
// Every other call (a forwarded decision, a replication, a replica fetch)
// is executed at once, in the caller's goroutine: it fails before reaching
// the peer (the peer is down, stalled, cut off, or the call is lost) or
// after it executed there (its answer is lost or cut off), both as
// ErrPeerDown, as a broken TCP connection does. What happens to a call
// depends on its content and the clock only (simFate), not on the order
// the replication's goroutines make their calls in.
//
// Failure detection: a member shows another in its view as soon as it can
// reach it both ways, directly or through a relay (with -sim.strict=views,
// directly and simJoinDelay later, each in its own time), and drops it once
// it could not for simDetect (memberlist's suspicion), always longer than
// any delay: delivery is faster than failure detection, as the custody
// protocol assumes (node/custody/doc.go).

const (
	simTick      = 10 * time.Millisecond // one step of the clock
	simMinDelay  = time.Millisecond
	simMaxDelay  = 60 * time.Millisecond
	simDupDelay  = 1500 * time.Millisecond // a duplicate's longest delay
	simJoinDelay = 100 * time.Millisecond
	simDetect    = 2 * time.Second // also each node's deadAfter
	simWindow    = 8 * time.Second // every key's window: longer than failure detection, so what a lost handover dropped still counts when the partition is restored
	simLimit     = 16              // every key's requests per window
)

// simWorld is the simulated cluster.
type simWorld struct {
	seed    uint64
	rng     *rand.Rand // the driver's choices; the driver's goroutine only
	start   time.Time
	mono    int64 // ns since start; the driver's goroutine writes it between events only
	members []*simMember
	byAddr  map[string]*simMember
	verbose bool   // trace every custody message delivered
	failure string // an invariant broken in the middle of an event
	// replicateEvery is every node's ReplicationInterval: what a crash
	// may lose.
	replicateEvery time.Duration
	// maxSkew bounds every host's clock skew (±), by seed.
	maxSkew time.Duration
	ghost   *simGhost

	mu      sync.Mutex          // guards the fields below (replication calls run on goroutines)
	cut     map[[2]string]int64 // from, to → mono the cut heals at
	healed  int64               // mono the last cut healed
	queue   []*simMsg
	seq     uint64
	lossPct int // of sync calls and one-way messages
	dupPct  int
	trace   []string
}

// simMember is one member's name and address across its incarnations.
type simMember struct {
	w          *simWorld
	name, addr string
	idx        int
	inc        int    // incarnations so far
	boot       string // the boot id the member announces
	node       *Node  // nil while down
	feed       *simFeed
	stallUntil int64         // mono until which the process is stalled; 0 when running
	restartAt  int64         // mono after which a crashed process starts again, when it may
	skew       time.Duration // its host's wall clock minus the world's (a restart keeps it)
	armed      bool          // crashes right after its next send (a fault point)
	armedAt    string        // crashes at the next such Config.FaultPoint
	dying      bool          // crashed at a send: nothing more leaves it; closed after the event
	// heldAtDeath is what it held when it died at a fault point: the rest
	// of the step still runs (and may freeze), but its memory is gone.
	heldAtDeath *[simPartitions]bool
	heard       map[string]int64
	heardFrom   map[string]int64
	ids         uint64 // lease ids drawn, for deterministic ids
	seen        map[string]*simSeen
}

// simSeen is one member's view of another: whether it shows it, and
// since when the truth differs from what it shows.
type simSeen struct {
	shown   bool
	boot    string
	pending int64 // mono the truth began to differ; -1 when it does not
}

// simMsg is a one-way message on its way.
type simMsg struct {
	at       int64
	seq      uint64
	from, to *simMember
	toInc    int
	pong     bool   // an answer: moves from's heard, nothing else
	tag      string // what the message is, its bytes aside: its fate and order are drawn on it
	call     Call
}

func (w *simWorld) logf(format string, args ...any) {
	w.mu.Lock()
	w.trace = append(w.trace, fmt.Sprintf("%8.3fs ", float64(w.mono)/1e9)+fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// isCut reports whether messages from a to b are cut now. Callers hold mu.
func (w *simWorld) isCut(a, b string) bool {
	_, ok := w.cut[[2]string{a, b}]
	return ok
}

// now is the world's wall clock.
func (w *simWorld) now() time.Time { return w.start.Add(time.Duration(w.mono)) }

// running reports whether m's process runs now: up, not stalled, not dying.
func (m *simMember) running() bool {
	return m.node != nil && !m.dying && m.stallUntil == 0
}

// simClock is a member's Clock: the world's. A timer fires at once: a
// wait in the simulation (for a partition, a first ring) gives up at once,
// which its caller handles as it handles the wait running out.
type simClock struct {
	w    *simWorld
	skew time.Duration // how far this host's wall clock is ahead of the world's
}

func (c simClock) Now() time.Time { return c.w.now().Add(c.skew) }
func (c simClock) Mono() int64    { return c.w.mono }
func (c simClock) NewTimer(time.Duration) Timer {
	ch := make(chan time.Time, 1)
	ch <- c.w.now()
	return simTimer(ch)
}

type simTimer chan time.Time

func (t simTimer) C() <-chan time.Time { return t }
func (t simTimer) Stop() bool          { return false }

// simPort is a member's Transport.
type simPort struct{ m *simMember }

var _ InboundTransport = simPort{}

// simFate draws, from a call's content, the clock and the seed, a number
// in [0, 100): the same call made at the same moment meets the same fate
// whichever goroutine makes it first.
// A call's bytes are not drawn on: a batch's order may be a map's.
func (w *simWorld) simFate(from, to string, c *Call, salt uint64) int {
	return int(w.hash(from, to, fmt.Sprintf("%d|%s|%d", c.Op, c.Key, c.Lease), salt) % 100)
}

// hash draws a number from the seed, the clock and what names an event.
func (w *simWorld) hash(from, to, what string, salt uint64) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%d|%s|%s|%s|%d", w.seed, w.mono, from, to, what, salt)
	return h.Sum64()
}

func (p simPort) Call(ctx context.Context, addr string, c *Call) (Answer, error) {
	from, w := p.m, p.m.w
	to := w.byAddr[addr]
	if to == nil {
		return Answer{}, fmt.Errorf("%s: no such member: %w", addr, ErrPeerDown)
	}
	if c.Op == peer.OpTransfer || c.Op == peer.OpPing {
		return Answer{OK: true}, p.send(to, c)
	}
	w.mu.Lock()
	down := from.dying || !to.running() || w.isCut(from.name, to.name) || w.simFate(from.name, to.name, c, 1) < w.lossPct
	if from.armed && !down {
		from.armed, from.dying, from.heldAtDeath = false, true, simHeld(from) // the call leaves; the process dies right after
	}
	w.mu.Unlock()
	if down {
		return Answer{}, fmt.Errorf("%s → %s: %w", from.name, to.name, ErrPeerDown)
	}
	w.heardBy(to, from)
	a, err := to.node.Serve(ctx, c)
	w.mu.Lock()
	lost := to.dying || w.isCut(to.name, from.name) || w.simFate(from.name, to.name, c, 2) < w.lossPct
	w.mu.Unlock()
	if lost {
		return Answer{}, fmt.Errorf("%s → %s: answer lost: %w", from.name, to.name, ErrPeerDown)
	}
	w.heardBy(from, to)
	if err != nil {
		return Answer{}, errors.New(err.Error()) // the peer protocol carries an error's text
	}
	return a, nil
}

// heardBy records that m heard from o now.
func (w *simWorld) heardBy(m, o *simMember) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m.heard[o.addr] = w.mono
	m.heardFrom[o.addr] = w.mono
}

// send queues a one-way message: each custody message of a batch on its
// own (the shell's batching order is a map's), each maybe lost or doubled.
func (p simPort) send(to *simMember, c *Call) error {
	from, w := p.m, p.m.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if from.dying || to.node == nil || w.isCut(from.name, to.name) {
		return fmt.Errorf("%s → %s: %w", from.name, to.name, ErrPeerDown)
	}
	calls, tags := []Call{*c}, []string{"ping"}
	if c.Op == peer.OpTransfer {
		msgs, err := custody.DecodeMsgs(c.State)
		if err != nil {
			return err
		}
		calls, tags = calls[:0], tags[:0]
		for _, msg := range msgs {
			calls = append(calls, Call{Op: peer.OpTransfer, From: c.From, State: custody.AppendMsgs(nil, []custody.Msg{msg})})
			msg.State = nil
			tags = append(tags, fmt.Sprintf("%+v", msg))
		}
	}
	for i, call := range calls {
		copies := 1
		if w.hash(from.name, to.name, tags[i], 3)%100 < uint64(w.dupPct) {
			copies = 2
		}
		if w.hash(from.name, to.name, tags[i], 4)%100 < uint64(w.lossPct) {
			copies = 0
		}
		for k := range copies {
			w.enqueue(&simMsg{from: from, to: to, toInc: to.inc, tag: tags[i], call: call}, uint64(k))
		}
	}
	if from.armed {
		from.armed, from.dying, from.heldAtDeath = false, true, simHeld(from)
	}
	return nil
}

// enqueue puts msg (its copy-th copy) on the network with a delay drawn
// from what it is. Callers hold mu.
func (w *simWorld) enqueue(msg *simMsg, copy uint64) {
	w.seq++
	msg.seq = w.seq
	spread := uint64(simMaxDelay - simMinDelay)
	if copy > 0 {
		spread = uint64(simDupDelay) // a duplicate may come much later, still before failure detection
	}
	msg.at = w.mono + int64(simMinDelay) + int64(w.hash(msg.from.name, msg.to.name, msg.tag, 5+copy)%spread)
	w.queue = append(w.queue, msg)
}

// deliverDue delivers, in time order, the messages due by now. A message
// to a stalled process waits for it to wake; one to a process that died
// (or restarted) since it was sent, or over a link cut now, is lost.
func (w *simWorld) deliverDue() {
	w.mu.Lock()
	slices.SortFunc(w.queue, func(a, b *simMsg) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.from.name, b.from.name),
			cmp.Compare(a.to.name, b.to.name), cmp.Compare(a.tag, b.tag), cmp.Compare(a.seq, b.seq))
	})
	var due []*simMsg
	keep := w.queue[:0]
	for _, q := range w.queue {
		if q.at > w.mono || (q.to.stallUntil != 0 && q.to.node != nil && q.to.inc == q.toInc) {
			keep = append(keep, q) // not yet, or read once the process wakes
			continue
		}
		due = append(due, q)
	}
	w.queue = keep
	w.mu.Unlock()
	// What these deliveries send is due simMinDelay from now at the
	// earliest: the next call's.
	for _, msg := range due {
		w.deliver(msg)
	}
}

func (w *simWorld) deliver(msg *simMsg) {
	from, to := msg.from, msg.to
	w.mu.Lock()
	lost := to.node == nil || to.inc != msg.toInc || to.dying || w.isCut(from.name, to.name)
	w.mu.Unlock()
	if lost {
		return
	}
	if msg.pong {
		w.mu.Lock()
		to.heard[from.addr] = w.mono
		w.mu.Unlock()
		return
	}
	w.heardBy(to, from)
	if w.verbose && msg.call.Op == peer.OpTransfer {
		w.logf("%s → %s: %s", from.name, to.name, msg.tag)
	}
	if msg.call.Op == peer.OpTransfer {
		if _, err := to.node.Serve(context.Background(), &msg.call); err != nil {
			w.logf("%s: transfer from %s refused: %v", to.name, from.name, err)
		}
	}
	w.mu.Lock()
	if from.node != nil && !w.isCut(to.name, from.name) {
		w.enqueue(&simMsg{from: to, to: from, toInc: from.inc, pong: true, tag: "pong " + msg.tag}, 0)
	}
	w.mu.Unlock()
}

func (p simPort) Heartbeat(addr string) {
	if to := p.m.w.byAddr[addr]; to != nil {
		_ = p.send(to, &Call{Op: peer.OpPing})
	}
}

func (p simPort) HeardAt(addr string) time.Time {
	p.m.w.mu.Lock()
	defer p.m.w.mu.Unlock()
	return p.m.w.start.Add(time.Duration(p.m.heard[addr]) + p.m.skew) // on its own clock
}

func (p simPort) HeardFrom(addr string) time.Time {
	p.m.w.mu.Lock()
	defer p.m.w.mu.Unlock()
	at, ok := p.m.heardFrom[addr]
	if !ok {
		return time.Time{}
	}
	return p.m.w.start.Add(time.Duration(at) + p.m.skew)
}

func (p simPort) Up(addr string) bool {
	to := p.m.w.byAddr[addr]
	return to != nil && to.node != nil
}

func (p simPort) Keep(map[string]bool) {}
func (p simPort) Close()               {}

// simFeed is a member's Membership: the views the world computes for it.
type simFeed struct {
	m      *simMember
	events chan gossip.Snapshot
	cur    []gossip.MemberState
	seq    uint64
}

func (f *simFeed) Members() []gossip.MemberState  { return f.cur }
func (f *simFeed) Events() <-chan gossip.Snapshot { return f.events }

func (f *simFeed) Reincarnate(time.Duration) (string, error) {
	f.m.inc++ // a new boot id; the same process and state
	f.m.boot = fmt.Sprintf("b%d", f.m.inc)
	f.m.w.logf("%s reincarnates as %s", f.m.name, f.m.boot)
	return f.m.boot, nil
}

// push queues the view members for the feed's node.
func (f *simFeed) push(members []gossip.MemberState, why string) {
	f.cur = members
	f.seq++
	select {
	case <-f.events: // not read yet: the newer view replaces it, as gossip's latest snapshot does
	default:
	}
	f.events <- gossip.Snapshot{Seq: f.seq, Reason: why, Members: members}
}

// reachable reports whether a's failure detector finds b alive now: b
// runs, and a probe reaches it and its answer comes back, directly or
// through one relay (memberlist's indirect probes). With -sim.strict=views
// only directly: views then need not be transitive (ARCHITECTURE.md).
func (w *simWorld) reachable(a, b *simMember) bool {
	if a == b {
		return true
	}
	if !b.running() {
		return false
	}
	both := func(x, y *simMember) bool {
		return !w.isCut(x.name, y.name) && !w.isCut(y.name, x.name)
	}
	if both(a, b) {
		return true
	}
	if w.strict("views") {
		return false
	}
	for _, r := range w.members {
		if r != a && r != b && r.running() && both(a, r) && both(r, b) {
			return true
		}
	}
	return false
}

// strict reports whether -sim.strict names the known gap gap.
func (w *simWorld) strict(gap string) bool { return strings.Contains(*simStrict, gap) }

// observe moves every running member's view towards the truth: a member
// shows up simJoinDelay after it became reachable (or took a new boot id),
// and disappears simDetect after it stopped being. A stalled member's view
// does not move.
func (w *simWorld) observe() {
	for _, m := range w.members {
		if !m.running() {
			continue
		}
		changed := false
		for _, o := range w.members {
			s := m.seen[o.name]
			if s == nil {
				s = &simSeen{pending: -1}
				m.seen[o.name] = s
			}
			truth := w.reachable(m, o) || (o.boot != s.boot && w.gossiped(m, o))
			if truth == s.shown && (!truth || o.boot == s.boot) {
				s.pending = -1
				continue
			}
			if s.pending < 0 {
				s.pending = w.mono
			}
			delay := time.Duration(0) // both learn of each other at once
			if w.strict("views") {
				delay = simJoinDelay // each in its own time: views need not be transitive meanwhile
			}
			if !truth {
				delay = simDetect
			}
			if o == m || w.mono-s.pending >= int64(delay) {
				if s.shown && !truth && o.node != nil {
					// Declared dead while its process lives: its
					// custody may be restored elsewhere meanwhile.
					w.logf("%s declares %s dead", m.name, o.name)
					w.forgive(o, w.ghost)
				}
				s.shown, s.boot, s.pending, changed = truth, o.boot, -1, true
			}
		}
		if changed {
			m.feed.push(w.viewOf(m), "change")
		}
	}
}

// gossiped reports whether a member m reaches shows o's current
// incarnation: memberlist disseminates a new incarnation's alive message,
// so m learns of it even while it cannot probe o itself (o stalled, or cut
// off from m), and drops it only by its own failure detection after.
func (w *simWorld) gossiped(m, o *simMember) bool {
	if w.strict("views") {
		return false
	}
	for _, r := range w.members {
		if r == m || r == o || !r.running() || !w.reachable(m, r) {
			continue
		}
		if s := r.seen[o.name]; s != nil && s.shown && s.boot == o.boot {
			return true
		}
	}
	return false
}

// viewOf is the membership m's seen shows.
func (w *simWorld) viewOf(m *simMember) []gossip.MemberState {
	var view []gossip.MemberState
	for _, o := range w.members {
		if s := m.seen[o.name]; s != nil && s.shown {
			view = append(view, gossip.MemberState{Name: o.name, Addr: o.addr, Meta: gossip.Meta{Peer: o.addr, BootID: s.boot}})
		}
	}
	return view
}
