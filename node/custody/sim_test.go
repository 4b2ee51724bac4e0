package custody

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/ring"
)

// The custody simulation: members running the custody machine over an
// in-memory network that delays, drops, duplicates and reorders messages
// and cuts the cluster in two, while members join, leave gracefully, crash
// and restart, each learning of membership changes at its own moment, and
// clients send admissions through any live member.
//
// Around the machine it models the shell's rules for crashes and splits:
//
//   - Replication with lag: every few ticks each custodian copies the
//     partitions it changed to their backup (the next member in its ring),
//     over the same faulty network; the backup keeps the newest copy and
//     acknowledges it, and the custodian remembers what was acknowledged.
//     A member restoring a partition whose custodian died takes the newest
//     copy held by a member of its view (or starts from zero).
//   - Splits: besides short cuts (messages dropped, views unchanged), long
//     splits, after which each side's views show only that side until the
//     network heals and gossip merges the sides. Every process runs the
//     real quorum (quorum.go) over the views it receives and, like
//     Node.setMembers, installs only a view with a majority of the
//     membership counted; a view without one fences it, like Node.fence:
//     its machine is retired, each partition in its table or frozen for
//     a handover owes what the majority side may lack as a debt (beyond
//     the copy its backup acknowledged when that backup is counted and
//     not in the fencing view; all of it otherwise), the replicas it holds
//     for others stay, and it comes back as a new member (new boot id,
//     fresh machine) once a majority view shows that one. A mandate
//     (heartbeats: heard from a majority lately) stops a member that lost
//     the majority from deciding before the other side restores its
//     partitions. A crashed process restarts under its name with a new
//     boot id. Debts are charged, at least once, to the partition's
//     custodian after the merge.
//   - Graceful leaves: a leaving process drains, then publishes a view
//     showing it departed (gossip's Departed) to its side, and exits a
//     little later. A split may start while members are leaving.
//
// Each admission has a number, and every count carries, beside the number
// the shell would hold, the set of admissions it is made of (its ghost),
// so the checker knows what a count holds, not only how much. After every
// step it checks: at most one member decides for a partition (custodian,
// not fenced, mandated); no member installs a view without a majority of the
// seats (names alive or crashed, not departed; a leaving seat absent from
// the view aside, see checkMajority), no two members install views of the
// two sides of one split, and quorum.observe agrees with the rule its doc
// states; and conservation: the newest copy, the
// unpaid debts and what members about to be fenced will owe hold exactly
// the admissions made and not legitimately lost, and no count holds fewer
// than its ghost. A loss is legitimate when a crash destroyed the last
// copy of an admission: what a crashed custodian admitted since its last
// acknowledged replication, or more when its backup crashed or left too,
// or is across a split from the restorer; what a taker that crashed
// admitted before its giver reclaimed the partition (a reclaim reads no
// replica); and what a fence relied on a backup's copy for when that
// backup crashed (from inside a split, a crash and a cut look the same). Counts exceed their ghosts where a debt is charged twice or
// overlaps a replica newer than its acknowledgement: tallied. At the end
// every partition rests at its ring owner, every debt is paid, and its
// count holds exactly the admissions made and not lost.
//
// The shell's rules have known gaps, which the sim tallies or steers clear
// of unless sim.strict names them (see strict): it then fails on them.
//
// A failing seed replays exactly, with a trace:
// go test -run TestCustodySimSeed -sim.seed=N ./node/custody/

var (
	simSeeds  = flag.Int("sim.seeds", 10000, "seeds TestCustodySim runs (make sim runs more)")
	simSeed   = flag.Int("sim.seed", -1, "the one seed TestCustodySimSeed replays with a trace")
	simTrace  = flag.Int("sim.trace", 300, "lines of trace a failure prints")
	simStrict = flag.String("sim.strict", "", "known gaps of the shell's rules to check too, instead of tallying or avoiding them: all, or some of reclaim,restarts,stalls (see strict)")
)

// strict reports whether the run checks the known gap of the shell's rules
// named gap (sim.strict) instead of tallying it (reclaim) or
// steering clear of it (restarts):
//
//   - reclaim: a fence owes only what its copy holds beyond the replica
//     its backup acknowledged, when that backup is counted and missing
//     from the fencing view (on the majority side), relying on the
//     majority to restore from that replica. But the majority may instead
//     take the partition back by a reclaim (a giver's offer whose taker
//     died before acknowledging; the chain of handovers after it ended at
//     the fenced member), and a reclaim reads no replica: lost.
//   - stalls: a process that stalls past failure detection misses what
//     the membership did meanwhile; when it wakes and fences itself, it
//     relies on a backup's acknowledged copy when that backup is counted,
//     though the restore the others made meanwhile may not have read it
//     (the backup left gracefully, taking the copy with it, or the copy
//     sat at a stalled process) (custody_stall_test.go).
//   - restarts: a process's quorum starts empty and learns only the
//     members its views show (live ones): one that starts while a seat is
//     down never counts that seat, and one that starts during a split
//     takes its side for the whole.
func strict(gap string) bool {
	return *simStrict == "all" || slices.Contains(strings.Split(*simStrict, ","), gap)
}

const (
	simParts       = 8
	simMaxDelay    = 6  // ticks a message may take
	simViewLag     = 12 // ticks a member may learn of a membership change late
	simDetect      = 20 // ticks before a crashed member is declared dead (> simMaxDelay)
	simAwait       = 40 // ticks a call waits for custody before falling back
	simMaxHops     = 3
	simTicks       = 300                      // ticks with faults and membership changes
	simQuiesce     = 600                      // most ticks allowed to come to rest afterwards (a debt's answer may be lost a few times)
	simRestoreIn   = 3                        // most ticks a restore takes
	simMandate     = 10                       // ticks a member decides without hearing from a majority (< simDetect)
	simChargeRetry = 5                        // ticks between rounds of debt charges
	simChargeWait  = simAwait + 2*simMaxDelay // ticks a charge waits for its answer before it counts as failed
)

// simIDs is a set of one partition's admissions, by number: the ghost of a
// count. A set is never changed once built; every operation returns a new
// one.
type simIDs []uint64

func (b simIDs) word(i int) uint64 {
	if i < len(b) {
		return b[i]
	}
	return 0
}

func (b simIDs) with(i int) simIDs {
	c := make(simIDs, max(len(b), i/64+1))
	copy(c, b)
	c[i/64] |= 1 << (i % 64)
	return c
}

func (b simIDs) union(o simIDs) simIDs {
	if len(o) == 0 {
		return b
	}
	if len(b) == 0 {
		return o
	}
	c := make(simIDs, max(len(b), len(o)))
	copy(c, b)
	for i, w := range o {
		c[i] |= w
	}
	return c
}

func (b simIDs) minus(o simIDs) simIDs {
	c := make(simIDs, len(b))
	for i, w := range b {
		c[i] = w &^ o.word(i)
	}
	return c
}

func (b simIDs) and(o simIDs) simIDs {
	c := make(simIDs, min(len(b), len(o)))
	for i := range c {
		c[i] = b[i] & o[i]
	}
	return c
}

func (b simIDs) len() int64 {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}

func (b simIDs) empty() bool { return b.len() == 0 }

func (b simIDs) equal(o simIDs) bool {
	for i := range max(len(b), len(o)) {
		if b.word(i) != o.word(i) {
			return false
		}
	}
	return true
}

// String lists the admissions, runs shortened: {3-7 9}.
func (b simIDs) String() string {
	var parts []string
	for i := 0; i < 64*len(b); i++ {
		if b.word(i/64)&(1<<(i%64)) == 0 {
			continue
		}
		j := i
		for j+1 < 64*len(b) && b.word((j+1)/64)&(1<<((j+1)%64)) != 0 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", i, j))
		} else {
			parts = append(parts, fmt.Sprint(i))
		}
		i = j
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// simState is one partition's limiter state as the sim's shell holds it:
// the count, and its ghost.
type simState struct {
	n   int64
	ids simIDs
}

func (st simState) String() string { return fmt.Sprintf("%d%v", st.n, st.ids) }

// encode is the snapshot the machine carries in offers.
func (st simState) encode() []byte {
	b := binary.AppendVarint(nil, st.n)
	b = binary.AppendUvarint(b, uint64(len(st.ids)))
	for _, w := range st.ids {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

func decodeState(b []byte) (simState, bool) {
	n, k := binary.Varint(b)
	if k <= 0 {
		return simState{}, false
	}
	b = b[k:]
	words, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) != 8*words {
		return simState{}, false
	}
	b = b[k:]
	st := simState{n: n, ids: make(simIDs, words)}
	for i := range st.ids {
		st.ids[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return st, true
}

type simMsg struct {
	at   int64
	to   string // custody message, replica acknowledgement: member id; call, replica, charge answer: process name
	m    Msg
	call *simCall
	rep  *simReplica // a copy for the backup
	ack  *simReplica // the backup's acknowledgement of rep
	paid *simDebt    // a charge's answer, to the debtor
	by   *simMember  // paid: the custodian that counted it
}

type simCall struct {
	part   int
	hops   int
	handed bool
	until  int64    // awaiting custody until this tick
	charge *simDebt // a debt's charge rather than an admission
}

// simProc is one process: a seat in the membership (its name), with the
// quorum, views, replicas and debts that outlive a fence. Its custody
// member is its current incarnation.
type simProc struct {
	name     string
	q        *Quorum
	inc      *simMember // current incarnation; its machine starts with the first view it may install
	alive    bool
	crashed  bool // died without leaving: the seat restarts under a new boot id
	leaving  bool
	departed bool  // done leaving: its views show it so (gossip's Departed) until it exits
	exitAt   int64 // departed: the tick it leaves gossip and exits
	hidden   int64 // crashed: views show it as live until this tick (failure detection)
	views    []simView
	heard    map[string]int64 // name → tick of its last heartbeat
	mandated bool             // heard from a majority of the membership counted lately
	fencedID string           // the incarnation a fence retired, until the process starts over
	// A stall (custody_stall_test.go): the process runs nothing from
	// stallFrom until stallUntil.
	stallFrom, stallUntil int64
	replicas              [simParts]*simReplica
	debts                 []*simDebt
	counted               map[string]bool // the membership counted, by the rule (count), to check quorum.go
	lastSeen              map[string]time.Time
	marked                map[string]bool // name → whether the last view showing it marked it leaving
}

// simMember is one incarnation: a custody id and its machine.
type simMember struct {
	id      string
	proc    *simProc
	m       *Machine // nil until its first view
	alive   bool     // its machine runs: started, not fenced, its process alive
	fenced  bool     // retired by a fence
	table   map[int]simState
	waiting []*simCall
	restore map[int]int64 // partition → tick its restore completes
	backups []string      // partition → its backup in the ring of the current view
	offered [simParts]struct {
		to    string
		epoch uint64
	}
	// Replication.
	phase int64
	dirty [simParts]bool
	sent  [simParts]uint64    // seq of the last copy sent
	acked [simParts]*simState // what the backup last acknowledged, this tenure
	ackAt [simParts]uint64    // its seq, or where the tenure began
	ackBy [simParts]string    // the backup (process name)
	// acked is per tenure: it is forgotten when the partition leaves the
	// table, or is restored. The shell keeps an entry until a sweep, but
	// compares it bucket by bucket (limiter.Budget.Since), so one from an
	// earlier tenure cancels nothing admitted since; the sim, counting
	// without buckets, forgets it instead.
}

// current reports whether mb is its live process's current incarnation:
// running, or about to start with its first view (it may install what
// reaches it then).
func (mb *simMember) current() bool {
	return mb != nil && mb.proc.alive && mb.proc.inc == mb
}

// newTenure forgets what was acknowledged of p before: copies sent up to
// seq belong to an earlier tenure.
func (mb *simMember) newTenure(p int, seq uint64) {
	mb.acked[p], mb.ackAt[p], mb.sent[p] = nil, seq, seq
}

// simReplica is a copy of a partition held by a backup for its custodian.
type simReplica struct {
	part int
	st   simState
	seq  uint64 // global: a higher seq was sent later
	from string // the custodian's member id
	by   string // in an acknowledgement: the backup's process name
}

// simDebt is what a fenced member admitted beyond a partition's last
// acknowledged replica, owed to the partition's custodian after the merge.
type simDebt struct {
	seq     int
	part    int
	st      simState
	debtor  *simProc
	next    int64 // tick the next charge goes out
	applied int   // times a custodian counted it
	paid    bool  // the debtor had an answer
}

type simView struct {
	at      int64
	v       View
	members []Member // what the quorum observes
	backups []string
	seats   []string  // the seats (names) that existed when it was published
	leaving []string  // those of them marked leaving then
	split   *simSplit // the split whose side it shows, if any
	side    int
	self    string // the id it shows for the process it goes to
}

// simSplit is a long split: messages between its sides are dropped from
// its start to end; from viewsAt (failure detection) each side's views
// show only that side, until mergeAt (gossip reconnects).
type simSplit struct {
	side    map[string]int // process name → side
	viewsAt int64
	end     int64
	mergeAt int64
	views   bool
	holders [2]string // per side, the first process that installed a view of it
}

type sim struct {
	rng      *rand.Rand
	now      int64
	procs    []*simProc            // every process, in creation order
	seat     map[string]*simProc   // name → its latest process
	members  map[string]*simMember // every incarnation by id
	net      []simMsg
	due      []simMsg       // delivered this tick, not yet handled
	dueBuf   []simMsg       // due's storage, reused
	cut      map[string]int // process name → side while the network is cut; nil when whole
	cutEnd   int64
	split    *simSplit
	skew     time.Duration // forget horizons passed
	names    int
	shuffle  uint64 // ring seed: changing it moves partitions between old members
	drop     float64
	dup      float64
	repEvery int64 // ticks between replication rounds
	trace    []string
	tracing  bool // keep a trace: on when a failing seed is replayed
	failure  string
	detect   []int64              // ticks at which a crash is detected, in order
	holder   [simParts]*simMember // the newest copy's member at the last check
	// installed records each (partition, epoch) installed anywhere: a
	// giver's copy of an installed epoch is superseded by the taker's.
	installed map[offerID]bool

	// The ghost ledger: admissions are numbered per partition; lost holds
	// those legitimately lost. Every other admission must be counted.
	next [simParts]int
	lost [simParts]simIDs
	// orphaned: the partition's last copy died in a crash, and no member
	// holds one yet (a restore is coming).
	orphaned [simParts]bool
	// forkedOff holds the copies left behind when the side of a split with
	// the majority restored (or reclaimed) a partition while a member the
	// split will fence still held it, and the copies made from them: they
	// are never the newest again, and their members owe what they admitted
	// beyond their replicas.
	forkedOff map[copyAt]bool
	repSeq    uint64
	debtSeq   int

	retired []*simMember // incarnations fences retired: they never decide again
	// stalls lets chaos stall processes; stallRule applies the shell's
	// rule for a stall longer than failure detection (custody_stall_test.go).
	stalls, stallRule bool
	stallFence        bool // a fence of the stall rule is under way
	stats             simStats
	// relied holds admissions a fence dropped relying on a replica (or an
	// offer) to keep them, until a custodian's table holds them again.
	relied [simParts]simIDs
}

// simStats counts what a run did, for TestCustodySim's log.
type simStats struct {
	admitted, fellBack                 int
	fences, rejoins, restores, fromRep int
	debts, charged, chargedTwice       int
	overlap, twice                     int64 // over-counts: by a debt overlapping a replica, by a debt charged again
	recovered                          int64 // admissions accounted lost that a reclaim or an old replica brought back
	lostCrash, lostAcross              int64 // legitimate losses: to crashes; to a crash whose replica was across a split
	lostReclaim                        int64 // the gap strict names reclaim, when not strict
	lostStall                          int64 // the gap strict names stalls, when not strict
}

func (a *simStats) add(b simStats) {
	a.admitted += b.admitted
	a.fellBack += b.fellBack
	a.fences += b.fences
	a.rejoins += b.rejoins
	a.restores += b.restores
	a.fromRep += b.fromRep
	a.debts += b.debts
	a.charged += b.charged
	a.chargedTwice += b.chargedTwice
	a.overlap += b.overlap
	a.twice += b.twice
	a.recovered += b.recovered
	a.lostCrash += b.lostCrash
	a.lostAcross += b.lostAcross
	a.lostReclaim += b.lostReclaim
	a.lostStall += b.lostStall
}

func newSim(seed uint64, tracing bool) *sim {
	s := &sim{tracing: tracing, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		seat: map[string]*simProc{}, members: map[string]*simMember{}, installed: map[offerID]bool{}, forkedOff: map[copyAt]bool{}}
	s.drop = []float64{0, 0.05, 0.2}[s.rng.IntN(3)]
	s.dup = []float64{0, 0.1}[s.rng.IntN(2)]
	s.repEvery = []int64{4, 8, 16}[s.rng.IntN(3)]
	n := 1 + s.rng.IntN(4)
	for range n {
		s.spawn("")
	}
	s.publish(true)
	return s
}

func (s *sim) logf(format string, args ...any) {
	if !s.tracing {
		return
	}
	if len(s.trace) >= 2*max(2000, *simTrace) {
		s.trace = append(s.trace[:0], s.trace[len(s.trace)/2:]...) // keep the latest
	}
	s.trace = append(s.trace, fmt.Sprintf("%4d ", s.now)+fmt.Sprintf(format, args...))
}

// errSimFailed unwinds a failed run; runSim recovers it.
type errSimFailed struct{}

func (s *sim) fail(format string, args ...any) {
	s.failure = fmt.Sprintf("tick %d: %s", s.now, fmt.Sprintf(format, args...))
	if s.tracing {
		s.failure += fmt.Sprintf("\ntrace (last %d):\n", *simTrace) + strings.Join(s.trace[max(0, len(s.trace)-*simTrace):], "\n")
	}
	panic(errSimFailed{})
}

// clock is the quorum's time: a tick is a millisecond, plus the forget
// horizons passed (see forget).
func (s *sim) clock(tick int64) time.Time {
	return time.Unix(1_700_000_000, 0).Add(time.Duration(tick)*time.Millisecond + s.skew)
}

// forget lets the forget horizon pass (72 h) in one tick, once the
// network is whole and no seat is down: every process then forgets the
// names it still counts that are gone for good. A process that counts a
// member that departed on the other side of a split (it never saw the
// departure, so the member stays counted like a crashed one) is a
// minority until then: after the merge it stays fenced until the horizon.
func (s *sim) forget() bool {
	if down, _ := s.down(); len(down) > 0 || s.split != nil || s.cut != nil || len(s.detect) > 0 {
		return false
	}
	s.skew += ForgetAfter
	s.logf("the forget horizon passes")
	s.publish(false)
	return true
}

// spawn starts a process: a new seat when name is empty, else a restart
// of that seat. Its machine starts with its first view.
func (s *sim) spawn(name string) *simProc {
	if name == "" {
		s.names++
		name = fmt.Sprintf("n%d", s.names)
	}
	pr := &simProc{name: name, q: NewQuorum(ForgetAfter), alive: true, heard: map[string]int64{}, mandated: true}
	s.procs = append(s.procs, pr)
	s.seat[name] = pr
	pr.inc = s.incarnate(pr)
	s.logf("spawn %s", pr.inc.id)
	return pr
}

// incarnate gives pr a new boot id: a new custody member, not started.
func (s *sim) incarnate(pr *simProc) *simMember {
	var id string
	for id == "" || s.members[id] != nil {
		id = fmt.Sprintf("%s/%d", pr.name, s.rng.Uint32()%1000)
	}
	mb := &simMember{id: id, proc: pr, table: map[int]simState{}, restore: map[int]int64{},
		phase: int64(s.rng.IntN(int(s.repEvery)))}
	s.members[id] = mb
	return mb
}

// running lists the incarnations whose machines run, in creation order of
// their processes.
func (s *sim) running() []*simMember {
	var l []*simMember
	for _, pr := range s.procs {
		if pr.alive && pr.inc.alive {
			l = append(l, pr.inc)
		}
	}
	return l
}

func (s *sim) liveProcs() []*simProc {
	var l []*simProc
	for _, pr := range s.procs {
		if pr.alive {
			l = append(l, pr)
		}
	}
	return l
}

// seats lists the names of the seats: processes alive, or crashed and
// waiting to restart. A seat that left gracefully is gone, and so is one
// that announced it is done (departed): it holds nothing, never will, and
// is about to exit.
func (s *sim) seats() []string {
	var names []string
	for _, pr := range s.procs {
		if s.seat[pr.name] == pr && (pr.alive && !pr.departed || pr.crashed) {
			names = append(names, pr.name)
		}
	}
	return names
}

// sideOf is the side of a split whose views name's views show.
func (s *sim) sideOf(name string) int {
	if s.split == nil || !s.split.views {
		return 0
	}
	return s.split.side[name]
}

// view computes the membership as side sees it now: rendezvous hashing
// over the live members that are not leaving.
func (s *sim) view(side int) simView {
	v := View{Owners: make([]string, simParts), Alive: map[string]bool{}}
	sv := simView{backups: make([]string, simParts), seats: s.seats()}
	var eligible []string
	for _, pr := range s.procs {
		if !pr.alive && s.now >= pr.hidden || s.stalledAway(pr) {
			continue
		}
		if s.sideOf(pr.name) != side {
			continue
		}
		id := pr.inc.id
		v.Alive[id] = true
		_, boot, _ := strings.Cut(id, "/")
		sv.members = append(sv.members, Member{Member: ring.Member{Name: pr.name}, Boot: boot, Leaving: pr.leaving, Departed: pr.departed})
		if !pr.leaving {
			eligible = append(eligible, id)
		}
	}
	for p := range simParts {
		var best, second uint64
		for _, id := range eligible {
			h := fnv.New64a()
			fmt.Fprintf(h, "%d/%s/%d", p, id, s.shuffle)
			switch w := h.Sum64(); {
			case v.Owners[p] == "" || w > best:
				sv.backups[p], second = v.Owners[p], best
				v.Owners[p], best = id, w
			case sv.backups[p] == "" || w > second:
				sv.backups[p], second = id, w
			}
		}
	}
	sv.v = v
	for _, name := range sv.seats {
		if s.seat[name].leaving {
			sv.leaving = append(sv.leaving, name)
		}
	}
	if s.split != nil && s.split.views {
		sv.split, sv.side = s.split, side
	}
	return sv
}

// publish schedules the current membership at every live process, as its
// side sees it, each after its own lag (at once when now is true).
func (s *sim) publish(now bool) {
	views := map[int]simView{}
	for _, pr := range s.procs {
		if !pr.alive || pr.stalled(s.now) {
			continue // a stalled process's gossip sees nothing change
		}
		side := s.sideOf(pr.name)
		v, ok := views[side]
		if !ok {
			v = s.view(side)
			views[side] = v
		}
		at := s.now
		if !now {
			at += int64(s.rng.IntN(simViewLag + 1))
		}
		if n := len(pr.views); n > 0 && pr.views[n-1].at > at {
			at = pr.views[n-1].at // views arrive in order
		}
		v.at, v.self = at, pr.inc.id
		pr.views = append(pr.views, v)
	}
}

// installView handles a view arriving at pr, as Node.setMembers does: the
// quorum decides whether it may be installed; one without a majority
// fences the process; a fenced process starts over as its new
// incarnation once a majority view shows that one.
func (s *sim) installView(pr *simProc, v simView) {
	s.logf("%s view %v counted %v", pr.inc.id, v.v, slices.Sorted(maps.Keys(pr.q.base)))
	majority := pr.q.Observe(v.members, s.clock(s.now))
	if counted := pr.count(v.members, s.clock(s.now)); counted != majority {
		s.fail("%s: quorum says majority=%v for a view of %v, the rule says %v (counted %v)", pr.name, majority, v.members, counted, slices.Sorted(maps.Keys(pr.counted)))
	}
	if !majority {
		if pr.fencedID == "" {
			s.fence(pr, v)
		}
		return
	}
	s.checkMajority(pr, v)
	if pr.fencedID != "" {
		if v.self != pr.inc.id {
			return // the majority still knows an incarnation given up: wait for the new one
		}
		pr.fencedID = ""
		s.stats.rejoins++
	}
	mb := pr.inc
	if mb.m == nil {
		if v.self != mb.id {
			s.fail("%s starts from a view showing it as %s", mb.id, v.self)
		}
		mb.m = New(mb.id, simParts, Config{Retry: 4, Round: 30})
		mb.alive = true
		s.logf("%s starts", mb.id)
	}
	mb.backups = v.backups
	mb.m.SetView(v.v)
	s.apply(mb)
}

// checkMajority checks a view pr installs: it holds a majority of the
// seats, and during a split, no process installs a view of the other side.
// A seat marked leaving and absent from the view does not count: a view
// that held a majority counting it drops it (quorum.go), and a crash may
// leave the next view a majority of the rest only. That is safe because
// the other side, where it may still be, needs a majority counting it.
func (s *sim) checkMajority(pr *simProc, v simView) {
	present, seats := 0, 0
	for _, name := range v.seats {
		in := slices.ContainsFunc(v.members, func(m Member) bool { return m.Name == name })
		if in {
			present++
		}
		if in || !slices.Contains(v.leaving, name) {
			seats++
		}
	}
	if 2*present <= seats {
		s.fail("%s installs a view of %d of the %d seats %v (leaving: %v): no majority of them (it counts %v)", pr.name, present, len(v.seats), v.seats, v.leaving, slices.Sorted(maps.Keys(pr.counted)))
	}
	if sp := v.split; sp != nil {
		if sp.holders[v.side] == "" {
			sp.holders[v.side] = pr.name
		}
		if o := sp.holders[1-v.side]; o != "" {
			s.fail("%s installs a view of side %d of a split whose side %d %s installed a view of: both sides count a majority (%s counts %v)", pr.name, v.side, 1-v.side, o, pr.name, slices.Sorted(maps.Keys(pr.counted)))
		}
	}
}

// count applies the quorum rule to a view at now, as quorum.go's doc
// states it: the membership counted is the names of the views that held a majority of
// it, except those marked departed; a view holds a majority when it shows
// more than half of them. A name stops being counted when a view shows it
// departed, or when a view holding a majority of the membership counted
// with it lacks it and the last view that showed it marked it leaving, or
// when no view has shown it for longer than the forget horizon.
func (pr *simProc) count(members []Member, now time.Time) bool {
	if pr.counted == nil {
		pr.counted, pr.marked, pr.lastSeen = map[string]bool{}, map[string]bool{}, map[string]time.Time{}
	}
	present := map[string]bool{}
	for _, m := range members {
		present[m.Name] = true
		pr.lastSeen[m.Name] = now
		pr.marked[m.Name] = m.Leaving
		if m.Departed {
			delete(pr.counted, m.Name)
		}
	}
	seen := 0
	for name := range pr.counted {
		switch {
		case present[name]:
			seen++
		case now.Sub(pr.lastSeen[name]) > ForgetAfter:
			delete(pr.counted, name)
		}
	}
	if len(pr.counted) > 0 && 2*seen <= len(pr.counted) {
		return false
	}
	for name, leaving := range pr.marked {
		if leaving && !present[name] {
			delete(pr.counted, name)
		}
	}
	for _, m := range members {
		if !m.Departed {
			pr.counted[m.Name] = true
		}
	}
	return true
}

// fence retires pr's machine after a view v without a majority, as
// Node.fence does: each partition in its table, and each snapshot frozen
// for a handover, owes what the majority side may lack (owed); the
// replicas it holds for others stay. The process comes back as a new
// incarnation.
func (s *sim) fence(pr *simProc, v simView) {
	mb := pr.inc
	if !mb.alive {
		s.fail("%s fenced with no machine running", mb.id)
	}
	here := map[string]bool{}
	for _, m := range v.members {
		here[m.Name] = true
	}
	var relied [simParts]simIDs
	owe := func(p int, st simState, what string) {
		d, base := s.owed(mb, p, st, func(name string) bool { return here[name] })
		if d.n < d.ids.len() {
			s.fail("%s fenced owes %d for partition %d, but holds %d admissions beyond the copy it relies on %v: %v", mb.id, d.n, p, d.ids.len(), base, st)
		}
		relied[p] = relied[p].union(st.ids.and(base.ids))
		s.relied[p] = s.relied[p].union(relied[p])
		s.logf("%s fenced: %s p%d %v, relying on %v acknowledged by %q: owes %v", mb.id, what, p, st, base, mb.ackBy[p], d)
		if d.n > 0 {
			s.recover(p, d) // a frozen copy's taker may have crashed with it
			s.debtSeq++
			pr.debts = append(pr.debts, &simDebt{seq: s.debtSeq, part: p, st: d, debtor: pr, next: s.now})
			s.stats.debts++
		}
	}
	for _, p := range slices.Sorted(maps.Keys(mb.table)) {
		owe(p, mb.table[p], "table")
	}
	for p := range simParts {
		if f := mb.m.parts[p].frozen; f != nil && mb.m.parts[p].held {
			st, _ := decodeState(f)
			owe(p, st, "frozen (offered to "+mb.m.parts[p].sendTo+")")
		}
	}
	for _, c := range mb.waiting {
		s.fallBack(c)
	}
	mb.waiting, mb.table, mb.restore = nil, map[int]simState{}, map[int]int64{}
	mb.alive, mb.fenced = false, true
	for p := range simParts {
		s.reliedLost(mb, p, relied[p])
	}
	pr.fencedID = mb.id
	s.retired = append(s.retired, mb)
	pr.inc = s.incarnate(pr)
	s.stats.fences++
	s.logf("%s fenced; comes back as %s", mb.id, pr.inc.id)
	s.publish(false) // gossip spreads the new boot id
}

// reliedLost accounts for what mb's fence relied on a backup's copy of p
// for (relied) that no live process holds: legitimately lost when that backup
// crashed (from inside a split, a crash and a cut look the same: two
// faults, one copy). A backup alive that lacks it is a failure.
func (s *sim) reliedLost(mb *simMember, p int, relied simIDs) {
	if s.stallFence && !strict("stalls") {
		// The known gap "stalls": what the others restored while this
		// process was stalled may lack what it relies on (the backup
		// left meanwhile, taking the copy with it, or the replica sat at
		// a stalled process no restore read).
		kept := s.containers(p, everywhere, nil)
		if h, ok := s.newest(p); ok {
			kept = s.counted(p, h.st, h.mb)
		}
		if lost := relied.minus(kept).minus(s.lost[p]); !lost.empty() {
			s.lost[p] = s.lost[p].union(lost)
			s.stats.lostStall += lost.len()
			s.logf("p%d: %v lost: the stall fence of %s relied on a copy the restore did not read", p, lost, mb.id)
		}
		return
	}
	lost := relied.minus(s.containers(p, everywhere, nil)).minus(s.lost[p])
	if lost.empty() {
		return
	}
	by, crashed := mb.ackBy[p], false
	for _, o := range s.procs {
		crashed = crashed || (o.name == by && o.crashed)
	}
	if !crashed {
		s.fail("the fence of %s relied on %q's copy of p%d for %v, which no live process holds", mb.id, by, p, lost)
	}
	s.lost[p] = s.lost[p].union(lost)
	s.stats.lostCrash += lost.len()
	s.logf("p%d: %v lost: the fence of %s relied on the copy of %s, which crashed", p, lost, mb.id, by)
}

// owed is what mb, fenced, owes for its copy st of p, as Node.owed
// computes it, and the copy it relies on the majority side for: the one
// its backup acknowledged when that backup's process is counted and not
// here (on this side of the split); else none, and it owes all of st.
func (s *sim) owed(mb *simMember, p int, st simState, here func(name string) bool) (d, base simState) {
	by := mb.ackBy[p]
	if _, counted := mb.proc.q.base[by]; mb.acked[p] != nil && counted && !here(by) {
		base = *mb.acked[p]
	}
	return simState{n: max(0, st.n-base.n), ids: st.ids.minus(base.ids)}, base
}

// sameSide reports whether the processes called a and b are on the same
// side of the long split (while there is one).
func (s *sim) sameSide(a string) func(b string) bool {
	return func(b string) bool { return s.split == nil || s.split.side[a] == s.split.side[b] }
}

func (s *sim) send(msg Msg) {
	s.deliver(simMsg{to: msg.To, m: msg}, msg.From)
}

// procOf names the process a message goes to or comes from.
func (s *sim) procOf(to string) string {
	if mb := s.members[to]; mb != nil {
		return mb.proc.name
	}
	return to
}

func (s *sim) deliver(msg simMsg, from string) {
	if s.rng.Float64() < s.drop {
		return
	}
	if s.cut != nil && s.cut[s.procOf(from)] != s.cut[s.procOf(msg.to)] {
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
			if msg.Kind == MsgOffer {
				mb.offered[msg.Part].to, mb.offered[msg.Part].epoch = msg.To, msg.Epoch
			}
			s.send(msg)
		}
		for _, p := range rd.Freeze {
			st, ok := mb.table[p]
			if !ok {
				s.fail("%s freezes partition %d it does not have in its table", mb.id, p)
			}
			delete(mb.table, p)
			mb.newTenure(p, s.repSeq)
			s.logf("%s freezes p%d %v for %s", mb.id, p, st, mb.m.parts[p].sendTo)
			mb.m.Frozen(p, st.encode())
		}
		for _, in := range rd.Install {
			st, ok := decodeState(in.State)
			if !ok {
				s.fail("%s installs a bad snapshot of partition %d: %x", mb.id, in.Part, in.State)
			}
			if _, ok := mb.table[in.Part]; ok {
				s.fail("%s installs partition %d over a copy in its table", mb.id, in.Part)
			}
			if in.Reclaim {
				for _, o := range s.running() {
					if o != mb && o.m.Holds(in.Part) && !s.superseded(o, in.Part) {
						if !s.stranded(o, mb) {
							s.fail("%s takes back partition %d while %s, alive, holds it", mb.id, in.Part, o.id)
						}
						s.forkedOff[copyAt{in.Part, o.id}] = true
					}
				}
				s.reclaimed(mb, in.Part, st)
			}
			mb.table[in.Part] = st
			mb.dirty[in.Part] = true
			mb.newTenure(in.Part, s.repSeq)
			s.logf("%s installs p%d %v epoch %d reclaim=%v", mb.id, in.Part, st, mb.m.parts[in.Part].epoch, in.Reclaim)
		}
		for _, p := range rd.Restore {
			for _, o := range s.running() {
				if o != mb && o.m.Holds(p) {
					if !s.stranded(o, mb) {
						s.fail("%s restores partition %d while %s, alive, holds it", mb.id, p, o.id)
					}
					s.forkedOff[copyAt{p, o.id}] = true
				}
			}
			s.logf("%s restores p%d", mb.id, p)
			mb.restore[p] = s.now + int64(s.rng.IntN(simRestoreIn+1))
		}
	}
	s.retry(mb)
}

// stranded reports whether o's copy may coexist with one mb makes: o is
// cut off, on the side of a split without a majority, where it will be
// fenced. (mb may be too: a side that had the majority and lost it to
// crashes keeps restoring until its views show it; neither decides, for
// want of a mandate.)
func (s *sim) stranded(o, mb *simMember) bool {
	return s.doomed(o.proc) && s.cut != nil && s.cut[o.proc.name] != s.cut[mb.proc.name] || s.stalledAway(o.proc)
}

// doomed reports whether pr is cut off, by a long split, from a majority of
// the membership it counts: its machine (if it runs) will be fenced once
// its views show its side.
func (s *sim) doomed(pr *simProc) bool {
	if s.split == nil || len(pr.q.base) == 0 {
		return false
	}
	side, seen := s.split.side[pr.name], 0
	for name := range pr.q.base {
		if o := s.seat[name]; o != nil && o.alive && s.split.side[name] == side {
			seen++
		}
	}
	return 2*seen <= len(pr.q.base)
}

// reclaimed accounts for mb taking back its own offer of p, with state st,
// after its taker died without acknowledging: what the taker (and whoever
// it handed the partition on to) admitted is lost when that chain of
// custody ended in a crash, replicated or not: a reclaim reads no replica.
// A chain that ended in a fence owes it instead: the checker finds it in
// the debts.
func (s *sim) reclaimed(mb *simMember, p int, st simState) {
	s.recover(p, st)
	o := mb.offered[p]
	if o.epoch+1 != mb.m.parts[p].epoch {
		return // no offer went out: nobody else had it
	}
	end := s.members[o.to]
	if end != nil && (end.m == nil || end.m.parts[p].epoch < o.epoch) {
		return // never installed: nobody else had it
	}
	for epoch := o.epoch; end != nil; {
		pt := &end.m.parts[p]
		to, e := pt.gaveTo, pt.gaveEpoch
		if pt.held && pt.sendTo != "" {
			to, e = pt.sendTo, pt.epoch
		}
		next := s.members[to]
		if next == nil || e <= epoch || next.m == nil || next.m.parts[p].epoch < e {
			break // its offer was never installed: the chain ends here
		}
		end, epoch = next, e
	}
	if end != nil && end.fenced && !end.proc.crashed {
		// The chain ended in a fence, which owes beyond the replica it
		// relied on; a reclaim reads no replica (see strict, reclaim).
		if lost := s.live(p).minus(s.counted(p, st, mb)).and(s.relied[p]); !lost.empty() {
			if strict("reclaim") {
				s.fail("p%d reclaimed by %s lacks %v, which the fence of %s relied on its backup's copy for", p, mb.id, lost, end.id)
			}
			s.lost[p] = s.lost[p].union(lost)
			s.stats.lostReclaim += lost.len()
			s.logf("p%d reclaimed by %s: %v dropped by the fence of %s, relying on a replica the reclaim does not read", p, mb.id, lost, end.id)
		}
		return
	}
	if end != nil && end.alive && s.stalledAway(end.proc) && end.acked[p] != nil {
		// The chain ends at a process stalled past failure detection:
		// when it wakes, its fence will owe only beyond the copy its
		// backup acknowledged, which a reclaim does not read either (the
		// same gap, reclaim).
		if lost := end.acked[p].ids.minus(st.ids).minus(s.lost[p]); !lost.empty() {
			if strict("reclaim") {
				s.fail("p%d reclaimed by %s lacks %v, which the stalled %s will rely on its backup's copy for", p, mb.id, lost, end.id)
			}
			s.lost[p] = s.lost[p].union(lost)
			s.stats.lostReclaim += lost.len()
			s.logf("p%d reclaimed by %s: %v, which stalled %s will rely on a replica for, dropped: the reclaim does not read it", p, mb.id, lost, end.id)
		}
		return
	}
	if end == nil || !end.proc.crashed || end.proc.alive {
		return
	}
	// The chain ended in a crash: of the taker, or of the process whose
	// fence turned the partition into debts, which died with them.
	if lost := s.live(p).minus(s.counted(p, st, mb)); !lost.empty() {
		s.lost[p] = s.lost[p].union(lost)
		s.stats.lostCrash += lost.len()
		s.logf("p%d reclaimed by %s: %v died with %s", p, mb.id, lost, end.id)
	}
}

// recover counts again the admissions in st that were accounted lost: a
// copy that no live member could use when they were (a replica of an
// older lineage, a giver's snapshot its taker had installed) came back.
func (s *sim) recover(p int, st simState) {
	if back := st.ids.and(s.lost[p]); !back.empty() {
		s.lost[p] = s.lost[p].minus(back)
		s.stats.recovered += back.len()
		s.logf("p%d: %v come back", p, back)
	}
}

// call handles a client call, or a forwarded one, at mb.
func (s *sim) call(mb *simMember, c *simCall) {
	if !mb.alive {
		// Not started: before its first view a process waits for one
		// with forwarded calls (awaitFirstRing); fenced, it fails them.
		if mb.m == nil && mb.proc.fencedID == "" && c.hops > 0 {
			if c.until == 0 {
				c.until = s.now + simAwait
			}
			mb.waiting = append(mb.waiting, c)
			return
		}
		s.fallBack(c)
		return
	}
	r := mb.m.Route(c.part)
	switch {
	case r.Mode == RouteLocal && !mb.proc.mandated:
		s.fallBack(c) // ErrMinority
	case r.Mode == RouteLocal:
		if c.charge != nil && !c.charge.debtor.alive {
			return // the debtor died: its connection, and the charge, with it
		}
		if c.charge != nil {
			s.charge(mb, c.charge)
		} else {
			s.admit(mb, c.part)
		}
	case r.Mode == RouteAwait || (c.handed && c.hops > 0):
		if c.until == 0 {
			c.until = s.now + simAwait
		}
		mb.waiting = append(mb.waiting, c)
	case c.hops >= simMaxHops:
		s.fallBack(c)
	default:
		fwd := *c
		fwd.hops++
		fwd.handed = r.Handed
		fwd.until = 0
		s.deliver(simMsg{to: s.procOf(r.To), call: &fwd}, mb.id)
	}
}

// fallBack ends a call that found nobody to decide: a client call falls
// back; a charge stays owed and goes out again with the next round.
func (s *sim) fallBack(c *simCall) {
	if c.charge == nil {
		s.stats.fellBack++
		return
	}
	c.charge.next = min(c.charge.next, s.now+simChargeRetry)
}

// retry re-routes the calls waiting at mb after its custody changed.
func (s *sim) retry(mb *simMember) {
	waiting := mb.waiting
	mb.waiting = nil
	for _, c := range waiting {
		if c.until <= s.now {
			s.fallBack(c)
			continue
		}
		if !mb.alive {
			mb.waiting = append(mb.waiting, c)
			continue
		}
		if r := mb.m.Route(c.part); r.Mode == RouteAwait || (r.Mode == RouteForward && c.handed && r.To == "") {
			mb.waiting = append(mb.waiting, c)
			continue
		}
		c.handed = false
		s.call(mb, c)
	}
}

// decider checks that mb may decide for p now: it holds the partition in
// its table and the newest copy, and is not handing it on.
func (s *sim) decider(mb *simMember, p int, what string) simState {
	st, ok := mb.table[p]
	if !ok {
		s.fail("%s %s for partition %d, which is not in its table", mb.id, what, p)
	}
	if h, ok := s.newest(p); !ok || h.mb != mb || h.sending {
		s.fail("%s %s for partition %d but the newest copy is %+v", mb.id, what, p, h)
	}
	return st
}

// admit counts one admission at mb, which must be the only member admitting
// and hold the newest copy of the partition.
func (s *sim) admit(mb *simMember, p int) {
	st := s.decider(mb, p, "admits")
	st.n++
	st.ids = st.ids.with(s.next[p])
	s.next[p]++
	mb.table[p] = st
	mb.dirty[p] = true
	s.stats.admitted++
}

// charge counts a debt at mb, the partition's custodian, and answers the
// debtor. The answer may be lost: then the debtor charges again, and the
// count exceeds its ghost by the debt (tallied as charged twice).
func (s *sim) charge(mb *simMember, d *simDebt) {
	st := s.decider(mb, d.part, "charges a debt")
	added := d.st.ids.minus(st.ids).len()
	st.n += d.st.n
	st.ids = st.ids.union(d.st.ids)
	mb.table[d.part] = st
	mb.dirty[d.part] = true
	d.applied++
	if d.applied > 1 {
		s.stats.chargedTwice++
		s.stats.twice += d.st.n - added
	} else {
		s.stats.charged++
		s.stats.overlap += d.st.n - added
	}
	s.logf("%s charged debt %d of %s: p%d %v, now %v", mb.id, d.seq, d.debtor.name, d.part, d.st, st)
	s.deliver(simMsg{to: d.debtor.name, paid: d, by: mb}, mb.id)
}

// copyOf returns mb's state of p and whether it has a copy.
func (s *sim) copyOf(mb *simMember, p int) (simState, bool) {
	if st, ok := mb.table[p]; ok {
		return st, true
	}
	if f := mb.m.parts[p].frozen; f != nil {
		st, _ := decodeState(f)
		return st, true
	}
	return simState{}, false
}

// copyRef is one copy of a partition's state: at a live custodian, or in
// an offer on its way to a live member (sent, perhaps, by one that crashed
// since: the taker installs it).
type copyRef struct {
	mb      *simMember // the custodian, or the offer's sender
	epoch   uint64
	st      simState
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

// copyAt names a member's copy of a partition.
type copyAt struct {
	part int
	id   string
}

// newest is partition p's newest copy: highest epoch; on a tie (an offer
// installed, not yet acknowledged) the taker's. Copies forked off by a
// split do not count (see forkedOff).
func (s *sim) newest(p int) (best copyRef, ok bool) {
	consider := func(c copyRef) {
		if !ok || c.epoch > best.epoch || (c.epoch == best.epoch && !c.sending && best.sending) {
			best, ok = c, true
		}
	}
	for _, mb := range s.running() {
		pt := &mb.m.parts[p]
		if !pt.held || pt.restoring {
			continue
		}
		if s.superseded(mb, p) || s.forkedOff[copyAt{p, mb.id}] {
			continue
		}
		st, _ := s.copyOf(mb, p)
		consider(copyRef{mb: mb, epoch: pt.epoch, st: st, sending: pt.sendTo != ""})
	}
	inFlight := func(msgs []simMsg) {
		for i := range msgs {
			msg := &msgs[i]
			if msg.m.Kind != MsgOffer || msg.m.Part != p || msg.call != nil || s.forkedOff[copyAt{p, msg.m.From}] {
				continue
			}
			if to := s.members[msg.to]; to.current() && (to.m == nil || msg.m.Epoch > to.m.parts[p].epoch) && !s.installed[offerID{p, msg.m.Epoch, msg.m.From}] {
				st, _ := decodeState(msg.m.State)
				consider(copyRef{mb: s.members[msg.m.From], epoch: msg.m.Epoch, st: st, sending: true})
			}
		}
	}
	inFlight(s.net)
	inFlight(s.due)
	return best, ok
}

// live is the set of p's admissions not legitimately lost: what must be
// counted.
func (s *sim) live(p int) simIDs {
	var all simIDs
	if n := s.next[p]; n > 0 {
		all = make(simIDs, (n+63)/64)
		for i := range n / 64 {
			all[i] = ^uint64(0)
		}
		if n%64 != 0 {
			all[n/64] = 1<<(n%64) - 1
		}
	}
	return all.minus(s.lost[p])
}

// relying is what fences dropped, or will drop, of p relying on a replica
// or an offer to keep it: relied, and, of the copies members a split will
// fence hold beside head's member, what their replicas were acknowledged
// for and their frozen snapshots.
func (s *sim) relying(p int, head *simMember) simIDs {
	ids := s.relied[p]
	for _, o := range s.running() {
		if o == head || !s.forkedOff[copyAt{p, o.id}] {
			continue
		}
		for _, st := range s.fencedCopies(o, p) {
			_, base := s.owed(o, p, st, s.sameSide(o.proc.name))
			ids = ids.union(st.ids.and(base.ids))
		}
	}
	return ids
}

// fencedCopies is what a fence of o would owe for p from: its table's copy
// and its frozen snapshot.
func (s *sim) fencedCopies(o *simMember, p int) []simState {
	var sts []simState
	if st, ok := o.table[p]; ok {
		sts = append(sts, st)
	}
	if f := o.m.parts[p].frozen; f != nil && o.m.parts[p].held {
		st, _ := decodeState(f)
		sts = append(sts, st)
	}
	return sts
}

// counted is what p's count will hold once the sides merge and every debt
// is paid, with head the newest copy (at mb): head, the debts not paid yet,
// and what the members a split will fence owe beyond their acknowledged
// replicas.
func (s *sim) counted(p int, head simState, mb *simMember) simIDs {
	ids := head.ids
	for _, pr := range s.procs {
		if !pr.alive {
			continue
		}
		for _, d := range pr.debts {
			if d.part == p && !d.paid {
				ids = ids.union(d.st.ids)
			}
		}
		if o := pr.inc; o.alive && o != mb && s.forkedOff[copyAt{p, o.id}] {
			for _, st := range s.fencedCopies(o, p) {
				// What a crash took meanwhile comes back at the fence
				// (a frozen copy's taker crashed with it): not before.
				d, _ := s.owed(o, p, st, s.sameSide(o.proc.name))
				ids = ids.union(d.ids.minus(s.lost[p]))
			}
		}
	}
	return ids
}

// containers is every admission of p some live process still has: copies,
// offers, replicas and their copies on the way, debts. what, if not nil,
// collects where each set came from, for a failure's message. Only
// processes for which reach is true count.
func (s *sim) containers(p int, reach func(*simProc) bool, what *[]string) simIDs {
	var ids simIDs
	add := func(x simIDs, format string, args ...any) {
		ids = ids.union(x)
		if what != nil && !x.empty() {
			*what = append(*what, fmt.Sprintf(format, args...)+" "+x.String())
		}
	}
	for _, pr := range s.procs {
		if !pr.alive || !reach(pr) {
			continue
		}
		if mb := pr.inc; mb.alive && !s.superseded(mb, p) {
			if st, ok := s.copyOf(mb, p); ok && mb.m.parts[p].held {
				add(st.ids, "copy at %s", mb.id)
			}
		}
		if r := pr.replicas[p]; r != nil {
			add(r.st.ids, "replica (seq %d from %s) at %s", r.seq, r.from, pr.name)
		}
		for _, d := range pr.debts {
			if d.part == p && !d.paid {
				add(d.st.ids, "debt %d of %s", d.seq, pr.name)
			}
		}
	}
	for _, msgs := range [][]simMsg{s.net, s.due} {
		for i := range msgs {
			msg := &msgs[i]
			if msg.m.Kind == MsgOffer && msg.m.Part == p && msg.call == nil {
				// As newest: an offer its taker will not install is no copy.
				if to := s.members[msg.to]; to.current() && reach(to.proc) && (to.m == nil || msg.m.Epoch > to.m.parts[p].epoch) && !s.installed[offerID{p, msg.m.Epoch, msg.m.From}] {
					st, _ := decodeState(msg.m.State)
					add(st.ids, "offer in flight %s→%s", msg.m.From, msg.to)
				}
			}
			if msg.rep != nil && msg.rep.part == p {
				if to := s.seat[msg.to]; to != nil && to.alive && reach(to) {
					add(msg.rep.st.ids, "replica in flight %s→%s", msg.rep.from, msg.to)
				}
			}
		}
	}
	return ids
}

func everywhere(*simProc) bool { return true }

// settle marks as legitimately lost the admissions no live process has
// any more, after a crash.
func (s *sim) settle(why string) {
	for p := range simParts {
		s.settlePart(p, why)
	}
}

// gone is what of p no live process has any more. With a newest copy, only
// what it counts (with the debts) is kept: replicas are read by restores
// only. Without one, any copy may serve. What a fence relied on a replica
// for is left out: see relied.
func (s *sim) gone(p int) simIDs {
	held := s.containers(p, everywhere, nil)
	if h, ok := s.newest(p); ok {
		// What a fence relied on the majority side's replica for is
		// gone only with the last copy (a crash of that backup, say).
		return s.live(p).minus(s.counted(p, h.st, h.mb)).minus(s.relying(p, h.mb).and(held))
	}
	return s.live(p).minus(held)
}

// settlePart settles one partition. What a fence relied on a replica for
// is accounted apart (see relied).
func (s *sim) settlePart(p int, why string) {
	if gone := s.gone(p); !gone.empty() {
		s.lost[p] = s.lost[p].union(gone)
		s.stats.lostCrash += gone.len()
		s.logf("p%d: %v lost with %s", p, gone, why)
	}
}

// conserve checks that partition p's newest copy h, the debts and what
// stranded members will owe hold exactly the admissions not legitimately
// lost, and that no count holds less than its ghost.
func (s *sim) conserve(p int, h copyRef) {
	if h.st.n < h.st.ids.len() {
		s.fail("partition %d: newest copy %+v counts %d, less than the %d admissions it holds", p, h, h.st.n, h.st.ids.len())
	}
	got, want := s.counted(p, h.st, h.mb), s.live(p)
	if !h.sending {
		s.relied[p] = s.relied[p].minus(h.st.ids) // safe again, in a custodian's table
	}
	if got.equal(want) {
		return
	}
	var where []string
	s.containers(p, everywhere, &where)
	s.fail("partition %d: newest copy %s (%v), unpaid debts and stranded copies count %v; admitted and not lost %v: missing %v, extra %v; held by live processes:\n\t%s",
		p, h.mb.id, h.st, got, want, want.minus(got), got.minus(want), strings.Join(where, "\n\t"))
}

// check verifies the invariants after a step.
func (s *sim) check() {
	run := s.running()
	for _, mb := range run {
		if mb.m.stats.Conflicts > 0 {
			s.fail("%s counted %d conflicts", mb.id, mb.m.stats.Conflicts)
		}
	}
	for _, mb := range s.retired {
		if mb.alive || len(mb.table) > 0 || len(mb.waiting) > 0 {
			s.fail("%s, fenced, still runs (%v), holds %v in its table or has calls waiting", mb.id, mb.alive, mb.table)
		}
	}
	for p := range simParts {
		var writers []string
		for _, mb := range run {
			if mb.proc.mandated && !mb.proc.stalled(s.now) && mb.m.Route(p).Mode == RouteLocal {
				writers = append(writers, mb.id)
			}
		}
		if len(writers) > 1 {
			s.fail("partition %d has %d writers: %v", p, len(writers), writers)
		}
		h, ok := s.newest(p)
		if hd := s.holder[p]; !ok && hd != nil && !s.forkedOff[copyAt{p, hd.id}] {
			s.lostCopy(p)
		}
		if !ok && s.orphaned[p] {
			// Custody died in a crash, and the partition waits for its
			// restore: what vanishes meanwhile (a dead giver's offer
			// refused, say) went with the crash.
			s.settlePart(p, "custody's crash")
		}
		s.holder[p] = nil
		if ok {
			s.holder[p] = h.mb
			s.orphaned[p] = false
			s.conserve(p, h)
		}
	}
}

// lostCopy accounts for partition p having no live copy any more. That is
// legitimate only when the chain of acknowledged handovers from its last
// holder ends at a member that crashed (it installed, acknowledged, and
// died) or was fenced (its table became debts); a chain that ends at a
// live member means a giver dropped state the taker never had.
func (s *sim) lostCopy(p int) {
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
	if mb != nil && mb.fenced {
		s.logf("p%d: no copy after %s was fenced", p, mb.id)
		return
	}
	s.orphaned[p] = true
	s.settle("p" + fmt.Sprint(p) + "'s custody at " + fmt.Sprint(mb.id))
}

// crash kills pr: its state, replicas and debts are gone. The admissions
// only it had are lost, which the checker accounts for; the rest of the
// cluster learns of the crash after failure detection.
func (s *sim) crash(pr *simProc) {
	mb := pr.inc
	for p := range simParts {
		if h, ok := s.newest(p); ok && h.mb == mb {
			s.orphaned[p] = true
		}
	}
	pr.alive, pr.crashed = false, true
	mb.alive = false
	mb.waiting = nil
	s.logf("crash %s", mb.id)
	s.settle("crash of " + mb.id)
	for p := range simParts {
		if h, ok := s.newest(p); !ok || h.mb == nil {
			s.holder[p] = nil // custody died with it: no copy to account for
		}
	}
	// Detected later; views drop it then.
	pr.hidden = s.now + simDetect + int64(s.rng.IntN(10))
	s.detect = append(s.detect, pr.hidden)
	slices.Sort(s.detect)
}

// restored completes mb's restore of p from the newest replica any member
// of its view holds (none: from zero).
func (s *sim) restored(mb *simMember, p int) {
	inView := map[string]bool{mb.proc.name: true}
	for id := range mb.m.view.Alive {
		if o := s.members[id]; o != nil {
			inView[o.proc.name] = true
		}
	}
	var rep *simReplica
	for _, pr := range s.procs {
		if r := pr.replicas[p]; pr.alive && inView[pr.name] && r != nil && (rep == nil || r.seq > rep.seq) {
			rep = r
		}
	}
	var st simState
	if rep != nil {
		st = rep.st
		s.stats.fromRep++
	}
	s.stats.restores++
	s.recover(p, st)
	if missing := s.live(p).minus(s.counted(p, st, mb)); !missing.empty() {
		// A crash (of the custodian, or of a fenced member with its
		// debts) on one side of a split, the replica on the other: two
		// faults, one replica.
		across := missing.and(s.containers(p, func(pr *simProc) bool { return !inView[pr.name] }, nil))
		if !across.empty() {
			s.lost[p] = s.lost[p].union(across)
			s.stats.lostAcross += across.len()
			s.logf("p%d: %v lost with a crash, its replica across the split", p, across)
		}
	}
	mb.table[p] = st
	mb.dirty[p] = true
	mb.newTenure(p, s.repSeq)
	s.logf("%s restored p%d from %+v: %v", mb.id, p, rep, st)
}

// replicate copies mb's changed partitions to their backups, as a
// replication round does; one whose last copy was not acknowledged goes
// again.
func (s *sim) replicate(mb *simMember) {
	for p := range simParts {
		st, ok := mb.table[p]
		if !ok || mb.m.Route(p).Mode != RouteLocal || (!mb.dirty[p] && mb.sent[p] == mb.ackAt[p]) {
			continue
		}
		mb.dirty[p] = false
		b := s.members[mb.backups[p]]
		if b == nil || b.proc.name == mb.proc.name {
			continue
		}
		s.repSeq++
		mb.sent[p] = s.repSeq
		s.deliver(simMsg{to: b.proc.name, rep: &simReplica{part: p, st: st, seq: s.repSeq, from: mb.id}}, mb.id)
	}
}

// chargeDebts sends pr's unpaid debts to their partitions' custodians, once
// its machine runs again (after the merge). A charge goes out again once
// the last one failed, or went unanswered for simChargeWait (its answer
// lost: the debt is paid twice).
func (s *sim) chargeDebts(pr *simProc) {
	if !pr.inc.alive {
		return
	}
	for _, d := range pr.debts {
		if !d.paid && d.next <= s.now {
			d.next = s.now + simChargeWait
			s.call(pr.inc, &simCall{part: d.part, charge: d})
		}
	}
}

// handle handles one message delivered now.
func (s *sim) handle(msg simMsg) {
	if pr := s.seat[s.procOf(msg.to)]; pr != nil && pr.stalled(s.now) {
		msg.at = pr.stallUntil // its socket buffers hold what arrives
		s.net = append(s.net, msg)
		return
	}
	switch {
	case msg.call != nil:
		if pr := s.seat[msg.to]; pr != nil && pr.alive {
			s.call(pr.inc, msg.call)
		}
	case msg.rep != nil:
		pr := s.seat[msg.to]
		if pr == nil || !pr.alive {
			return
		}
		r := msg.rep
		if cur := pr.replicas[r.part]; cur == nil || cur.seq < r.seq {
			pr.replicas[r.part] = r
		}
		ack := *r
		ack.by = pr.name
		s.deliver(simMsg{to: r.from, ack: &ack}, pr.name)
	case msg.ack != nil:
		mb := s.members[msg.to]
		if r := msg.ack; mb != nil && mb.alive && r.seq > mb.ackAt[r.part] {
			mb.ackAt[r.part], mb.acked[r.part], mb.ackBy[r.part] = r.seq, &r.st, r.by
		}
	case msg.paid != nil:
		d := msg.paid
		s.logf("%s <- paid debt %d of %s by %s", msg.to, d.seq, d.debtor.name, msg.by.id)
		if pr := s.seat[msg.to]; pr == d.debtor && pr.alive && !d.paid {
			d.paid = true
			pr.debts = slices.DeleteFunc(pr.debts, func(x *simDebt) bool { return x == d })
			switch {
			case msg.by.proc.crashed:
				s.settle("the crash of " + msg.by.id + ", which counted debt " + fmt.Sprint(d.seq)) // and never replicated it
			case msg.by.fenced:
				// Its fence owed the debt again, or relied on a backup's
				// copy for it: gone only if that backup crashed.
				s.settle("the fence of " + msg.by.id + ", which counted debt " + fmt.Sprint(d.seq))
			}
		}
	default:
		mb := s.members[msg.to]
		if mb == nil || !mb.alive {
			return
		}
		s.logf("%s <- %v %s p%d e%d r%d held=%v claim=%v gave=%s/%d", mb.id, msg.m.Kind, msg.m.From, msg.m.Part, msg.m.Epoch, msg.m.Round, msg.m.Held, msg.m.Claiming, msg.m.GaveTo, msg.m.Gave)
		before := mb.m.parts[msg.m.Part].epoch
		mb.m.Step(msg.m)
		if msg.m.Kind == MsgOffer && before < msg.m.Epoch && mb.m.parts[msg.m.Part].epoch >= msg.m.Epoch {
			s.installed[offerID{msg.m.Part, msg.m.Epoch, msg.m.From}] = true // installed, or passed straight on
			if s.forkedOff[copyAt{msg.m.Part, msg.m.From}] {
				s.forkedOff[copyAt{msg.m.Part, mb.id}] = true
			}
		}
		s.apply(mb)
	}
}

// heartbeats: every live process hears from those it can reach, and its
// mandate holds while that is a majority of the membership it counts.
func (s *sim) heartbeats() {
	live := s.liveProcs()
	for _, a := range live {
		if a.stalled(s.now) {
			continue // hears nothing, decides nothing, its mandate frozen
		}
		for _, b := range live {
			if a != b && !b.stalled(s.now) && (s.cut == nil || s.cut[a.name] == s.cut[b.name]) {
				a.heard[b.name] = s.now
			}
		}
		a.mandated = a.q.Mandated(a.name, s.clock(s.now), simMandate*time.Millisecond, func(name string) (time.Time, bool) {
			at, ok := a.heard[name]
			return s.clock(at), ok
		})
	}
}

func (s *sim) step() {
	s.now++
	s.wake()
	s.heartbeats()
	// Network: what is due now leaves s.net (in place), in random order.
	due, n := s.dueBuf[:0], 0
	for _, msg := range s.net {
		if msg.at <= s.now {
			due = append(due, msg)
		} else {
			s.net[n] = msg
			n++
		}
	}
	clear(s.net[n:])
	s.net = s.net[:n]
	s.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	s.due = due
	for len(s.due) > 0 {
		msg := s.due[0]
		s.due = s.due[1:]
		s.handle(msg)
	}
	clear(due)
	s.dueBuf = due[:0]
	// Membership, failure detection, splits, restores, time.
	if len(s.detect) > 0 && s.detect[0] <= s.now {
		s.detect = s.detect[1:]
		s.publish(false)
	}
	if sp := s.split; sp != nil {
		switch s.now {
		case sp.viewsAt:
			sp.views = true
			s.logf("split detected: each side's views show that side")
			s.publish(false)
		case sp.mergeAt:
			s.split = nil
			for _, mb := range s.running() {
				for p := range simParts {
					if s.forkedOff[copyAt{p, mb.id}] && mb.m.Holds(p) {
						s.fail("the split merges with %s, unfenced, still holding partition %d forked off", mb.id, p)
					}
				}
			}
			clear(s.forkedOff)
			s.logf("split merged: whole views")
			s.publish(false)
		}
	}
	for _, pr := range s.procs {
		if !pr.alive || pr.stalled(s.now) {
			continue
		}
		for len(pr.views) > 0 && pr.views[0].at <= s.now {
			v := pr.views[0]
			pr.views = pr.views[1:]
			s.installView(pr, v)
		}
		mb := pr.inc
		if pr.departed && s.now >= pr.exitAt && (!mb.alive || mb.m.Held() == 0) && len(pr.debts) == 0 {
			// Gossip's Leave. (What a lagging owner handed it after it
			// drained, it hands on first.)
			s.logf("left %s", mb.id)
			pr.alive, mb.alive = false, false
			s.settle("the departure of " + mb.id) // the replicas it held for others go with it
			s.publish(false)
			continue
		}
		if !mb.alive {
			s.retry(mb)  // calls waiting for its first view time out
			s.depart(pr) // fenced, it holds nothing: its drain is done at once
			continue
		}
		for _, p := range slices.Sorted(maps.Keys(mb.restore)) { // map order would break replay
			if at := mb.restore[p]; at <= s.now {
				delete(mb.restore, p)
				s.restored(mb, p)
				mb.m.Restored(p)
				s.apply(mb)
			}
		}
		mb.m.Tick()
		s.apply(mb)
		if (s.now+mb.phase)%s.repEvery == 0 {
			s.replicate(mb)
		}
		s.chargeDebts(pr)
		s.depart(pr)
	}
	s.check()
	if s.cut != nil && s.now >= s.cutEnd {
		s.cut = nil
		s.logf("network whole")
	}
}

// depart: a leaving process that has drained (handed everything on, paid
// its debts) tells its side it is done (gossip's Departed), and leaves a
// moment later, as tokenringd does (SetDeparted, then Leave); the views of
// a split may come first.
func (s *sim) depart(pr *simProc) {
	mb := pr.inc
	if !pr.leaving || pr.departed || len(pr.views) > 0 || len(pr.debts) > 0 || mb.alive && mb.m.Held() > 0 {
		return
	}
	pr.departed, pr.exitAt = true, s.now+1+int64(s.rng.IntN(simDetect))
	s.logf("departed %s (leaves at %d)", mb.id, pr.exitAt)
	s.publish(false)
}

// down lists the seats that crashed and have not restarted, or stalled
// past failure detection, and the crashed ones the cluster has declared
// dead (which may restart).
func (s *sim) down() (down, detected []*simProc) {
	for _, name := range s.seats() {
		switch pr := s.seat[name]; {
		case !pr.alive:
			down = append(down, pr)
			if s.now >= pr.hidden {
				detected = append(detected, pr)
			}
		case s.stalledAway(pr):
			down = append(down, pr)
		}
	}
	return down, detected
}

// chaos injects one random event.
func (s *sim) chaos() {
	live := s.liveProcs()
	var active []*simProc
	for _, pr := range live {
		if !pr.leaving && !pr.stalled(s.now) {
			active = append(active, pr)
		}
	}
	down, detected := s.down()
	// Unless strict says otherwise, steer clear of a known gap (see
	// strict): processes start only while the network is whole, a new
	// seat only while none is down, and the seats that crashed restart
	// together once all are declared dead.
	whole := s.split == nil || strict("restarts")
	splittable := s.split == nil && s.cut == nil && len(live) > 1
	if s.stalling() {
		// While a process is stalled, only calls and short cuts: a stalled
		// process misses membership changes as a starting one does (the
		// restarts gap), and the rule under test is the stall's own.
		if x := s.rng.IntN(100); x < 10 && s.cut == nil && len(live) > 1 {
			s.cut = map[string]int{}
			for _, pr := range live {
				s.cut[pr.name] = s.rng.IntN(2)
			}
			s.cutEnd = s.now + 5 + int64(s.rng.IntN(40))
			s.logf("network cut until %d: %v", s.cutEnd, s.cut)
		}
		s.calls(live)
		return
	}
	switch x := s.rng.IntN(100); {
	case x < 4 && whole && len(s.seats()) < 6 && (len(down) == 0 || strict("restarts")):
		s.spawn("")
		s.publish(false)
	case x < 6 && s.split == nil && len(active) > 1:
		pr := active[s.rng.IntN(len(active))]
		pr.leaving = true
		s.logf("leaving %s", pr.inc.id)
		s.publish(false)
	case x < 8 && len(active) > 1 && !s.stalls: // see TestCustodySimStalls
		s.crash(active[s.rng.IntN(len(active))])
	case x < 9:
		s.shuffle++
		s.logf("ring reshuffled")
		s.publish(false)
	case x < 11 && s.cut == nil && len(live) > 1:
		s.cut = map[string]int{}
		for _, pr := range live {
			s.cut[pr.name] = s.rng.IntN(2)
		}
		s.cutEnd = s.now + 5 + int64(s.rng.IntN(40))
		s.logf("network cut until %d: %v", s.cutEnd, s.cut)
	case x < 12 && splittable:
		sp := &simSplit{side: map[string]int{}}
		for _, pr := range s.procs {
			if pr.alive || s.now < pr.hidden {
				sp.side[pr.name] = s.rng.IntN(2)
			}
		}
		// Long enough for every member's views to show its side before
		// the network heals.
		sp.viewsAt = s.now + simDetect + int64(s.rng.IntN(10))
		sp.end = sp.viewsAt + simViewLag + 1 + int64(s.rng.IntN(60))
		sp.mergeAt = sp.end + 1 + int64(s.rng.IntN(10))
		s.split, s.cut, s.cutEnd = sp, sp.side, sp.end
		s.logf("network split until %d (views at %d, merged at %d): %v", sp.end, sp.viewsAt, sp.mergeAt, sp.side)
	case x < 22 && whole && len(detected) > 0 && (len(detected) == len(down) || strict("restarts")):
		if strict("restarts") {
			detected = detected[s.rng.IntN(len(detected)):][:1]
		}
		for _, pr := range detected {
			s.logf("restart %s", s.spawn(pr.name).inc.id)
		}
		s.publish(false)
	case x < 25 && s.stalls && len(active) > 1 && splittable && len(down) == 0 && len(active) == len(live):
		s.stall(active[s.rng.IntN(len(active))])
	}
	s.calls(live)
}

// calls sends a few client calls through live processes that are not
// stalled.
func (s *sim) calls(live []*simProc) {
	for range s.rng.IntN(4) {
		if pr := live[s.rng.IntN(len(live))]; pr.alive && !pr.stalled(s.now) {
			s.call(pr.inc, &simCall{part: s.rng.IntN(simParts)})
		}
	}
}

// rested reports whether every partition is held, once, by its ring owner,
// and admitted there, and every debt is paid.
func (s *sim) rested() bool {
	if len(s.detect) > 0 || s.split != nil {
		return false
	}
	for _, msg := range s.net {
		if msg.rep == nil && msg.ack == nil {
			return false
		}
	}
	v := s.view(0)
	for _, pr := range s.liveProcs() {
		if len(pr.views) > 0 || len(pr.debts) > 0 || !pr.inc.alive || len(pr.inc.restore) > 0 || !pr.mandated {
			return false
		}
	}
	for p := range simParts {
		owner := s.members[v.v.Owners[p]]
		if owner == nil || !owner.alive || owner.m.Route(p).Mode != RouteLocal {
			return false
		}
		for _, mb := range s.running() {
			if mb != owner && mb.m.Holds(p) {
				return false
			}
		}
	}
	return true
}

// final checks the rest: each partition's count at its owner holds exactly
// the admissions not legitimately lost, and no fewer than its ghost says.
func (s *sim) final() {
	v := s.view(0)
	for p := range simParts {
		st := s.members[v.v.Owners[p]].table[p]
		if want := s.live(p); !st.ids.equal(want) {
			s.fail("at rest, partition %d counts %v, not the admissions made and not lost %v: missing %v, extra %v", p, st, want, want.minus(st.ids), st.ids.minus(want))
		}
		if st.n < st.ids.len() {
			s.fail("at rest, partition %d counts %d for %d admissions", p, st.n, st.ids.len())
		}
	}
}

// runSim runs one seed; a failure's text is in s.failure.
func runSim(seed uint64, tracing bool) (s *sim) {
	return runSimWith(seed, tracing, func(*sim) {})
}

// runSimWith is runSim with set applied to the new sim first.
func runSimWith(seed uint64, tracing bool, set func(*sim)) (s *sim) {
	s = newSim(seed, tracing)
	set(s)
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
	if s.split == nil {
		s.cut = nil // a split runs its course: healing one early could leave a member unfenced
	}
	// A member still draining finishes and leaves: a leaving member never
	// stays (a majority may have stopped counting it already).
	s.publish(false)
	forgot := false
	for start := s.now; !s.rested(); {
		if !forgot && s.now-start >= simQuiesce/3 {
			forgot = s.forget()
		}
		if s.now-start >= simQuiesce/2 {
			s.drop = 0 // the network is eventually reliable: a debt's answer gets through
		}
		if s.now-start > simQuiesce {
			var state []string
			for _, pr := range s.liveProcs() {
				mb := pr.inc
				state = append(state, fmt.Sprintf("%s running=%v debts=%d views=%d mandated=%v", mb.id, mb.alive, len(pr.debts), len(pr.views), pr.mandated))
				if !mb.alive {
					continue
				}
				for p := range simParts {
					pt := mb.m.parts[p]
					state = append(state, fmt.Sprintf("%s p%d held=%v send=%q restoring=%v route=%+v", mb.id, p, pt.held, pt.sendTo, pt.restoring, mb.m.Route(p)))
				}
			}
			s.fail("did not come to rest in %d ticks:\n%s", simQuiesce, strings.Join(state, "\n"))
		}
		// Crashed seats restart, together, once all are declared dead
		// and the network is whole.
		if down, detected := s.down(); len(down) > 0 && len(detected) == len(down) && s.split == nil {
			for _, pr := range detected {
				s.logf("restart %s", s.spawn(pr.name).inc.id)
			}
			s.publish(false)
		}
		for range s.rng.IntN(3) {
			live := s.liveProcs()
			if pr := live[s.rng.IntN(len(live))]; !pr.stalled(s.now) {
				s.call(pr.inc, &simCall{part: s.rng.IntN(simParts)})
			}
		}
		s.step()
	}
	s.final()
	return s
}

// TestCustodySimSeed replays one seed with a trace:
// go test -run TestCustodySimSeed -sim.seed=N ./node/custody/
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
	var sum simStats
	for seed := range uint64(n) {
		s := runSim(seed, false)
		if s.failure != "" {
			// Replay the seed with a trace: runs are deterministic.
			t.Fatalf("seed %d (replay: go test -run TestCustodySimSeed -sim.seed=%d ./node/): %s", seed, seed, runSim(seed, true).failure)
		}
		sum.add(s.stats)
	}
	t.Logf("%d seeds: %d admissions checked, %d calls fell back", n, sum.admitted, sum.fellBack)
	t.Logf("%d fences, %d rejoins; %d restores, %d from a replica; %d debts, charged %d times, and %d times again",
		sum.fences, sum.rejoins, sum.restores, sum.fromRep, sum.debts, sum.charged, sum.chargedTwice)
	t.Logf("over-counted: %d by debts overlapping replicas, %d by debts charged again; %d admissions accounted lost came back", sum.overlap, sum.twice, sum.recovered)
	t.Logf("lost: %d admissions to crashes, %d to crashes whose replica was across a split", sum.lostCrash, sum.lostAcross)
	if !strict("reclaim") {
		t.Logf("known gap (sim.strict): %d admissions dropped by fences relying on a replica that a reclaim did not read (reclaim)", sum.lostReclaim)
	}
	if sum.admitted == 0 || sum.fences == 0 || sum.fromRep == 0 || sum.charged == 0 {
		t.Fatal("the simulation admitted, fenced, restored from a replica or charged nothing: it checks nothing")
	}
}
