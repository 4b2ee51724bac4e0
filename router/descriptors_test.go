package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// recording is a Cluster that records every call's op and key before
// handing it to its node.
type recording struct {
	*node.Node
	mu    sync.Mutex
	calls []string
}

func (c *recording) Do(ctx context.Context, call node.Call) (node.Answer, error) {
	c.mu.Lock()
	c.calls = append(c.calls, call.Op.String()+" "+call.Key)
	c.mu.Unlock()
	return c.Node.Do(ctx, call)
}

// took returns the calls recorded since the last took.
func (c *recording) took() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// hitRouter is a router over one node whose descriptor keys d:a and d:b
// admit 10 and 1 requests a minute.
func hitRouter(t *testing.T) (*Router, *recording) {
	t.Helper()
	clock := newFakeClock()
	limits := func(key string) limiter.Limits {
		switch key {
		case "d:a":
			return limiter.Limits{Requests: 10, Window: time.Minute, LeaseTTL: time.Second}
		case "d:b":
			return limiter.Limits{Requests: 1, Window: time.Minute, LeaseTTL: time.Second}
		}
		return limiter.Limits{}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := &recording{Node: n}
	r, err := New(c, Config{Limits: limits, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, c
}

func acquireHit(key string) Hit {
	return Hit{Op: node.OpAcquire, Key: key, Req: limiter.Request{Hits: 1}}
}

// TestDecideHitsAllOrNothing: the acquires of a request are reserved in
// the order of their keys whatever the request's order (so that two
// requests never take one key each and refuse each other), results come
// in the request's order, and a refusal cancels what was reserved, its
// status read again once cancelled; checks run last.
func TestDecideHitsAllOrNothing(t *testing.T) {
	r, c := hitRouter(t)
	ctx := t.Context()
	out := make([]HitResult, 3)
	refused, err := r.DecideHits(ctx, []Hit{acquireHit("d:b"), acquireHit("d:a"), {Op: node.OpStatus, Key: "d:a"}}, true, out)
	if err != nil || refused {
		t.Fatalf("first: refused %v, %v", refused, err)
	}
	if got, want := c.took(), []string{"acquire d:a", "acquire d:b", "status d:a"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if !out[0].Held || !out[1].Held || out[0].Status.Requests.Remaining != 0 || out[1].Status.Requests.Remaining != 9 || out[2].Status.Requests.Remaining != 9 {
		t.Errorf("first: results %+v", out)
	}

	refused, err = r.DecideHits(ctx, []Hit{acquireHit("d:b"), acquireHit("d:a")}, true, out)
	if err != nil || !refused {
		t.Fatalf("second: refused %v, %v; want refused", refused, err)
	}
	if got, want := c.took(), []string{"acquire d:a", "acquire d:b", "cancel d:a", "status d:a"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if !out[0].Refused || out[0].Reason != "requests" || out[1].Held || out[1].Refused || out[1].Status.Requests.Remaining != 9 {
		t.Errorf("second: results %+v", out[:2])
	}

	// Keys not asked after the refusal only read their status.
	refused, err = r.DecideHits(ctx, []Hit{acquireHit("d:a"), acquireHit("d:b"), acquireHit("d:c")}, true, out)
	if err != nil || !refused {
		t.Fatalf("third: refused %v, %v; want refused", refused, err)
	}
	if got, want := c.took(), []string{"acquire d:a", "acquire d:b", "cancel d:a", "status d:a", "status d:c"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

// TestDecideHitsEachOnItsOwn: without all or nothing, a refusal leaves the
// others charged; a shadow hit's refusal refuses nothing.
func TestDecideHitsEachOnItsOwn(t *testing.T) {
	r, c := hitRouter(t)
	out := make([]HitResult, 2)
	if _, err := r.DecideHits(t.Context(), []Hit{acquireHit("d:b")}, true, out); err != nil {
		t.Fatal(err)
	}
	refused, err := r.DecideHits(t.Context(), []Hit{acquireHit("d:b"), acquireHit("d:a")}, false, out)
	if err != nil || !refused || !out[0].Refused || !out[1].Held || out[1].Status.Requests.Remaining != 9 {
		t.Errorf("per descriptor: refused %v %v, results %+v", refused, err, out)
	}
	shadow := acquireHit("d:b")
	shadow.Shadow = true
	refused, err = r.DecideHits(t.Context(), []Hit{shadow, acquireHit("d:a")}, true, out)
	if err != nil || refused || !out[0].Refused || !out[1].Held || out[1].Status.Requests.Remaining != 8 {
		t.Errorf("shadow: refused %v %v, results %+v", refused, err, out)
	}
	c.took()
}

// TestDecideHitsBounds: more than MaxHits hits is an error, and nothing
// is asked.
func TestDecideHitsBounds(t *testing.T) {
	r, c := hitRouter(t)
	hits := make([]Hit, MaxHits+1)
	for i := range hits {
		hits[i] = acquireHit(fmt.Sprintf("d:%d", i))
	}
	if _, err := r.DecideHits(t.Context(), hits, true, make([]HitResult, len(hits))); !errors.Is(err, ErrTooManyHits) {
		t.Errorf("%d hits: %v, want ErrTooManyHits", len(hits), err)
	}
	if calls := c.took(); len(calls) != 0 {
		t.Errorf("calls made: %q", calls)
	}
	if kind, name, _ := SplitKey("d:3:llm/6:tenant=4:acme"); kind != KeyDescriptor || name != "3:llm/6:tenant=4:acme" {
		t.Errorf("SplitKey of a descriptor key: %v %q", kind, name)
	}
	if l := (Side{Key: "d:x", Kind: KeyDescriptor, Name: "x"}).Label(); l != "descriptor:x" {
		t.Errorf("Label %q", l)
	}
}
