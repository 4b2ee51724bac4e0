package node

import "slices"

// Custody: ownership transfer as a state machine with no I/O.
//
// Every partition's limiter state has one custodian: the member holding it.
// Only the custodian admits against the partition's keys, and only while it
// is not handing the partition on, so at any instant at most one member
// decides for a key. The ring says who should be custodian; the protocol
// moves custody there:
//
//  1. A custodian whose ring names another owner stops admitting for the
//     partition (the shell freezes the partition's keys into one snapshot,
//     removing them from its table) and offers the snapshot to the owner,
//     under a new epoch. It keeps the snapshot, and resends the offer every
//     retry interval, until the taker acknowledges that epoch: no timeout
//     anywhere drops state. If the taker leaves the membership before
//     acknowledging, the giver asks everyone (a pull round, see 3) whether
//     the offer made it; only if no live member has seen it is custody the
//     giver's again.
//  2. A taker installs an offer whose epoch is newer than any it handled
//     for the partition, and acknowledges every offer, new or duplicate, so
//     retries and duplicates are harmless. It does not hand custody straight
//     back to the member it came from until its own ring changes: the two
//     rings disagree for a moment, and the newer one wins when it arrives.
//     An offer that reaches a member still offering the partition itself
//     proves that member's own offer was installed (its ack was lost).
//  3. A member whose ring names it owner and that has no custody waits. It
//     asks every live member, and every member it heard from or of lately
//     that its view does not show yet (a joiner), what it knows (a pull
//     round): a custodian whose ring agrees hands the partition over at
//     once. When every one of them answers that it neither holds the
//     partition nor claims it, and the newest handover anyone reports went
//     to a member that is gone, custody died with that member: the waiter
//     restores the partition (replica, checkpoint, or empty) under a newer
//     epoch. Replies count only within one round begun after the last
//     membership change, so a partition on its way between live members is
//     never mistaken for a lost one.
//
// Epochs increase along the chain of custody of a partition; a member
// remembers the newest it took part in, which is how it tells a duplicate or
// stale offer from a new one.
//
// The decisions in 1 and 3 that act on a member being gone rely on failure
// detection being slower than message delivery: a member is declared dead
// (seconds, with memberlist) after anything it sent has arrived
// (milliseconds, over TCP). The simulation keeps to that, and checks the
// rest under arbitrary delay, loss, duplication, reordering and cuts.
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
// then routeFenced, and nothing fed to the machine changes anything; the
// member comes back as a new one, with a new machine.
type custody struct {
	self   string // this member's id (name/boot id)
	cfg    custodyConfig
	view   custodyView
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
	rd      custodyReady
	touched []bool // partitions whose Route may have changed since the last Ready

	stats custodyStats
}

// custodyConfig holds the machine's timings, in ticks.
type custodyConfig struct {
	Retry int64 // resend an unacknowledged offer, or a pull to a silent member, after this many ticks
	Round int64 // a pull round that did not complete starts over after this many ticks
}

// custodyStats counts protocol events, for metrics and tests.
type custodyStats struct {
	Given, Received int64 // handovers acknowledged / installed
	Orphans         int64 // partitions restored because their custodian died
	// Conflicts counts offers that reached a member already holding the
	// partition, and restores while a live member held it: the "started
	// from zero while the previous holder was alive" failure. Always 0
	// when the protocol works.
	Conflicts int64
}

// custodyView is the membership as this member sees it.
type custodyView struct {
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
	replies map[string]custodyMsg
}

// msgKind is the kind of a custody message.
type msgKind uint8

const (
	msgOffer msgKind = iota + 1 // take custody of Part at Epoch: State is its snapshot
	msgAck                      // the offer of Epoch is installed (or was already)
	msgPull                     // I own Part by my ring: hand it over, or tell me what you know
	msgInfo                     // the answer to a pull that hands nothing over
)

// custodyMsg is one protocol message between members.
type custodyMsg struct {
	Kind     msgKind
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

// custodyReady is what the shell must do, in the order of its fields.
type custodyReady struct {
	Freeze  []int        // stop admitting, snapshot and remove the keys, then call Frozen
	Install []install    // put the snapshot's keys in the table; the partition is then admitted here
	Restore []int        // the custodian died: restore the partition, then call Restored
	Routes  []int        // partitions whose Route changed
	Msgs    []custodyMsg // last: an ack only once its partition is installed
}

// install is a snapshot to put in the table.
type install struct {
	Part  int
	State []byte
	// Reclaim: the state is this member's own offer, taken back because
	// its taker died without acknowledging and nobody has seen it since.
	Reclaim bool
}

// routeMode says where a call for a partition goes.
type routeMode uint8

const (
	routeLocal   routeMode = iota // this member is the custodian: decide here
	routeAwait                    // custody is on its way here: wait for it (bounded), then decide
	routeForward                  // forward to To; Handed says custody is going or went there
	routeFenced                   // the machine is retired (Fence): calls fail, nothing is decided here or forwarded
)

// route is the hot path's view of one partition.
type route struct {
	Mode   routeMode
	To     string // routeForward: the member id
	Handed bool   // To is (or is becoming) the custodian: it should wait, not forward on
}

func newCustody(self string, partitions int, cfg custodyConfig) *custody {
	if cfg.Retry <= 0 {
		cfg.Retry = 10
	}
	if cfg.Round <= 0 {
		cfg.Round = 10 * cfg.Retry
	}
	return &custody{
		self:    self,
		cfg:     cfg,
		parts:   make([]part, partitions),
		touched: make([]bool, partitions),
		gone:    make(map[string]bool),
		heard:   make(map[string]int64),
		view:    custodyView{Owners: make([]string, partitions), Alive: map[string]bool{self: true}},
	}
}

func (m *custody) owner(p int) string { return m.view.Owners[p] }

func (m *custody) alive(id string) bool { return id != "" && m.view.Alive[id] }

func (m *custody) send(msg custodyMsg) {
	msg.From = m.self
	m.rd.Msgs = append(m.rd.Msgs, msg)
}

func (m *custody) touch(p int) { m.touched[p] = true }

// SetView installs a new membership. Owners must have one entry per
// partition; Alive must contain this member.
func (m *custody) SetView(v custodyView) {
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
func (m *custody) Tick() {
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
func (m *custody) Step(msg custodyMsg) {
	if m.fenced || msg.To != m.self || msg.Part < 0 || msg.Part >= len(m.parts) {
		return
	}
	if !m.gone[msg.From] {
		m.heard[msg.From] = m.now
	}
	p := msg.Part
	pt := &m.parts[p]
	switch msg.Kind {
	case msgOffer:
		m.offered(p, msg)
	case msgAck:
		if pt.held && pt.sendTo == msg.From && pt.epoch == msg.Epoch && !pt.freezing {
			m.acked(p, msg.From, msg.Epoch)
		}
	case msgPull:
		if pt.held && !pt.restoring && pt.sendTo == "" && m.owner(p) == msg.From && m.alive(msg.From) {
			m.handTo(p, msg.From) // our ring agrees: no need to wait for a tick
			return
		}
		m.send(custodyMsg{Kind: msgInfo, To: msg.From, Part: p, Round: msg.Round, Epoch: pt.epoch,
			Held: pt.held, Claiming: !pt.held && m.owner(p) == m.self, GaveTo: pt.gaveTo, Gave: pt.gaveEpoch})
		return
	case msgInfo:
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
func (m *custody) offered(p int, msg custodyMsg) {
	pt := &m.parts[p]
	ack := custodyMsg{Kind: msgAck, To: msg.From, Part: p, Epoch: msg.Epoch}
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
	m.rd.Install = append(m.rd.Install, install{Part: p, State: msg.State})
}

// acked lets go of partition p, handed to member to under epoch.
func (m *custody) acked(p int, to string, epoch uint64) {
	pt := &m.parts[p]
	pt.held, pt.frozen, pt.sendTo = false, nil, ""
	pt.gaveTo, pt.gaveEpoch = to, epoch
	m.stats.Given++
	m.touch(p)
}

// handTo starts handing custody of held partition p to member to.
func (m *custody) handTo(p int, to string) {
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

func (m *custody) offer(p int) {
	pt := &m.parts[p]
	pt.sentAt = m.now
	m.send(custodyMsg{Kind: msgOffer, To: pt.sendTo, Part: p, Epoch: pt.epoch, State: pt.frozen})
}

// Frozen hands the machine the snapshot of partition p the shell froze
// (nil or empty for a partition with no keys).
func (m *custody) Frozen(p int, state []byte) {
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
func (m *custody) Restored(p int) {
	pt := &m.parts[p]
	if !m.fenced && pt.restoring {
		pt.restoring = false
		m.touch(p)
		m.eval(p)
	}
}

// eval moves partition p forward after any input.
func (m *custody) eval(p int) {
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
func (m *custody) inquire(p int) {
	pt := &m.parts[p]
	if pt.round == 0 || m.now-pt.roundAt >= m.cfg.Round {
		m.rounds++
		pt.round = m.rounds
		pt.roundAt = m.now
		pt.asked = make(map[string]int64)
		pt.replies = make(map[string]custodyMsg)
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
			m.send(custodyMsg{Kind: msgPull, To: id, Part: p, Round: pt.round})
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
func (m *custody) doubt(p int, complete bool) {
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
	m.rd.Install = append(m.rd.Install, install{Part: p, State: pt.frozen, Reclaim: true})
	pt.frozen = nil
}

// known reports whether a pull round must hear from member id: it is in
// the view, or it spoke to us lately without being in the view yet (a
// joiner whose arrival our view has not caught up with: it may claim the
// partition too).
func (m *custody) known(id string) bool {
	if m.alive(id) {
		return true
	}
	at, ok := m.heard[id]
	return ok && !m.gone[id] && m.now-at <= 3*m.cfg.Round
}

// members returns the members a pull round asks, in a fixed order so runs
// replay. The slice is shared until the next tick, view or news.
func (m *custody) members() []string {
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
func (m *custody) Route(p int) route {
	pt := &m.parts[p]
	switch {
	case m.fenced:
		return route{Mode: routeFenced}
	case pt.held && pt.sendTo != "" && m.alive(pt.sendTo):
		return route{Mode: routeForward, To: pt.sendTo, Handed: true}
	case pt.held && pt.sendTo != "":
		return route{Mode: routeAwait} // in doubt: see doubt
	case pt.held && pt.restoring:
		return route{Mode: routeAwait}
	case pt.held:
		return route{Mode: routeLocal}
	}
	owner := m.owner(p)
	switch {
	case owner == m.self:
		return route{Mode: routeAwait}
	case owner == "":
		return route{Mode: routeAwait} // no ring: nothing to forward to
	}
	return route{Mode: routeForward, To: owner, Handed: owner == pt.gaveTo}
}

// Fence retires the machine for good: this member fenced itself. Every
// partition's route becomes routeFenced (Ready lists them all), whatever
// was still to be done is dropped, and every input after it is ignored. It
// returns, in partition order, the snapshots frozen for handovers not yet
// acknowledged: their takers may never have installed them, so what they
// count is owed like what the table holds. A second Fence returns nothing.
func (m *custody) Fence() []snapshot {
	if m.fenced {
		return nil
	}
	m.fenced = true
	m.rd = custodyReady{}
	var frozen []snapshot
	for p := range m.parts {
		if pt := &m.parts[p]; pt.held && pt.frozen != nil {
			frozen = append(frozen, snapshot{Part: p, State: pt.frozen})
		}
		m.touch(p)
	}
	return frozen
}

// Fenced reports whether Fence retired the machine.
func (m *custody) Fenced() bool { return m.fenced }

// snapshot is a partition's frozen state.
type snapshot struct {
	Part  int
	State []byte
}

// Holds reports whether this member is custodian of partition p.
func (m *custody) Holds(p int) bool { return m.parts[p].held }

// Held counts the partitions this member is custodian of.
func (m *custody) Held() int {
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
func (m *custody) Ready() custodyReady {
	rd := m.rd
	m.rd = custodyReady{}
	for p, t := range m.touched {
		if t {
			rd.Routes = append(rd.Routes, p)
			m.touched[p] = false
		}
	}
	return rd
}
