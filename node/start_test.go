package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/limiter"
)

// started collects the answers Start hands to its done.
type startedAnswer struct {
	a   Answer
	err error
}

// TestStartForwardsWithoutWaiting: an acquire forwarded with Start gets
// its owner's answer through done, exactly as Do would: the owner's limit
// holds over calls made both ways. Start takes nothing it would not
// forward at once: a call decided here, one with a wait, one before the
// owner's connection is up.
func TestStartForwardsWithoutWaiting(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	c := newCluster(t, 2, limits, BatchConfig{}, noReplication, hotAt(-1))
	owner, other := c.nodes[0], c.nodes[1]
	key := c.keyOwnedBy(t, 0)
	acquire := Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	answers := make(chan startedAnswer, 20)
	done := func(a Answer, err error) { answers <- startedAnswer{a, err} }
	if other.Start(acquire, time.Second, done) {
		t.Fatal("started before any connection to the owner was up")
	}
	if a, err := other.Do(context.Background(), acquire); err != nil || !a.Decision.Allowed {
		t.Fatalf("Do: %+v %v", a.Decision, err)
	}
	if owner.Start(acquire, time.Second, done) {
		t.Fatal("started at the owner: Do decides it here")
	}
	waiting := acquire
	waiting.Req.Wait = time.Second
	if other.Start(waiting, time.Second, done) {
		t.Fatal("started a call with a wait")
	}
	const n = 12
	for i := range n {
		if !other.Start(acquire, time.Second, done) {
			t.Fatalf("call %d not started", i)
		}
	}
	allowed := 1 // Do's
	for range n {
		select {
		case r := <-answers:
			if r.err != nil || r.a.Owner != owner.Name() {
				t.Fatalf("answer %+v %v, want one decided by %s", r.a, r.err, owner.Name())
			}
			if r.a.Decision.Allowed {
				allowed++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a started call never answered")
		}
	}
	if allowed != 10 {
		t.Fatalf("%d of 13 admitted, want exactly the limit, 10", allowed)
	}
	select {
	case r := <-answers:
		t.Fatalf("an answer more than the calls started: %+v %v", r.a, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestStartedCallToAHungPeerFailsAsACallDoes: a started call unanswered
// after ProbeAfter is waited for as call waits: its owner probed, and
// declared unreachable (ErrPeerDown) one Liveness of silence later; done
// gets that, once, and no goroutine is left.
func TestStartedCallToAHungPeerFailsAsACallDoes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := startHungPeer(t)
	defer h.close()
	clk := &stepClock{}
	p := newTestPeerClient(h.ln.Addr().String(), clk.After)
	defer p.close()
	if _, err := p.connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	answers := make(chan startedAnswer, 2)
	if !p.start(&Call{Op: OpAcquire, Key: "t:acme"}, time.Hour, func(a Answer, err error) { answers <- startedAnswer{a, err} }) {
		t.Fatal("not started on a live connection")
	}
	eventually(t, "the call at the peer", func() bool { return h.calls.Load() == 1 })
	// At ProbeAfter (real time) the call escalates: its first check
	// pings, and arms the liveness check.
	if at := clk.next(t, 1); at != testLiveness {
		t.Fatalf("liveness check armed for %v, want Liveness %v", at, testLiveness)
	}
	eventually(t, "the ping at the peer", func() bool { return h.pings.Load() == 1 })
	select {
	case r := <-answers:
		t.Fatalf("answered before the liveness check: %v", r.err)
	default:
	}
	clk.Advance(testLiveness)
	select {
	case r := <-answers:
		if !errors.Is(r.err, ErrPeerDown) {
			t.Fatalf("started call to a hung peer: %v, want ErrPeerDown", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("started call still pending after Liveness")
	}
	select {
	case r := <-answers:
		t.Fatalf("answered twice: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestSliceDecidesFromASliceOrNot: Slice serves a forwarded key's acquire
// from this node's slice once the key is hot, as Do would, and otherwise
// decides nothing: not at the owner, not before a slice came, and the
// owner's count is as it was.
func TestSliceDecidesFromASliceOrNot(t *testing.T) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 30, Tokens: 1 << 40, Concurrency: 1 << 20}
	}
	c := newCluster(t, 2, limits, BatchConfig{}, noReplication)
	owner, other := c.nodes[0], c.nodes[1]
	key := c.keyOwnedBy(t, 0)
	acquire := Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}}
	if _, ok := owner.Slice(acquire); ok {
		t.Fatal("Slice decided at the owner")
	}
	if _, ok := other.Slice(acquire); ok {
		t.Fatal("Slice decided with no slice")
	}
	if st, _ := owner.Held(key); st.Requests.Limit-st.Requests.Remaining != 0 {
		t.Fatalf("the owner counts %d admissions after Slice declined, want 0", st.Requests.Limit-st.Requests.Remaining)
	}
	for range 40 { // about 20 a second for 2 s, forwarded: the key turns hot, and slices come
		if a, err := other.Do(context.Background(), acquire); err != nil || !a.Decision.Allowed {
			t.Fatalf("acquire: %+v %v", a.Decision, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A slice may be between two buckets: Do asks for the next, as the
	// router's goroutine path would.
	for try := 0; ; try++ {
		before := other.stats.allotted.Load()
		if a, ok := other.Slice(acquire); ok {
			if !a.Decision.Allowed || a.Owner != owner.Name() || other.stats.allotted.Load() != before+1 {
				t.Fatalf("from a slice: %+v owner %s, %d served from slices (%d before)", a.Decision, a.Owner, other.stats.allotted.Load(), before)
			}
			break
		}
		if try == 20 {
			t.Fatal("no acquire served by Slice from a hot key's slices")
		}
		if _, err := other.Do(context.Background(), acquire); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
