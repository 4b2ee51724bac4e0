package node

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/ring"
)

// view parses "n1 n2 n3-" into members; a trailing "-" marks one leaving.
func view(s string) []viewMember {
	var ms []viewMember
	for _, f := range strings.Fields(s) {
		name, leaving := strings.CutSuffix(f, "-")
		ms = append(ms, viewMember{Member: ring.Member{Name: name}, Leaving: leaving})
	}
	return ms
}

func TestQuorumMajorityOfTheLastKnownMembership(t *testing.T) {
	type step struct {
		view     string
		after    time.Duration // since the previous step
		majority bool
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"three survive one crash, not two", []step{
			{"n1 n2 n3", 0, true}, {"n1 n2", time.Second, true}, {"n1", time.Second, false},
		}},
		{"the crashed member returns", []step{
			{"n1 n2 n3", 0, true}, {"n1", time.Second, false}, {"n1 n3", time.Second, true}, {"n1 n2 n3", time.Second, true},
		}},
		{"a split detected one member at a time stays a minority", []step{
			{"n1 n2 n3 n4 n5", 0, true}, {"n1 n2 n3 n4", time.Second, true}, {"n1 n2 n3", time.Second, true},
			{"n1 n2", time.Second, false}, {"n1", time.Second, false},
		}},
		{"an even split leaves both halves without a majority", []step{
			{"n1 n2 n3 n4", 0, true}, {"n1 n2", time.Second, false},
		}},
		{"graceful leaves shrink the membership counted", []step{
			{"n1 n2 n3", 0, true}, {"n1 n2 n3-", time.Second, true}, {"n1 n2", time.Second, true},
			{"n1 n2-", time.Second, true}, {"n1", time.Second, true},
		}},
		{"two members: the survivor of a crash is a minority", []step{
			{"n1 n2", 0, true}, {"n1", time.Second, false}, {"n1", 30 * time.Minute, false}, {"n1 n2", time.Second, true},
		}},
		{"a member absent past the horizon is forgotten", []step{
			{"n1 n2", 0, true}, {"n1", time.Second, false}, {"n1", 2 * time.Hour, true},
		}},
		{"joiners count once a majority saw them", []step{
			{"n1", 0, true}, {"n1 n2 n3", time.Second, true}, {"n1", time.Second, false}, {"n1 n2", time.Second, true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuorum(time.Hour)
			now := time.Unix(1_700_000_000, 0)
			for i, s := range tc.steps {
				now = now.Add(s.after)
				if got := q.observe(view(s.view), now); got != s.majority {
					t.Fatalf("step %d, view %q: majority %v, want %v (counted %v)", i, s.view, got, s.majority, q.counted())
				}
			}
		})
	}
}

func TestQuorumLease(t *testing.T) {
	q := newQuorum(time.Hour)
	now := time.Unix(1_700_000_000, 0)
	q.observe(view("n1 n2 n3"), now)
	lease := time.Second
	heard := map[string]time.Time{}
	at := func(name string) (time.Time, bool) { t, ok := heard[name]; return t, ok }
	if q.leased("n1", now, lease, at) {
		t.Fatal("leased having heard from nobody but itself (1 of 3)")
	}
	heard["n2"] = now.Add(-lease)
	if !q.leased("n1", now, lease, at) {
		t.Fatal("not leased having heard from n2 exactly one lease ago (2 of 3)")
	}
	if q.leased("n1", now.Add(time.Nanosecond), lease, at) {
		t.Fatal("leased a nanosecond after n2's last word went stale")
	}
	heard["n3"] = now
	if !q.leased("n1", now.Add(time.Nanosecond), lease, at) {
		t.Fatal("not leased having heard from n3 (2 of 3)")
	}
}

// counted returns the names of the membership counted, for messages.
func (q *quorum) counted() []string {
	names := make([]string, 0, len(q.base))
	for name := range q.base {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
