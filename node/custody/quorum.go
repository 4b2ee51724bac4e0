package custody

import (
	"slices"
	"time"
)

// Quorum decides whether this member may own partitions: only while it
// sees a majority of the last known membership. A network split leaves at
// most one side with a majority; the other side (the minority) takes no
// ownership: its calls fall back to degraded shares, charged later as
// debts, instead of each side admitting the whole limit.
//
// The membership counted (base) is the members of the views that held a
// majority, by name (a restarted member is the same seat). It grows by the
// members of every majority view, leaving ones included (until it has
// gone, a leaving member is a seat like any other: a member that started
// while it was draining must count it too), and shrinks only when a
// member departs, or has been absent longer than the forget horizon. A
// member that dies stays counted: a view that lost members one by one
// cannot talk itself into a majority, since crashes and cuts look the
// same from inside. So a cluster of three survives one crash, and a
// cluster of two none: its survivor serves only degraded shares until the
// other returns, or is forgotten.
//
// A member leaving gracefully (SIGTERM) is marked leaving in its gossip
// metadata while it drains, and marked departed once it has handed
// everything on, just before it leaves gossip. A member leaving and cut
// off by a split looks exactly like one that left, so absence alone does
// not make a departure. A member stops being counted when
//
//   - a view shows it departed (it owns nothing and is about to go): it is
//     dropped at once, present or not, and never counted as seen; or
//   - it is absent from a view that holds a majority of the membership
//     counting it, and the last view that showed it marked it leaving.
//
// The second rule lets at most one side of a split drop a leaving member:
// two disjoint sides cannot both hold a majority of a membership that
// counts it. The first lets a cluster of two scale down to one, which the
// second cannot ({A, L} to {A} is one of two). A leaving member that
// vanishes without having been seen departed (it crashed while draining,
// its drain failed, or the update was missed) stays counted like a crash,
// until a majority view without it, its return, or the horizon.
//
// Two checks use the base. A view (from gossip, seconds after a cut) that
// holds no majority of it fences the member (see Node.fence). And, faster,
// the mandate: a member that has not heard from a majority of it, itself
// included, within the mandate's term stops deciding until it has again;
// heartbeats keep the mandate of a healthy member fresh. quorum is pure: time comes in
// as arguments.
type Quorum struct {
	horizon time.Duration        // how long an absent member stays counted
	base    map[string]time.Time // name → when it was last present
	leaving map[string]bool      // names the last view showing them marked leaving
}

// ForgetAfter is the horizon a member's quorum counts with: how long a
// member that died without leaving stays counted in the membership
// (gossip's reconnect horizon).
const ForgetAfter = 72 * time.Hour

// NewQuorum returns a quorum that has counted nobody yet, forgetting an
// absent member after horizon (ForgetAfter).
func NewQuorum(horizon time.Duration) *Quorum {
	return &Quorum{horizon: horizon, base: map[string]time.Time{}, leaving: map[string]bool{}}
}

// Observe takes the membership of a new view at now and reports whether it
// holds a majority of the membership counted. The first view always does.
func (q *Quorum) Observe(members []Member, now time.Time) bool {
	present := make(map[string]bool, len(members))
	for _, m := range members {
		present[m.Name] = true
		switch {
		case m.Departed:
			delete(q.base, m.Name) // done and about to go: departed
			delete(q.leaving, m.Name)
		case m.Leaving:
			q.leaving[m.Name] = true
		default:
			delete(q.leaving, m.Name)
		}
	}
	seen := 0
	for name, at := range q.base {
		switch {
		case present[name]:
			q.base[name] = now
			seen++
		case now.Sub(at) > q.horizon:
			delete(q.base, name) // absent too long: forgotten
		}
	}
	for name := range q.leaving {
		if _, counted := q.base[name]; !counted && !present[name] {
			delete(q.leaving, name) // nothing left to decide about it
		}
	}
	if len(q.base) > 0 && 2*seen <= len(q.base) {
		return false // absent leaving members stay counted, like crashed ones
	}
	for name := range q.leaving {
		if !present[name] {
			delete(q.base, name) // left while a majority counting it looked on
			delete(q.leaving, name)
		}
	}
	for _, m := range members {
		if !m.Departed {
			q.base[m.Name] = now
		}
	}
	return true
}

// Learn counts names too, as present at now: the membership a peer's
// quorum counts, which a starting member learns before its first view (so
// that a process started during a split, or while a member is down, does
// not count only the members its first view shows). A name counted
// already keeps its record.
func (q *Quorum) Learn(names []string, now time.Time) {
	for _, name := range names {
		if _, ok := q.base[name]; !ok && name != "" {
			q.base[name] = now
		}
	}
}

// Names returns the names the membership counted holds, sorted.
func (q *Quorum) Names() []string {
	names := make([]string, 0, len(q.base))
	for name := range q.base {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Counted is how many members the membership counted holds: the seats a
// majority is counted among.
func (q *Quorum) Counted() int { return len(q.base) }

// Elsewhere returns, for a view without a majority (members: this side of
// a split), whether the member named is on the other, majority side: it is
// counted (not departed) and missing from this side's view. A fence owes
// what a key counts beyond the copy a backup acknowledged only when that
// backup is elsewhere: the majority restores from it.
func (q *Quorum) Elsewhere(members []Member) func(name string) bool {
	here := make(map[string]bool, len(members))
	for _, m := range members {
		here[m.Name] = true
	}
	return func(name string) bool { _, counted := q.base[name]; return counted && !here[name] }
}

// Mandated reports whether self, with heardAt telling when each other
// counted member was last heard from, has heard from a majority of the
// membership counted within term before now.
func (q *Quorum) Mandated(self string, now time.Time, term time.Duration, heardAt func(name string) (time.Time, bool)) bool {
	end := q.MandateEnd(self, now, term, heardAt)
	return !end.IsZero() && !end.Before(now)
}

// MandateEnd returns when self's mandate ends: term after the moment by which
// a majority of the membership counted (self, heard at now, included) had
// last been heard from; the zero time if a majority was never heard from.
// An empty membership mandates for term from now.
func (q *Quorum) MandateEnd(self string, now time.Time, term time.Duration, heardAt func(name string) (time.Time, bool)) time.Time {
	if len(q.base) == 0 {
		return now.Add(term)
	}
	heard := make([]time.Time, 0, len(q.base))
	for name := range q.base {
		if name == self {
			heard = append(heard, now)
		} else if at, ok := heardAt(name); ok {
			heard = append(heard, at)
		}
	}
	need := len(q.base)/2 + 1
	if len(heard) < need {
		return time.Time{}
	}
	slices.SortFunc(heard, func(a, b time.Time) int { return b.Compare(a) }) // newest first
	return heard[need-1].Add(term)
}
