package custody

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/ring"
)

// view parses "n1 n2 n3- n4+" into members; a trailing "-" marks one
// leaving, a "+" one leaving and departed (done, about to go).
func view(s string) []Member {
	var ms []Member
	for _, f := range strings.Fields(s) {
		name, leaving := strings.CutSuffix(f, "-")
		name, departed := strings.CutSuffix(name, "+")
		ms = append(ms, Member{Member: ring.Member{Name: name}, Leaving: leaving || departed, Departed: departed})
	}
	return ms
}

func TestQuorumMajorityOfTheLastKnownMembership(t *testing.T) {
	type step struct {
		view     string
		after    time.Duration // since the previous step
		majority bool
		counted  string // the membership counted after it, if given
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"three survive one crash, not two", []step{
			{"n1 n2 n3", 0, true, ""}, {"n1 n2", time.Second, true, ""}, {"n1", time.Second, false, ""},
		}},
		{"the crashed member returns", []step{
			{"n1 n2 n3", 0, true, ""}, {"n1", time.Second, false, ""}, {"n1 n3", time.Second, true, ""}, {"n1 n2 n3", time.Second, true, ""},
		}},
		{"a split detected one member at a time stays a minority", []step{
			{"n1 n2 n3 n4 n5", 0, true, ""}, {"n1 n2 n3 n4", time.Second, true, ""}, {"n1 n2 n3", time.Second, true, ""},
			{"n1 n2", time.Second, false, ""}, {"n1", time.Second, false, ""},
		}},
		{"an even split leaves both halves without a majority", []step{
			{"n1 n2 n3 n4", 0, true, ""}, {"n1 n2", time.Second, false, ""},
		}},
		{"graceful leaves shrink the membership counted", []step{
			{"n1 n2 n3", 0, true, ""}, {"n1 n2 n3-", time.Second, true, "n1 n2 n3"}, {"n1 n2", time.Second, true, "n1 n2"},
			{"n1 n2-", time.Second, true, ""}, {"n1 n2+", time.Second, true, "n1"}, {"n1", time.Second, true, "n1"},
		}},
		{"3 to 2 with the departure confirmed", []step{
			{"n1 n2 n3", 0, true, ""}, {"n1 n2 n3-", time.Second, true, "n1 n2 n3"},
			{"n1 n2 n3+", time.Second, true, "n1 n2"}, {"n1 n2", time.Second, true, "n1 n2"},
			{"n1", time.Second, false, "n1 n2"},
		}},
		{"2 to 1 with the departure confirmed", []step{
			{"n1 n2", 0, true, ""}, {"n1 n2-", time.Second, true, "n1 n2"},
			{"n1 n2+", time.Second, true, "n1"}, {"n1", time.Second, true, "n1"},
		}},
		{"two members: one leaving that vanishes unconfirmed stays counted", []step{
			{"n1 n2", 0, true, ""}, {"n1 n2-", time.Second, true, "n1 n2"}, {"n1", time.Second, false, "n1 n2"},
			{"n1", 30 * time.Minute, false, "n1 n2"}, {"n1 n2-", time.Second, true, "n1 n2"}, {"n1", time.Second, false, "n1 n2"},
		}},
		{"a leaving member unconfirmed is dropped by the next majority view without it", []step{
			{"n1 n2 n3 n4", 0, true, ""}, {"n1 n2 n3 n4-", time.Second, true, "n1 n2 n3 n4"},
			{"n1 n4-", time.Second, false, "n1 n2 n3 n4"}, {"n1", time.Second, false, "n1 n2 n3 n4"},
			{"n1 n2 n3", time.Second, true, "n1 n2 n3"}, {"n1 n2", time.Second, true, "n1 n2 n3"},
		}},
		// The gap the custody simulation found (seed 75): with the old
		// rule (marked leaving, then absent: gone), each side of this
		// split dropped the other side's leaving member and counted a
		// majority of three.
		{"split with leaving members on both sides: one side", []step{
			{"n1 n2 n3 n4", 0, true, ""}, {"n1 n2 n3- n4-", time.Second, true, "n1 n2 n3 n4"},
			{"n1 n3-", time.Second, false, "n1 n2 n3 n4"}, {"n1 n3+", time.Second, false, "n1 n2 n4"}, {"n1", time.Second, false, "n1 n2 n4"},
		}},
		{"split with leaving members on both sides: the other side", []step{
			{"n1 n2 n3 n4", 0, true, ""}, {"n1 n2 n3- n4-", time.Second, true, "n1 n2 n3 n4"},
			{"n2 n4-", time.Second, false, "n1 n2 n3 n4"}, {"n2", time.Second, false, "n1 n2 n3 n4"},
		}},
		{"the side with a majority counting them drops the other side's leaving members", []step{
			{"n1 n2 n3 n4 n5", 0, true, ""}, {"n1 n2 n3 n4- n5-", time.Second, true, ""},
			{"n1 n2 n4-", time.Second, true, "n1 n2 n3 n4"}, {"n1 n2 n3 n5-", time.Second, true, "n1 n2 n3 n5"}, // n5 back, still draining
		}},
		// Departed members are never counted as seen: were they counted
		// until gone, each side here would drop the other's (departed,
		// absent) and count two of three.
		{"departing members on both sides of a split count for neither", []step{
			{"n1 n2 n3 n4", 0, true, ""}, {"n1 n2 n3+ n4+", time.Second, true, "n1 n2"},
			{"n1 n3+", time.Second, false, "n1 n2"},
		}},
		{"two members: the survivor of a crash is a minority", []step{
			{"n1 n2", 0, true, ""}, {"n1", time.Second, false, ""}, {"n1", 30 * time.Minute, false, ""}, {"n1 n2", time.Second, true, ""},
		}},
		{"a member absent past the horizon is forgotten", []step{
			{"n1 n2", 0, true, ""}, {"n1", time.Second, false, ""}, {"n1", 2 * time.Hour, true, ""},
		}},
		{"a member that starts while another drains counts it", []step{
			{"n1 n2 n3-", 0, true, "n1 n2 n3"}, {"n1", time.Second, false, "n1 n2 n3"}, {"n1 n2", time.Second, true, "n1 n2"},
		}},
		{"joiners count once a majority saw them", []step{
			{"n1", 0, true, ""}, {"n1 n2 n3", time.Second, true, ""}, {"n1", time.Second, false, ""}, {"n1 n2", time.Second, true, ""},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQuorum(time.Hour)
			now := time.Unix(1_700_000_000, 0)
			for i, s := range tc.steps {
				now = now.Add(s.after)
				if got := q.Observe(view(s.view), now); got != s.majority {
					t.Fatalf("step %d, view %q: majority %v, want %v (counted %v)", i, s.view, got, s.majority, q.counted())
				}
				if s.counted != "" && strings.Join(q.counted(), " ") != s.counted {
					t.Fatalf("step %d, view %q: counted %v, want %v", i, s.view, q.counted(), s.counted)
				}
			}
		})
	}
}

// Every split of clusters of up to five, with members active, leaving or
// departed (and at least one active): after a whole view of them all
// active, then one of them so marked, each side sees its side, then its
// leaving members departed, then gone. At most one side ever holds a
// majority.
func TestQuorumSplitLeavesAtMostOneMajority(t *testing.T) {
	for n := 1; n <= 5; n++ {
		states := 1
		for range n {
			states *= 3
		}
		for st := range states {
			for sides := range 1 << n {
				var active, whole []string
				side := [2][3][]string{} // side → step → view
				for i, s := 0, st; i < n; i, s = i+1, s/3 {
					name := fmt.Sprintf("n%d", i+1)
					mark := []string{"", "-", "+"}[s%3]
					active, whole = append(active, name), append(whole, name+mark)
					sd := side[sides>>i&1][:]
					sd[0] = append(sd[0], name+mark)
					if mark == "" {
						sd[1], sd[2] = append(sd[1], name), append(sd[2], name)
					} else {
						sd[1] = append(sd[1], name+"+")
					}
				}
				if len(side[0][2])+len(side[1][2]) == 0 {
					continue // nobody active: nothing counted, nobody owns anything
				}
				var majority [2]bool
				var trail [2][]bool
				for k := range side {
					q := NewQuorum(time.Hour)
					now := time.Unix(1_700_000_000, 0)
					q.Observe(view(strings.Join(active, " ")), now)
					q.Observe(view(strings.Join(whole, " ")), now)
					for _, v := range side[k] {
						now = now.Add(time.Second)
						got := q.Observe(view(strings.Join(v, " ")), now)
						majority[k] = majority[k] || got
						trail[k] = append(trail[k], got)
					}
				}
				if majority[0] && majority[1] {
					t.Fatalf("whole %v, split %v | %v: both sides held a majority (%v | %v)", whole, side[0], side[1], trail[0], trail[1])
				}
			}
		}
	}
}

func TestQuorumMandate(t *testing.T) {
	q := NewQuorum(time.Hour)
	now := time.Unix(1_700_000_000, 0)
	q.Observe(view("n1 n2 n3"), now)
	term := time.Second
	heard := map[string]time.Time{}
	at := func(name string) (time.Time, bool) { t, ok := heard[name]; return t, ok }
	if q.Mandated("n1", now, term, at) {
		t.Fatal("mandated having heard from nobody but itself (1 of 3)")
	}
	heard["n2"] = now.Add(-term)
	if !q.Mandated("n1", now, term, at) {
		t.Fatal("not mandated having heard from n2 exactly one term ago (2 of 3)")
	}
	if q.Mandated("n1", now.Add(time.Nanosecond), term, at) {
		t.Fatal("mandated a nanosecond after n2's last word went stale")
	}
	heard["n3"] = now
	if !q.Mandated("n1", now.Add(time.Nanosecond), term, at) {
		t.Fatal("not mandated having heard from n3 (2 of 3)")
	}
}

// counted returns the names of the membership counted, for messages.
func (q *Quorum) counted() []string {
	names := make([]string, 0, len(q.base))
	for name := range q.base {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// TestQuorumLearnedMembershipJudgesTheFirstView: a process starting during
// a split learns the membership its peers count before its first view, so
// a first view of two of five is a minority, not a majority of itself.
func TestQuorumLearnedMembershipJudgesTheFirstView(t *testing.T) {
	now := time.Unix(1000, 0)
	q := NewQuorum(ForgetAfter)
	q.Learn([]string{"a", "b", "c", "d", "e"}, now)
	if q.Observe(quorumView("a", "b"), now) {
		t.Fatal("a first view of 2 of the 5 members learned holds a majority")
	}
	fresh := NewQuorum(ForgetAfter)
	if !fresh.Observe(quorumView("a", "b"), now) {
		t.Fatal("the first view of a quorum that learned nothing holds no majority")
	}
	if got := q.Names(); len(got) != 5 || got[0] != "a" || got[4] != "e" {
		t.Fatalf("Names = %v, want a..e", got)
	}
}

func quorumView(names ...string) []Member {
	var ms []Member
	for _, n := range names {
		ms = append(ms, Member{Member: ring.Member{Name: n}})
	}
	return ms
}
