package custody

import "slices"

// Machine is one member's custody of every partition: the protocol
// (doc.go) as a state machine with no I/O.
//
// The machine is driven like etcd raft's: SetView (a membership change),
// Step (a message from a peer), Tick (time) and Frozen/Restored (the shell
// finished an action) go in; Ready returns what to do: partitions to
// freeze, snapshots to install, partitions to restore, routes that changed,
// and messages to send, which the shell sends last (an acknowledgement
// leaves only once its snapshot is installed). The shell applies a Ready
// before it feeds the machine anything else, and publishes Route for the
// hot path. Not safe for concurrent use.
//
// A member that fences itself (it lost the majority, or stalled past
// failure detection) retires its machine for good (Fence): every route is
// then RouteFenced, and nothing fed to the machine changes anything; the
// member comes back as a new one, with a new machine.
type Machine struct {
	self   string // this member's id (name/boot id)
	cfg    Config
	view   View
	ver    uint64 // counts views installed
	now    int64  // ticks
	parts  []part
	fenced bool // retired for good (Fence)

	gone   map[string]bool  // members that were in a view and are no longer
	heard  map[string]int64 // member → tick a message from it (or news of it) last arrived; kept, so news cannot revive it
	rounds uint64           // pull rounds started
	asked  struct {         // members() of the current tick, view and news
		key [3]int64
		ids []string
	}
	rd      Ready
	touched []bool // partitions whose Route may have changed since the last Ready

	stats Stats
}

// Config holds the machine's timings, in ticks.
type Config struct {
	Retry int64 // resend an unacknowledged offer, or a pull to a silent member, after this many ticks
	Round int64 // a pull round that did not complete starts over after this many ticks
}

// Stats counts protocol events, for metrics and tests.
type Stats struct {
	Given, Received int64 // handovers acknowledged / installed
	Orphans         int64 // partitions restored because their custodian died
	// Conflicts counts offers that reached a member already holding the
	// partition, and restores while a live member held it: the "started
	// from zero while the previous holder was alive" failure. Always 0
	// when the protocol works.
	Conflicts int64
}

// View is the membership as this member sees it.
type View struct {
	// Owners[p] is the id of partition p's owner in the ring (members that
	// are leaving excluded); "" when the ring is empty.
	Owners []string
	// Alive holds every live member's id, leaving members included: they
	// still hold state and answer.
	Alive map[string]bool
}

// part is one partition's custody state at this member.
type part struct {
	epoch     uint64 // newest epoch this member took part in
	held      bool   // custodian: the state is here (in the table, or frozen)
	restoring bool   // held, being restored by the shell after its custodian died
	freezing  bool   // held, the shell is freezing it for sendTo
	frozen    []byte // held and out of the table: the snapshot offered to sendTo
	sendTo    string // held: the member custody is being handed to
	sentAt    int64  // tick the offer was last sent

	from    string // the member custody came from, and the view it came under
	fromVer uint64

	gaveTo    string // the last handover from here that was acknowledged
	gaveEpoch uint64

	// Waiting for custody: the current pull round.
	round   uint64
	roundAt int64
	asked   map[string]int64 // member → tick it was last asked, this round
	replies map[string]Msg
}

// MsgKind is the kind of a custody message.
type MsgKind uint8

const (
	MsgOffer MsgKind = iota + 1 // take custody of Part at Epoch: State is its snapshot
	MsgAck                      // the offer of Epoch is installed (or was already)
	MsgPull                     // I own Part by my ring: hand it over, or tell me what you know
	MsgInfo                     // the answer to a pull that hands nothing over
)

// Msg is one protocol message between members.
type Msg struct {
	Kind     MsgKind
	From, To string // member ids
	Part     int
	Epoch    uint64 // offer, ack: the handover's epoch; info: the sender's newest
	State    []byte // offer: the partition's snapshot
	Round    uint64 // pull, info: the asker's round
	Held     bool   // info: the sender holds the partition
	Claiming bool   // info: the sender's ring names it owner and it waits too
	GaveTo   string // info: the sender's last acknowledged handover
	Gave     uint64 // info: its epoch
}

// Ready is what the shell must do, in the order of its fields.
type Ready struct {
	Freeze  []int     // stop admitting, snapshot and remove the keys, then call Frozen
	Install []Install // put the snapshot's keys in the table; the partition is then admitted here
	Restore []int     // the custodian died: restore the partition, then call Restored
	Routes  []int     // partitions whose Route changed
	Msgs    []Msg     // last: an ack only once its partition is installed
}

// Install is a snapshot to put in the table.
type Install struct {
	Part  int
	State []byte
	// Reclaim: the state is this member's own offer, taken back because
	// its taker died without acknowledging and nobody has seen it since.
	Reclaim bool
}

// RouteMode says where a call for a partition goes.
type RouteMode uint8

const (
	RouteLocal   RouteMode = iota // this member is the custodian: decide here
	RouteAwait                    // custody is on its way here: wait for it (bounded), then decide
	RouteForward                  // forward to To; Handed says custody is going or went there
	RouteFenced                   // the machine is retired (Fence): calls fail, nothing is decided here or forwarded
)

// Route is the hot path's view of one partition.
type Route struct {
	Mode   RouteMode
	To     string // RouteForward: the member id
	Handed bool   // To is (or is becoming) the custodian: it should wait, not forward on
}

// New returns the machine of member self (its MemberID) over partitions
// partitions, holding none; zero timings take 10 and 100 ticks.
func New(self string, partitions int, cfg Config) *Machine {
	if cfg.Retry <= 0 {
		cfg.Retry = 10
	}
	if cfg.Round <= 0 {
		cfg.Round = 10 * cfg.Retry
	}
	return &Machine{
		self:    self,
		cfg:     cfg,
		parts:   make([]part, partitions),
		touched: make([]bool, partitions),
		gone:    make(map[string]bool),
		heard:   make(map[string]int64),
		view:    View{Owners: make([]string, partitions), Alive: map[string]bool{self: true}},
	}
}

func (m *Machine) owner(p int) string { return m.view.Owners[p] }

func (m *Machine) alive(id string) bool { return id != "" && m.view.Alive[id] }

func (m *Machine) send(msg Msg) {
	msg.From = m.self
	m.rd.Msgs = append(m.rd.Msgs, msg)
}

func (m *Machine) touch(p int) { m.touched[p] = true }

// SetView installs a new membership. Owners must have one entry per
// partition; Alive must contain this member.
func (m *Machine) SetView(v View) {
	if m.fenced {
		return
	}
	for id := range m.view.Alive {
		if !v.Alive[id] {
			m.gone[id] = true
		}
	}
	m.view = v
	m.ver++
	for p := range m.parts {
		pt := &m.parts[p]
		pt.round = 0 // replies from before the change do not count
		m.eval(p)
	}
}

// Tick advances time by one tick: resends offers and pulls, restarts rounds.
func (m *Machine) Tick() {
	if m.fenced {
		return
	}
	m.now++
	for p := range m.parts {
		m.eval(p)
	}
}

// Step handles one message from a peer. Messages for another member (an
// earlier life of this one) are dropped.
func (m *Machine) Step(msg Msg) {
	if m.fenced || msg.To != m.self || msg.Part < 0 || msg.Part >= len(m.parts) {
		return
	}
	if !m.gone[msg.From] {
		m.heard[msg.From] = m.now
	}
	p := msg.Part
	pt := &m.parts[p]
	switch msg.Kind {
	case MsgOffer:
		m.offered(p, msg)
	case MsgAck:
		if pt.held && pt.sendTo == msg.From && pt.epoch == msg.Epoch && !pt.freezing {
			m.acked(p, msg.From, msg.Epoch)
		}
	case MsgPull:
		if pt.held && !pt.restoring && pt.sendTo == "" && m.owner(p) == msg.From && m.alive(msg.From) {
			m.handTo(p, msg.From) // our ring agrees: no need to wait for a tick
			return
		}
		m.send(Msg{Kind: MsgInfo, To: msg.From, Part: p, Round: msg.Round, Epoch: pt.epoch,
			Held: pt.held, Claiming: !pt.held && m.owner(p) == m.self, GaveTo: pt.gaveTo, Gave: pt.gaveEpoch})
		return
	case MsgInfo:
		if pt.round != 0 && msg.Round == pt.round && m.known(msg.From) {
			pt.replies[msg.From] = msg
			if _, ok := m.heard[msg.GaveTo]; !ok && msg.GaveTo != "" && !m.gone[msg.GaveTo] && !m.alive(msg.GaveTo) {
				// Custody went to a member our view does not show yet:
				// the round must hear from it too. Heard of only once,
				// so a stale record cannot keep it known for ever.
				m.heard[msg.GaveTo] = m.now
			}
		}
	}
	m.eval(p)
}

// offered handles an offer of custody.
func (m *Machine) offered(p int, msg Msg) {
	pt := &m.parts[p]
	ack := Msg{Kind: MsgAck, To: msg.From, Part: p, Epoch: msg.Epoch}
	if msg.Epoch <= pt.epoch {
		m.send(ack) // a duplicate, or a stale retry: already handled
		return
	}
	if m.gone[msg.From] {
		// From a member we saw leave the membership: another may have
		// restored the partition since. (A member not seen yet is fine:
		// a joiner hears of offers before it hears of the cluster.)
		return
	}
	if pt.held && pt.sendTo != "" && !pt.freezing {
		// Custody is coming back past our own offer, so that offer was
		// installed: its acknowledgement was lost. Let go of our copy.
		m.acked(p, pt.sendTo, pt.epoch)
	}
	if pt.held {
		// Two custodians: only a broken invariant gets here. Keep ours,
		// and tell the giver to stop (its copy is no newer than ours).
		m.stats.Conflicts++
		m.send(ack)
		return
	}
	if msg.State == nil {
		msg.State = []byte{} // an empty partition: still a snapshot
	}
	pt.held, pt.epoch, pt.from, pt.fromVer = true, msg.Epoch, msg.From, m.ver
	pt.round = 0
	m.stats.Received++
	m.send(ack)
	m.touch(p)
	if o := m.owner(p); o != m.self && o != msg.From && m.alive(o) {
		// Our ring already names another owner: pass the snapshot on as
		// it is, never admitting here.
		pt.frozen = msg.State
		m.handTo(p, o)
		return
	}
	m.rd.Install = append(m.rd.Install, Install{Part: p, State: msg.State})
}

// acked lets go of partition p, handed to member to under epoch.
func (m *Machine) acked(p int, to string, epoch uint64) {
	pt := &m.parts[p]
	pt.held, pt.frozen, pt.sendTo = false, nil, ""
	pt.gaveTo, pt.gaveEpoch = to, epoch
	m.stats.Given++
	m.touch(p)
}

// handTo starts handing custody of held partition p to member to.
func (m *Machine) handTo(p int, to string) {
	pt := &m.parts[p]
	pt.sendTo = to
	pt.epoch++
	m.touch(p)
	if pt.frozen == nil {
		pt.freezing = true
		m.rd.Freeze = append(m.rd.Freeze, p)
		return
	}
	m.offer(p)
}

func (m *Machine) offer(p int) {
	pt := &m.parts[p]
	pt.sentAt = m.now
	m.send(Msg{Kind: MsgOffer, To: pt.sendTo, Part: p, Epoch: pt.epoch, State: pt.frozen})
}

// Frozen hands the machine the snapshot of partition p the shell froze
// (nil or empty for a partition with no keys).
func (m *Machine) Frozen(p int, state []byte) {
	pt := &m.parts[p]
	if m.fenced || !pt.freezing {
		return
	}
	pt.freezing = false
	if state == nil {
		state = []byte{}
	}
	pt.frozen = state
	if m.alive(pt.sendTo) {
		m.offer(p) // at once: the retry interval counts from here
		return
	}
	m.eval(p)
}

// Restored tells the machine the shell restored partition p: it is admitted
// here from now on (or handed on, if the ring moved meanwhile).
func (m *Machine) Restored(p int) {
	pt := &m.parts[p]
	if !m.fenced && pt.restoring {
		pt.restoring = false
		m.touch(p)
		m.eval(p)
	}
}

// eval moves partition p forward after any input.
func (m *Machine) eval(p int) {
	pt := &m.parts[p]
	owner := m.owner(p)
	switch {
	case pt.held && (pt.restoring || pt.freezing):
		return
	case pt.held && pt.sendTo != "":
		if m.alive(pt.sendTo) {
			if m.now-pt.sentAt >= m.cfg.Retry {
				m.offer(p)
			}
			return
		}
		// The taker died without acknowledging. It may have installed
		// the offer and passed custody on before it died; only a pull
		// round tells whether our copy is still the newest.
		m.inquire(p)
	case pt.held:
		if owner == m.self || !m.alive(owner) {
			return
		}
		if owner == pt.from && m.ver == pt.fromVer {
			return // the giver's ring disagrees with ours; wait for a change
		}
		m.handTo(p, owner)
	case owner == m.self:
		m.inquire(p)
	}
}

// inquire runs the pull rounds of a partition this member owns by its ring
// and does not hold, and restores it once custody is known to be lost.
func (m *Machine) inquire(p int) {
	pt := &m.parts[p]
	if pt.round == 0 || m.now-pt.roundAt >= m.cfg.Round {
		m.rounds++
		pt.round = m.rounds
		pt.roundAt = m.now
		pt.asked = make(map[string]int64)
		pt.replies = make(map[string]Msg)
	}
	complete := true
	for _, id := range m.members() {
		if id == m.self {
			continue
		}
		if _, ok := pt.replies[id]; ok {
			continue
		}
		complete = false
		if at, ok := pt.asked[id]; !ok || m.now-at >= m.cfg.Retry {
			pt.asked[id] = m.now
			m.send(Msg{Kind: MsgPull, To: id, Part: p, Round: pt.round})
		}
	}
	if pt.held {
		m.doubt(p, complete)
		return
	}
	if !complete {
		return
	}
	newest, gaveTo, gave := pt.epoch, pt.gaveTo, pt.gaveEpoch
	for _, r := range pt.replies {
		if r.Held || r.Claiming {
			return // held by a live member, or another waiter's ring disagrees
		}
		newest = max(newest, r.Epoch, r.Gave)
		if r.Gave > gave {
			gaveTo, gave = r.GaveTo, r.Gave
		}
	}
	if gaveTo != m.self && m.known(gaveTo) {
		return // on its way to, or held by, a live member whose reply predates it
	}
	// Custody died with a member that is gone (or never existed: a new
	// cluster).
	pt.held, pt.restoring, pt.epoch = true, true, newest+1
	pt.round = 0
	m.stats.Orphans++
	m.touch(p)
	m.rd.Restore = append(m.rd.Restore, p)
}

// doubt settles a held partition whose taker died before acknowledging:
// if a live member has seen custody at or past our offer's epoch, the offer
// made it and our copy is stale; if every live member answered and none
// has, our copy is the newest there is and custody is ours again.
func (m *Machine) doubt(p int, complete bool) {
	pt := &m.parts[p]
	held := false
	for _, r := range pt.replies {
		if max(r.Epoch, r.Gave) >= pt.epoch {
			m.acked(p, pt.sendTo, pt.epoch)
			return
		}
		held = held || r.Held
	}
	if !complete || held {
		return
	}
	// Installed here first; the next tick hands it on if the ring says so.
	pt.sendTo, pt.round = "", 0
	m.touch(p)
	pt.epoch++
	m.rd.Install = append(m.rd.Install, Install{Part: p, State: pt.frozen, Reclaim: true})
	pt.frozen = nil
}

// known reports whether a pull round must hear from member id: it is in
// the view, or it spoke to us lately without being in the view yet (a
// joiner whose arrival our view has not caught up with: it may claim the
// partition too).
func (m *Machine) known(id string) bool {
	if m.alive(id) {
		return true
	}
	at, ok := m.heard[id]
	return ok && !m.gone[id] && m.now-at <= 3*m.cfg.Round
}

// members returns the members a pull round asks, in a fixed order so runs
// replay. The slice is shared until the next tick, view or news.
func (m *Machine) members() []string {
	key := [3]int64{m.now, int64(m.ver), int64(len(m.heard))}
	if m.asked.ids != nil && m.asked.key == key {
		return m.asked.ids
	}
	ids := make([]string, 0, len(m.view.Alive))
	for id, ok := range m.view.Alive {
		if ok {
			ids = append(ids, id)
		}
	}
	for id := range m.heard {
		if !m.view.Alive[id] && m.known(id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	m.asked.key, m.asked.ids = key, ids
	return ids
}

// Route says where calls for partition p go now.
func (m *Machine) Route(p int) Route {
	pt := &m.parts[p]
	switch {
	case m.fenced:
		return Route{Mode: RouteFenced}
	case pt.held && pt.sendTo != "" && m.alive(pt.sendTo):
		return Route{Mode: RouteForward, To: pt.sendTo, Handed: true}
	case pt.held && pt.sendTo != "":
		return Route{Mode: RouteAwait} // in doubt: see doubt
	case pt.held && pt.restoring:
		return Route{Mode: RouteAwait}
	case pt.held:
		return Route{Mode: RouteLocal}
	}
	owner := m.owner(p)
	switch {
	case owner == m.self:
		return Route{Mode: RouteAwait}
	case owner == "":
		return Route{Mode: RouteAwait} // no ring: nothing to forward to
	}
	return Route{Mode: RouteForward, To: owner, Handed: owner == pt.gaveTo}
}

// Fence retires the machine for good: this member fenced itself. Every
// partition's route becomes RouteFenced (Ready lists them all), whatever
// was still to be done is dropped, and every input after it is ignored. It
// returns, in partition order, the snapshots frozen for handovers not yet
// acknowledged: their takers may never have installed them, so what they
// count is owed like what the table holds. A second Fence returns nothing.
func (m *Machine) Fence() []Snapshot {
	if m.fenced {
		return nil
	}
	m.fenced = true
	m.rd = Ready{}
	var frozen []Snapshot
	for p := range m.parts {
		if pt := &m.parts[p]; pt.held && pt.frozen != nil {
			frozen = append(frozen, Snapshot{Part: p, State: pt.frozen})
		}
		m.touch(p)
	}
	return frozen
}

// Stats returns the machine's counters.
func (m *Machine) Stats() Stats { return m.stats }

// Fenced reports whether Fence retired the machine.
func (m *Machine) Fenced() bool { return m.fenced }

// Snapshot is a partition's frozen state.
type Snapshot struct {
	Part  int
	State []byte
}

// Holds reports whether this member is custodian of partition p.
func (m *Machine) Holds(p int) bool { return m.parts[p].held }

// Held counts the partitions this member is custodian of.
func (m *Machine) Held() int {
	n := 0
	for p := range m.parts {
		if m.parts[p].held {
			n++
		}
	}
	return n
}

// Ready returns what the shell must do and forgets it: the shell applies
// it before it calls the machine again (Frozen for each Freeze, Restored
// for each Restore may come later).
func (m *Machine) Ready() Ready {
	rd := m.rd
	m.rd = Ready{}
	for p, t := range m.touched {
		if t {
			rd.Routes = append(rd.Routes, p)
			m.touched[p] = false
		}
	}
	return rd
}
