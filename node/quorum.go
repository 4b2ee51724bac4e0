package node

import "time"

// quorum decides whether this member may own partitions: only while it
// sees a majority of the last known membership. A network split leaves at
// most one side with a majority; the other side (the minority) takes no
// ownership: its calls fall back to degraded shares, charged later as
// debts, instead of each side admitting the whole limit.
//
// The membership counted (base) is the members of the views that held a
// majority, by name (a restarted member is the same seat). It grows by the
// members of every majority view, and shrinks only when a member leaves
// gracefully (it was marked leaving, then was gone), or has been absent
// longer than the forget horizon. A member that dies stays counted: a
// view that lost members one by one cannot talk itself into a majority,
// since crashes and cuts look the same from inside. So a cluster of three
// survives one crash, and a cluster of two none: its survivor serves only
// degraded shares until the other returns, or is forgotten. Scale down
// with a graceful leave (SIGTERM), which shrinks the membership counted.
//
// Two checks use the base. A view (from gossip, seconds after a cut) that
// holds no majority of it fences the member (see Node.fence). And, faster,
// the lease: a member that has not heard from a majority of it, itself
// included, within a lease stops deciding until it has again; heartbeats
// keep the lease of a healthy member fresh. quorum is pure: time comes in
// as arguments.
type quorum struct {
	horizon time.Duration        // how long an absent member stays counted
	base    map[string]time.Time // name → when it was last present
	leaving map[string]bool      // names marked leaving in the last view
}

func newQuorum(horizon time.Duration) *quorum {
	return &quorum{horizon: horizon, base: map[string]time.Time{}, leaving: map[string]bool{}}
}

// observe takes the membership of a new view at now and reports whether it
// holds a majority of the membership counted. The first view always does.
func (q *quorum) observe(members []viewMember, now time.Time) bool {
	present := make(map[string]bool, len(members))
	for _, m := range members {
		present[m.Name] = true
	}
	for name := range q.leaving {
		if !present[name] {
			delete(q.base, name) // left gracefully
		}
	}
	clear(q.leaving)
	for _, m := range members {
		if m.Leaving {
			q.leaving[m.Name] = true
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
	majority := len(q.base) == 0 || 2*seen > len(q.base)
	if majority {
		for _, m := range members {
			if !m.Leaving {
				q.base[m.Name] = now
			}
		}
	}
	return majority
}

// leased reports whether self, with heardAt telling when each other
// counted member was last heard from, has heard from a majority of the
// membership counted within lease before now.
func (q *quorum) leased(self string, now time.Time, lease time.Duration, heardAt func(name string) (time.Time, bool)) bool {
	if len(q.base) == 0 {
		return true
	}
	heard := 0
	for name := range q.base {
		if name == self {
			heard++
			continue
		}
		if at, ok := heardAt(name); ok && now.Sub(at) <= lease {
			heard++
		}
	}
	return 2*heard > len(q.base)
}
