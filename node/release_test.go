package node

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// releases records what a node hands its release sink.
type releases struct {
	mu sync.Mutex
	st map[string][]limiter.Status
}

func (r *releases) sink(key string, st limiter.Status, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st == nil {
		r.st = map[string][]limiter.Status{}
	}
	r.st[key] = append(r.st[key], st)
}

func (r *releases) get(key string) []limiter.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st[key]
}

func (r *releases) keys() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.st)
}

// A key whose state leaves a node's table, handed to its new owner on a
// join, is released once, with the status the node had counted; keys that
// stay are not released.
func TestReleasedOnHandoff(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	nodes := newNodes(t, 3, limits)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	var got releases
	n1.OnRelease(got.sink)
	before := ringOf(t, n1, n2)
	n1.SetRing(before)
	n2.SetRing(before)
	after := ringOf(t, n1, n2, n3)
	moving := keysMoving(before, after, "n1", "n3", 5)
	staying := keysMoving(before, after, "n1", "n1", 5)
	for _, k := range append(moving, staying...) {
		if a := admit(t, n2, k, 6); a != 6 {
			t.Fatalf("%s: %d of 6 admitted", k, a)
		}
	}
	n3.SetRing(after)
	n1.SetRing(after)
	n2.SetRing(after)
	// Every handover n1 makes acknowledged: every key it will release has
	// been (a key is released as its partition is frozen, before the
	// offer), so a key released twice, or one that stays released, shows.
	handing := partitionsMoving(before, after, "n1", "n3")
	eventually(t, 10*time.Second, fmt.Sprintf("n1's %d partitions moving to n3 acknowledged", handing), func() bool {
		return n1.custodyStats().Given == int64(handing)
	})
	if n3.Keys() != len(moving) {
		t.Fatalf("n3 holds %d keys once n1's handovers are acknowledged, want the %d that moved", n3.Keys(), len(moving))
	}
	for _, k := range moving {
		st := got.get(k)
		if len(st) != 1 || st[0].Requests.Limit != 10 || st[0].Requests.Remaining != 4 {
			t.Errorf("%s handed on: released %+v, want once with 4 of 10 requests left", k, st)
		}
	}
	if n := got.keys(); n != len(moving) {
		t.Errorf("%d keys released, want the %d that moved", n, len(moving))
	}
}

// Held shows a key's status from the table, and nothing for a key the
// table does not hold; it changes nothing.
func TestHeld(t *testing.T) {
	nd := newNodes(t, 1, func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} })[0]
	admit(t, nd, "t:a", 3)
	for range 2 {
		st, ok := nd.Held("t:a")
		if !ok || st.Requests.Limit != 10 || st.Requests.Remaining != 7 {
			t.Fatalf("Held(t:a) = %+v, %v; want 7 of 10 left", st, ok)
		}
	}
	if _, ok := nd.Held("t:b"); ok || nd.Keys() != 1 {
		t.Fatalf("Held of a key never seen: %v, %d keys held; want false, 1", ok, nd.Keys())
	}
}
