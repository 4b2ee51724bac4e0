package node

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The custody simulation: members running the custody machine over an
// in-memory network that delays, drops, duplicates and reorders messages
// and cuts the cluster in two, while members join, leave gracefully, crash
// and restart, each learning of membership changes at its own moment, and
// clients send admissions through any live member. After every step it
// checks that at most one member admits for a partition and that every
// admission is counted exactly once by the partition's newest custodian;
// at the end, that every partition has come to rest at its ring owner.
//
// A failing seed replays exactly, with a trace:
// go test -run TestCustodySimSeed -sim.seed=N ./node/

var (
	simSeeds = flag.Int("sim.seeds", 10000, "seeds TestCustodySim runs (make sim runs more)")
	simSeed  = flag.Int("sim.seed", -1, "the one seed TestCustodySimSeed replays with a trace")
)

const (
	simParts     = 8
	simMaxDelay  = 6  // ticks a message may take
	simViewLag   = 12 // ticks a member may learn of a membership change late
	simDetect    = 20 // ticks before a crashed member is declared dead (> simMaxDelay)
	simAwait     = 40 // ticks a call waits for custody before falling back
	simMaxHops   = 3
	simTicks     = 300 // ticks with faults and membership changes
	simQuiesce   = 400 // most ticks allowed to come to rest afterwards
	simRestoreIn = 3   // most ticks a restore takes
)

type simMsg struct {
	at   int64
	to   string
	m    custodyMsg
	call *simCall
}

type simCall struct {
	part   int
	hops   int
	handed bool
	until  int64 // awaiting custody until this tick
}

type simMember struct {
	id      string
	m       *custody
	alive   bool
	leaving bool
	table   map[int]int64 // partition → admissions counted, for partitions in the table
	views   []simView     // pending, in order
	waiting []*simCall
	restore map[int]int64 // partition → tick its restore completes
	hidden  int64         // crashed: views show it as live until this tick (failure detection)
}

type simView struct {
	at int64
	v  custodyView
}

type sim struct {
	rng     *rand.Rand
	now     int64
	members map[string]*simMember
	order   []string // member ids in creation order
	net     []simMsg
	due     []simMsg       // delivered this tick, not yet handled
	cut     map[string]int // member → side while the network is cut; nil when whole
	cutEnd  int64
	truth   [simParts]int64 // admissions since the partition's state was last lost
	names   int
	shuffle uint64 // ring seed: changing it moves partitions between old members
	drop    float64
	dup     float64
	trace   []string
	tracing bool // keep a trace: on when a failing seed is replayed
	failure string
	detect  []int64              // ticks at which a crash is detected, in order
	holder  [simParts]*simMember // the newest copy's member at the last check
	// installed records each (partition, epoch) installed anywhere: a
	// giver's copy of an installed epoch is superseded by the taker's.
	installed map[offerID]bool

	admitted, fellBack int
}

func newSim(seed uint64, tracing bool) *sim {
	s := &sim{tracing: tracing, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), members: map[string]*simMember{}, installed: map[offerID]bool{}}
	s.drop = []float64{0, 0.05, 0.2}[s.rng.IntN(3)]
	s.dup = []float64{0, 0.1}[s.rng.IntN(2)]
	n := 1 + s.rng.IntN(4)
	for range n {
		s.spawn()
	}
	s.publish(true)
	return s
}

func (s *sim) logf(format string, args ...any) {
	if !s.tracing {
		return
	}
	if len(s.trace) >= 4000 {
		s.trace = append(s.trace[:0], s.trace[2000:]...) // keep the latest
	}
	s.trace = append(s.trace, fmt.Sprintf("%4d ", s.now)+fmt.Sprintf(format, args...))
}

// errSimFailed unwinds a failed run; runSim recovers it.
type errSimFailed struct{}

func (s *sim) fail(format string, args ...any) {
	s.failure = fmt.Sprintf("tick %d: %s", s.now, fmt.Sprintf(format, args...))
	if s.tracing {
		s.failure += "\ntrace (last 300):\n" + strings.Join(s.trace[max(0, len(s.trace)-300):], "\n")
	}
	panic(errSimFailed{})
}

func (s *sim) spawn() *simMember {
	s.names++
	id := fmt.Sprintf("n%d/%d", s.names, s.rng.Uint32()%1000)
	mb := &simMember{id: id, m: newCustody(id, simParts, custodyConfig{Retry: 4, Round: 30}), alive: true,
		table: map[int]int64{}, restore: map[int]int64{}}
	s.members[id] = mb
	s.order = append(s.order, id)
	s.logf("spawn %s", id)
	return mb
}

// view computes the membership as it is now: rendezvous hashing over the
// live members that are not leaving.
func (s *sim) view() custodyView {
	v := custodyView{Owners: make([]string, simParts), Alive: map[string]bool{}}
	var eligible []string
	for _, id := range s.order {
		mb := s.members[id]
		if !mb.alive && s.now >= mb.hidden {
			continue
		}
		v.Alive[id] = true
		if !mb.leaving {
			eligible = append(eligible, id)
		}
	}
	for p := range simParts {
		var best uint64
		for _, id := range eligible {
			h := fnv.New64a()
			fmt.Fprintf(h, "%d/%s/%d", p, id, s.shuffle)
			if w := h.Sum64(); v.Owners[p] == "" || w > best {
				v.Owners[p], best = id, w
			}
		}
	}
	return v
}

// publish schedules the current membership at every live member, each
// after its own lag (at once when now is true).
func (s *sim) publish(now bool) {
	v := s.view()
	for _, id := range s.order {
		mb := s.members[id]
		if !mb.alive {
			continue
		}
		at := s.now
		if !now {
			at += int64(s.rng.IntN(simViewLag + 1))
		}
		if n := len(mb.views); n > 0 && mb.views[n-1].at > at {
			at = mb.views[n-1].at // views arrive in order
		}
		mb.views = append(mb.views, simView{at: at, v: v})
	}
}

func (s *sim) send(msg custodyMsg) {
	s.deliver(simMsg{to: msg.To, m: msg}, msg.From)
}

func (s *sim) deliver(msg simMsg, from string) {
	if s.rng.Float64() < s.drop {
		return
	}
	if s.cut != nil && s.cut[from] != s.cut[msg.to] {
		return
	}
	copies := 1
	if msg.call == nil && s.rng.Float64() < s.dup {
		copies = 2
	}
	for range copies {
		msg.at = s.now + 1 + int64(s.rng.IntN(simMaxDelay))
		s.net = append(s.net, msg)
	}
}

// apply carries out a member's Ready, as the node's shell does.
func (s *sim) apply(mb *simMember) {
	for {
		rd := mb.m.Ready()
		if len(rd.Msgs)+len(rd.Freeze)+len(rd.Install)+len(rd.Restore) == 0 {
			break
		}
		for _, msg := range rd.Msgs {
			s.send(msg)
		}
		for _, p := range rd.Freeze {
			n, ok := mb.table[p]
			if !ok {
				s.fail("%s freezes partition %d it does not have in its table", mb.id, p)
			}
			delete(mb.table, p)
			s.logf("%s freezes p%d (%d) for %s", mb.id, p, n, mb.m.parts[p].sendTo)
			mb.m.Frozen(p, binary.AppendVarint(nil, n))
		}
		for _, in := range rd.Install {
			n, k := binary.Varint(in.State)
			if k <= 0 {
				s.fail("%s installs a bad snapshot of partition %d: %x", mb.id, in.Part, in.State)
			}
			if _, ok := mb.table[in.Part]; ok {
				s.fail("%s installs partition %d over a copy in its table", mb.id, in.Part)
			}
			if in.Reclaim {
				for _, id := range s.order {
					if o := s.members[id]; o.alive && o != mb && o.m.Holds(in.Part) && !s.superseded(o, in.Part) {
						s.fail("%s takes back partition %d while %s, alive, holds it", mb.id, in.Part, id)
					}
				}
				s.truth[in.Part] = n // what its dead taker admitted is lost
			}
			mb.table[in.Part] = n
			s.logf("%s installs p%d (%d) epoch %d reclaim=%v", mb.id, in.Part, n, mb.m.parts[in.Part].epoch, in.Reclaim)
		}
		for _, p := range rd.Restore {
			for _, id := range s.order {
				if o := s.members[id]; o.alive && o != mb && o.m.Holds(p) {
					s.fail("%s restores partition %d from nothing while %s, alive, holds it", mb.id, p, id)
				}
			}
			s.logf("%s restores p%d (truth was %d)", mb.id, p, s.truth[p])
			mb.restore[p] = s.now + int64(s.rng.IntN(simRestoreIn+1))
		}
	}
	s.retry(mb)
}

// call handles a client call, or a forwarded one, at mb.
func (s *sim) call(mb *simMember, c *simCall) {
	r := mb.m.Route(c.part)
	switch {
	case r.Mode == routeLocal:
		s.admit(mb, c.part)
	case r.Mode == routeAwait || (c.handed && c.hops > 0):
		if c.until == 0 {
			c.until = s.now + simAwait
		}
		mb.waiting = append(mb.waiting, c)
	case c.hops >= simMaxHops:
		s.fellBack++
	default:
		fwd := *c
		fwd.hops++
		fwd.handed = r.Handed
		fwd.until = 0
		s.deliver(simMsg{to: r.To, call: &fwd}, mb.id)
	}
}

// retry re-routes the calls waiting at mb after its custody changed.
func (s *sim) retry(mb *simMember) {
	waiting := mb.waiting
	mb.waiting = nil
	for _, c := range waiting {
		if c.until <= s.now {
			s.fellBack++
			continue
		}
		if r := mb.m.Route(c.part); r.Mode == routeAwait || (r.Mode == routeForward && c.handed && r.To == "") {
			mb.waiting = append(mb.waiting, c)
			continue
		}
		c.handed = false
		s.call(mb, c)
	}
}

// admit counts one admission at mb, which must be the only member admitting
// and hold the newest copy of the partition.
func (s *sim) admit(mb *simMember, p int) {
	if _, ok := mb.table[p]; !ok {
		s.fail("%s admits for partition %d, which is not in its table", mb.id, p)
	}
	if h, ok := s.newest(p); !ok || h.mb != mb || h.sending {
		s.fail("%s admits for partition %d but the newest copy is %+v", mb.id, p, h)
	}
	mb.table[p]++
	s.truth[p]++
	s.admitted++
}

// copyOf returns mb's count for p and whether it has a copy.
func (s *sim) copyOf(mb *simMember, p int) (int64, bool) {
	if n, ok := mb.table[p]; ok {
		return n, true
	}
	if f := mb.m.parts[p].frozen; f != nil {
		n, _ := binary.Varint(f)
		return n, true
	}
	return 0, false
}

// copyRef is one copy of a partition's state: at a live custodian, or in
// an offer on its way to a live member (sent, perhaps, by one that crashed
// since: the taker installs it).
type copyRef struct {
	mb      *simMember // the custodian, or the offer's sender
	epoch   uint64
	count   int64
	sending bool // a giver's frozen copy, or an offer in flight
}

// superseded reports whether mb's copy of p is a giver's copy whose offer
// some member installed.
func (s *sim) superseded(mb *simMember, p int) bool {
	pt := &mb.m.parts[p]
	return pt.sendTo != "" && s.installed[offerID{p, pt.epoch, mb.id}]
}

// offerID names one offer: its partition, epoch and giver.
type offerID struct {
	part  int
	epoch uint64
	from  string
}

// newest is partition p's newest copy: highest epoch; on a tie (an offer
// installed, not yet acknowledged) the taker's.
func (s *sim) newest(p int) (best copyRef, ok bool) {
	consider := func(c copyRef) {
		if !ok || c.epoch > best.epoch || (c.epoch == best.epoch && !c.sending && best.sending) {
			best, ok = c, true
		}
	}
	for _, id := range s.order {
		mb := s.members[id]
		pt := &mb.m.parts[p]
		if !mb.alive || !pt.held || pt.restoring {
			continue
		}
		if s.superseded(mb, p) {
			continue
		}
		n, _ := s.copyOf(mb, p)
		consider(copyRef{mb: mb, epoch: pt.epoch, count: n, sending: pt.sendTo != ""})
	}
	inFlight := func(msgs []simMsg) {
		for i := range msgs {
			msg := &msgs[i]
			if msg.call != nil || msg.m.Kind != msgOffer || msg.m.Part != p {
				continue
			}
			if to := s.members[msg.to]; to != nil && to.alive && msg.m.Epoch > to.m.parts[p].epoch && !s.installed[offerID{p, msg.m.Epoch, msg.m.From}] {
				n, _ := binary.Varint(msg.m.State)
				consider(copyRef{mb: s.members[msg.m.From], epoch: msg.m.Epoch, count: n, sending: true})
			}
		}
	}
	inFlight(s.net)
	inFlight(s.due)
	return best, ok
}

// check verifies the invariants after a step.
func (s *sim) check() {
	for p := range simParts {
		var writers []string
		for _, id := range s.order {
			mb := s.members[id]
			if mb.alive && mb.m.Route(p).Mode == routeLocal {
				writers = append(writers, id)
			}
			if mb.alive && mb.m.stats.Conflicts > 0 {
				s.fail("%s counted %d conflicts", id, mb.m.stats.Conflicts)
			}
		}
		if len(writers) > 1 {
			s.fail("partition %d has %d writers: %v", p, len(writers), writers)
		}
		h, ok := s.newest(p)
		if !ok && s.holder[p] != nil {
			s.lost(p)
		}
		s.holder[p] = nil
		if ok {
			s.holder[p] = h.mb
			if h.count != s.truth[p] {
				s.fail("partition %d: newest copy %+v counts %d, %d were admitted", p, h, h.count, s.truth[p])
			}
		}
	}
}

// lost accounts for partition p having no live copy any more. That is
// legitimate only when the chain of acknowledged handovers from its last
// holder ends at a member that crashed (it installed, acknowledged, and
// died); a chain that ends at a live member means a giver dropped state the
// taker never had.
func (s *sim) lost(p int) {
	mb, epoch := s.holder[p], uint64(0)
	for mb != nil && mb.alive {
		pt := &mb.m.parts[p]
		to, e := pt.gaveTo, pt.gaveEpoch
		if pt.held && pt.sendTo != "" {
			to, e = pt.sendTo, pt.epoch // installed there, not acknowledged yet
		}
		next := s.members[to]
		if next == nil || e <= epoch {
			s.fail("partition %d: no live copy, and its last holder's handovers end at live %s, which does not hold it", p, mb.id)
		}
		mb, epoch = next, e
	}
	s.logf("p%d lost with %v (truth was %d)", p, mb.id, s.truth[p])
	s.truth[p] = 0
}

// crash kills mb: its state is gone. The admissions only it had are lost,
// which the checker accounts for; the rest of the cluster learns of the
// crash after failure detection.
func (s *sim) crash(mb *simMember) {
	mb.alive = false
	mb.waiting = nil
	s.logf("crash %s", mb.id)
	for p := range simParts {
		h, _ := s.newest(p)
		s.truth[p] = h.count // 0 when custody is lost: restored from nothing
		if h.mb == nil {
			s.holder[p] = nil
		}
	}
	// Detected later; views drop it then.
	mb.hidden = s.now + simDetect + int64(s.rng.IntN(10))
	s.detect = append(s.detect, mb.hidden)
	slices.Sort(s.detect)
}

func (s *sim) step() {
	s.now++
	// Network.
	var later []simMsg
	due := s.net[:0:0]
	for _, msg := range s.net {
		if msg.at <= s.now {
			due = append(due, msg)
		} else {
			later = append(later, msg)
		}
	}
	s.net = later
	s.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	s.due = due
	for len(s.due) > 0 {
		msg := s.due[0]
		s.due = s.due[1:]
		mb := s.members[msg.to]
		if mb == nil || !mb.alive {
			continue
		}
		if msg.call != nil {
			s.call(mb, msg.call)
			continue
		}
		s.logf("%s <- %v %s p%d e%d r%d held=%v claim=%v gave=%s/%d", mb.id, msg.m.Kind, msg.m.From, msg.m.Part, msg.m.Epoch, msg.m.Round, msg.m.Held, msg.m.Claiming, msg.m.GaveTo, msg.m.Gave)
		before := mb.m.parts[msg.m.Part].epoch
		mb.m.Step(msg.m)
		if msg.m.Kind == msgOffer && before < msg.m.Epoch && mb.m.parts[msg.m.Part].epoch >= msg.m.Epoch {
			s.installed[offerID{msg.m.Part, msg.m.Epoch, msg.m.From}] = true // installed, or passed straight on
		}
		s.apply(mb)
	}
	// Membership, failure detection, restores, time.
	if len(s.detect) > 0 && s.detect[0] <= s.now {
		s.detect = s.detect[1:]
		s.publish(false)
	}
	for _, id := range s.order {
		mb := s.members[id]
		if !mb.alive {
			continue
		}
		for len(mb.views) > 0 && mb.views[0].at <= s.now {
			s.logf("%s view %v", mb.id, mb.views[0].v)
			mb.m.SetView(mb.views[0].v)
			mb.views = mb.views[1:]
			s.apply(mb)
		}
		for _, p := range slices.Sorted(maps.Keys(mb.restore)) { // map order would break replay
			if at := mb.restore[p]; at <= s.now {
				delete(mb.restore, p)
				mb.table[p] = 0
				mb.m.Restored(p)
				s.apply(mb)
			}
		}
		mb.m.Tick()
		s.apply(mb)
		if mb.leaving && mb.m.Held() == 0 && len(mb.views) == 0 {
			s.logf("left %s", mb.id)
			mb.alive = false
			s.publish(false)
		}
	}
	s.check()
	if s.cut != nil && s.now >= s.cutEnd {
		s.cut = nil
		s.logf("network whole")
	}
}

func (s *sim) live() []*simMember {
	var l []*simMember
	for _, id := range s.order {
		if mb := s.members[id]; mb.alive {
			l = append(l, mb)
		}
	}
	return l
}

// chaos injects one random event.
func (s *sim) chaos() {
	live := s.live()
	var active []*simMember
	for _, mb := range live {
		if !mb.leaving {
			active = append(active, mb)
		}
	}
	switch x := s.rng.IntN(100); {
	case x < 4 && len(live) < 6:
		s.spawn()
		s.publish(false)
	case x < 6 && len(active) > 1:
		mb := active[s.rng.IntN(len(active))]
		mb.leaving = true
		s.logf("leaving %s", mb.id)
		s.publish(false)
	case x < 8 && len(active) > 1:
		s.crash(active[s.rng.IntN(len(active))])
	case x < 9:
		s.shuffle++
		s.logf("ring reshuffled")
		s.publish(false)
	case x < 11 && s.cut == nil && len(live) > 1:
		s.cut = map[string]int{}
		for _, mb := range live {
			s.cut[mb.id] = s.rng.IntN(2)
		}
		s.cutEnd = s.now + 5 + int64(s.rng.IntN(40))
		s.logf("network cut until %d: %v", s.cutEnd, s.cut)
	}
	for range s.rng.IntN(4) {
		if mb := live[s.rng.IntN(len(live))]; mb.alive {
			s.call(mb, &simCall{part: s.rng.IntN(simParts)})
		}
	}
}

// rested reports whether every partition is held, once, by its ring owner,
// and admitted there.
func (s *sim) rested() bool {
	if len(s.net) > 0 || len(s.detect) > 0 {
		return false
	}
	v := s.view()
	for _, mb := range s.live() {
		if len(mb.views) > 0 || len(mb.restore) > 0 {
			return false
		}
	}
	for p := range simParts {
		owner := s.members[v.Owners[p]]
		if owner == nil || owner.m.Route(p).Mode != routeLocal {
			return false
		}
		for _, mb := range s.live() {
			if mb != owner && mb.m.Holds(p) {
				return false
			}
		}
	}
	return true
}

// runSim runs one seed; a failure's text is in s.failure.
func runSim(seed uint64, tracing bool) (s *sim) {
	s = newSim(seed, tracing)
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(errSimFailed); !ok {
				panic(r)
			}
		}
	}()
	for s.now < simTicks {
		s.chaos()
		s.step()
	}
	s.cut = nil
	for _, mb := range s.live() {
		mb.leaving = false // a member still draining stays
	}
	s.publish(false)
	for start := s.now; !s.rested(); {
		if s.now-start > simQuiesce {
			var state []string
			for _, mb := range s.live() {
				for p := range simParts {
					pt := mb.m.parts[p]
					state = append(state, fmt.Sprintf("%s p%d held=%v send=%q restoring=%v route=%+v", mb.id, p, pt.held, pt.sendTo, pt.restoring, mb.m.Route(p)))
				}
			}
			s.fail("did not come to rest in %d ticks:\n%s", simQuiesce, strings.Join(state, "\n"))
		}
		for range s.rng.IntN(3) {
			live := s.live()
			s.call(live[s.rng.IntN(len(live))], &simCall{part: s.rng.IntN(simParts)})
		}
		s.step()
	}
	return s
}

// TestCustodySimSeed replays one seed with a trace:
// go test -run TestCustodySimSeed -sim.seed=N ./node/
func TestCustodySimSeed(t *testing.T) {
	if *simSeed < 0 {
		t.Skip("no -sim.seed given")
	}
	if s := runSim(uint64(*simSeed), true); s.failure != "" {
		t.Fatal(s.failure)
	}
}

func TestCustodySim(t *testing.T) {
	n := *simSeeds
	if testing.Short() || raceEnabled {
		n /= 10
	}
	admitted, fellBack := 0, 0
	for seed := range uint64(n) {
		s := runSim(seed, false)
		if s.failure != "" {
			// Replay the seed with a trace: runs are deterministic.
			t.Fatalf("seed %d (replay: go test -run TestCustodySimSeed -sim.seed=%d ./node/): %s", seed, seed, runSim(seed, true).failure)
		}
		admitted += s.admitted
		fellBack += s.fellBack
	}
	t.Logf("%d seeds: %d admissions checked, %d calls fell back", n, admitted, fellBack)
	if admitted == 0 {
		t.Fatal("the simulation admitted nothing: it checks nothing")
	}
}
