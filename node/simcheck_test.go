package node

import (
	"fmt"
	"time"

	"github.com/tokenring/tokenring/node/custody"
)

// fault injects one fault the seed picks.
func (w *simWorld) fault(g *simGhost) {
	m := w.members[w.rng.IntN(len(w.members))]
	heal := w.mono + int64(500*time.Millisecond) + w.rng.Int64N(int64(6*time.Second))
	switch r := w.rng.IntN(18); {
	case r < 2:
		if m.node != nil {
			w.logf("%s crashes", m.name)
			w.crash(m, g)
		}
	case r < 5:
		if w.calm() {
			w.split(heal)
		}
	case r < 8:
		if m.running() {
			switch k := w.rng.IntN(4); k {
			case 0:
				m.armed = true
				w.logf("%s will crash at its next send", m.name)
			default:
				m.armedAt = [...]string{"", "freeze", "install", "restore"}[k]
				w.logf("%s will crash at its next %s", m.name, m.armedAt)
			}
		}
	case r < 12:
		o := w.members[w.rng.IntN(len(w.members))]
		if o != m && w.calm() {
			w.mu.Lock()
			w.cut[[2]string{m.name, o.name}] = heal
			w.mu.Unlock()
			w.logf("cut %s → %s for %v", m.name, o.name, time.Duration(heal-w.mono))
		}
	case r < 14:
		w.mu.Lock()
		clear(w.cut)
		w.healed = w.mono
		w.mu.Unlock()
		w.logf("every cut healed")
	default:
		if m.running() && w.calm() {
			d := 100*time.Millisecond + time.Duration(w.rng.Int64N(int64(5*time.Second)))
			m.stallUntil = w.mono + int64(d)
			w.logf("%s stalls for %v", m.name, d)
		}
	}
}

// mayStart reports whether starting is without the remaining "restarts"
// gap (ARCHITECTURE.md, Known gaps), unless -sim.strict names it: the
// process reaches a running member to learn the counted membership from,
// or no other member runs (nobody to be cut off from).
func (w *simWorld) mayStart(starting *simMember) bool {
	if w.strict("restarts") {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	others := false
	for _, m := range w.members {
		if m == starting || m.node == nil {
			continue
		}
		others = true
		if w.reachable(starting, m) {
			return true
		}
	}
	return !others
}

// calm reports whether a new cut or stall may start: with
// -sim.strict=cascade at any time; otherwise only once every cut healed
// simDetect ago or more, so that a member's failure detector and the
// mandate of the member it watches start counting at the same fault
// (ARCHITECTURE.md, Known gaps: "cascade").
func (w *simWorld) calm() bool {
	if w.strict("cascade") {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.cut) == 0 && w.mono-w.healed >= int64(simDetect)
}

// healAndRestart heals the cuts whose time came, and starts the crashed
// processes whose time came (while the "restarts" gap allows).
func (w *simWorld) healAndRestart() {
	w.mu.Lock()
	for k, at := range w.cut {
		if w.mono >= at {
			delete(w.cut, k)
			w.healed = w.mono
		}
	}
	w.mu.Unlock()
	for _, m := range w.members {
		if m.node == nil && w.mono >= m.restartAt && w.mayStart(m) {
			w.start1(m)
		}
	}
}

// split cuts the members into two sides, both ways.
func (w *simWorld) split(heal int64) {
	side := map[string]bool{}
	for _, m := range w.members {
		side[m.name] = w.rng.IntN(2) == 0
	}
	w.mu.Lock()
	for _, a := range w.members {
		for _, b := range w.members {
			if side[a.name] != side[b.name] {
				w.cut[[2]string{a.name, b.name}] = heal
			}
		}
	}
	w.mu.Unlock()
	w.logf("split for %v: %v", time.Duration(heal-w.mono), side)
	var minority []*simMember // the smaller side's members
	for _, m := range w.members {
		if side[m.name] == (2*simCount(side) < len(w.members)) {
			minority = append(minority, m)
		}
	}
	if len(minority) == 0 || len(minority) == len(w.members) {
		return
	}
	if m := minority[w.rng.IntN(len(minority))]; m.node != nil && w.rng.IntN(2) == 0 {
		// Half the splits restart a member of the smaller side while
		// they last, or just after.
		w.logf("%s crashes in the split", m.name)
		w.crash(m, w.ghost)
		m.restartAt = w.mono + int64(2*time.Second) + w.rng.Int64N(int64(3*time.Second))
	}
}

// simCount is how many of side's members are on the true side.
func simCount(side map[string]bool) int {
	n := 0
	for _, on := range side {
		if on {
			n++
		}
	}
	return n
}

// crash ends m's process: its node closes, its memory is gone, and what it
// admitted within the last window is forgiven (the crash bound).
func (w *simWorld) crash(m *simMember, g *simGhost) {
	w.forgive(m, g) // while its routes still say what it held
	m.node.Close()
	m.node, m.dying, m.armed, m.armedAt, m.stallUntil, m.heldAtDeath = nil, false, false, "", 0, nil
	m.restartAt = w.mono + int64(200*time.Millisecond) + w.rng.Int64N(int64(5*time.Second))
	delete(g.fences, m.name)
}

// forgive marks as forgiven (the crash bound) what m admitted within the
// window before now, and what anyone admitted in it for the keys of the
// partitions m holds now: state that came to m by a handover may die with
// it before m copied it to its backups.
func (w *simWorld) forgive(m *simMember, g *simGhost) {
	held := simHeld(m)
	if m.heldAtDeath != nil {
		held = m.heldAtDeath
	}
	for i := len(g.admitted) - 1; i >= 0 && g.admitted[i].at > w.mono-int64(simWindow); i-- {
		if ad := g.admitted[i]; (ad.by == m.name || held[simPartitionOf[ad.keyIdx]]) && !ad.forgiven {
			ad.forgiven = true
			g.forgiven++
		}
	}
	for i := len(g.settles) - 1; i >= 0 && g.settles[i].at > w.mono-int64(simWindow); i-- {
		if st := g.settles[i]; (st.by == m.name || held[simPartitionOf[st.keyIdx]]) && !st.forgiven {
			st.forgiven = true // lost with m: the client may settle again
			g.settled[st.lease]--
		}
	}
}

// simHeld is the partitions m holds now (routed to it).
func simHeld(m *simMember) *[simPartitions]bool {
	var held [simPartitions]bool
	if m.node != nil {
		if t := m.node.tr.Load(); t != nil {
			for p := range t.gates {
				held[p] = t.gates[p].hop.Load().mode == custody.RouteLocal
			}
		}
	}
	return &held
}

// reap ends the processes that crashed at a send during the event, and
// notes the fences made during it.
func (w *simWorld) reap(g *simGhost) {
	for _, m := range w.members {
		if m.dying {
			w.logf("%s crashed at a send", m.name)
			w.crash(m, g)
			continue
		}
		if m.node == nil {
			continue
		}
		if f := m.node.fences.Load(); f > g.fences[m.name] {
			g.fences[m.name] = f
			w.logf("%s fenced itself", m.name)
			w.forgive(m, g)
		}
	}
}

// check returns the first invariant broken now, or "".
func (w *simWorld) check(g *simGhost) string {
	var deciders [simPartitions][]string
	for _, m := range w.members {
		if !m.running() || m.node.Fenced() || !m.node.Mandated() {
			continue
		}
		t := m.node.tr.Load()
		if t == nil {
			continue
		}
		for p := range t.gates {
			if t.gates[p].hop.Load().mode == custody.RouteLocal {
				deciders[p] = append(deciders[p], m.name)
				if len(deciders[p]) > 1 {
					return fmt.Sprintf("partition %d has %d deciders: %v", p, len(deciders[p]), deciders[p])
				}
			}
		}
	}
	for lease, n := range g.newlySettled {
		if n > 1 {
			return fmt.Sprintf("lease %x settled %d times", lease, n)
		}
	}
	clear(g.newlySettled)
	var counts [len(simKeys)]int
	// With skewed clocks a key's window moves with the host deciding it: a
	// handover to a host ahead by up to 2×maxSkew expires its admissions
	// that much sooner (the skew bound). The window checked is shorter by it.
	window := int64(simWindow - 2*w.maxSkew)
	for i := len(g.admitted) - 1; i >= 0 && g.admitted[i].at > w.mono-window; i-- {
		if ad := g.admitted[i]; !ad.forgiven {
			counts[ad.keyIdx]++
		}
	}
	for k, key := range simKeys {
		if counts[k] > simLimit {
			return fmt.Sprintf("key %s: %d admissions within the window ending now, limit %d", key, counts[k], simLimit)
		}
	}
	return ""
}
