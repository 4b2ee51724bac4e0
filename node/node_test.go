package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// eventually waits for cond to hold, polling the node's own state every
// millisecond, and fails the test naming what it waited for if cond does not
// hold within timeout. It is how a test waits for an event it has no
// channel for: never a bare sleep.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond) // the poll interval: the deadline bounds the loop
	}
}

// cluster is n in-process nodes sharing one hand-built ring.
type cluster struct {
	nodes []*Node
	ring  *ring.Ring
}

func newCluster(t testing.TB, n int, limits func(string) limiter.Limits, batch BatchConfig, opts ...func(*Config)) *cluster {
	t.Helper()
	c := &cluster{}
	var members []ring.Member
	for i := range n {
		cfg := Config{Name: fmt.Sprintf("n%d", i+1), LimitsFor: limits, Batch: batch}
		withTestSecrets(&cfg)
		for _, o := range opts {
			o(&cfg)
		}
		nd, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nd.Close() })
		c.nodes = append(c.nodes, nd)
		members = append(members, ring.Member{Name: nd.Name(), Peer: nd.PeerAddr()})
	}
	r, err := ring.New(ring.Config{}, members)
	if err != nil {
		t.Fatal(err)
	}
	c.ring = r
	for _, nd := range c.nodes {
		nd.SetRing(r)
	}
	return c
}

// keyOwnedBy returns a key whose owner is node i.
func (c *cluster) keyOwnedBy(t testing.TB, i int) string {
	for k := range 10000 {
		key := fmt.Sprintf("t:tenant-%d", k)
		if m, _ := c.ring.Owner(key); m.Name == c.nodes[i].Name() {
			return key
		}
	}
	t.Fatal("no key found")
	return ""
}

// Forwarded acquires are decided exactly at the owner, whoever writes the
// frames: the calling goroutines (opportunistic batching, with frames of
// any size or of one call) or a writer goroutine that lingers.
func TestForwardedDecisionsAreExact(t *testing.T) {
	for _, batch := range []BatchConfig{{}, {Max: 1}, {Wait: 100 * time.Microsecond}} {
		t.Run(fmt.Sprintf("wait=%v,max=%d", batch.Wait, batch.Max), func(t *testing.T) { testForwardedDecisionsAreExact(t, batch) })
	}
}

func testForwardedDecisionsAreExact(t *testing.T, batch BatchConfig) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 300, Tokens: 1 << 40, Concurrency: 1 << 20}
	}
	c := newCluster(t, 3, limits, batch)
	key := c.keyOwnedBy(t, 0)
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	for i := range 900 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd := c.nodes[i%3]
			a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}})
			if err != nil {
				t.Error(err)
				return
			}
			if a.Owner != "n1" {
				t.Errorf("decided by %s, want the owner n1", a.Owner)
			}
			if a.Decision.Allowed {
				allowed.Add(1)
			} else {
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 300 || refused.Load() != 600 {
		t.Fatalf("allowed %d refused %d, want exactly 300 and 600", allowed.Load(), refused.Load())
	}
	if got := c.nodes[1].Keys() + c.nodes[2].Keys(); got != 0 {
		t.Fatalf("non-owners hold %d keys", got)
	}
}

func TestForwardedSettleAndWait(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Concurrency: 1} }
	c := newCluster(t, 2, limits, BatchConfig{})
	key := c.keyOwnedBy(t, 0)
	via := c.nodes[1]
	ctx := context.Background()
	first, err := via.Do(ctx, Call{Op: OpAcquire, Key: key})
	if err != nil || !first.Decision.Allowed {
		t.Fatalf("first: %+v %v", first, err)
	}
	// A waiter parked at the owner must not hold up other calls on the
	// same connection.
	done := make(chan Answer, 1)
	go func() {
		a, err := via.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{Wait: 10 * time.Second}})
		if err != nil {
			t.Error(err)
		}
		done <- a
	}()
	waitWaiting(t, c.nodes[0], 1) // the waiter queued at the owner
	other := c.keyOwnedBy(t, 0) + "-other"
	if a, err := via.Do(ctx, Call{Op: OpStatus, Key: other}); err != nil || a.Owner == "" {
		t.Fatalf("status behind a waiter: %+v %v", a, err)
	}
	if a, err := via.Do(ctx, Call{Op: OpSettle, Key: key, Lease: first.Decision.Lease, Usage: limiter.Usage{PromptTokens: 1}}); err != nil || !a.OK {
		t.Fatalf("settle: %+v %v", a, err)
	}
	if a := <-done; !a.Decision.Allowed {
		t.Fatalf("waiter not admitted after settle: %+v", a)
	}
}

func TestUnreachableOwnerFailsFast(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10} }
	nd, err := New(Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there any more: connections are refused
	r, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1", Peer: nd.PeerAddr()}, {Name: "n2", Peer: dead}})
	if err != nil {
		t.Fatal(err)
	}
	nd.SetRing(r)
	var key string
	for i := 0; ; i++ {
		key = fmt.Sprintf("t:%d", i)
		if m, _ := r.Owner(key); m.Name == "n2" {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = nd.Do(ctx, Call{Op: OpAcquire, Key: key})
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("err = %v, want ErrPeerDown", err)
	}
	if ctx.Err() != nil {
		t.Fatal("a refused connection waited for the deadline")
	}
}

func TestHopLimit(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{} }
	nodes := newNodes(t, 2, limits)
	// Give the two nodes contradicting rings from their first view on: each
	// thinks the other owns everything, so neither ever takes custody (with
	// a shared ring first, custody would be somewhere, bouncing between
	// them, and a call could find it). The call must stop after MaxHops
	// instead of looping.
	r1, _ := ring.New(ring.Config{}, []ring.Member{{Name: "n2", Peer: nodes[1].PeerAddr()}})
	r2, _ := ring.New(ring.Config{}, []ring.Member{{Name: "n1", Peer: nodes[0].PeerAddr()}})
	nodes[0].SetRing(r1)
	nodes[1].SetRing(r2)
	_, err := nodes[0].Do(context.Background(), Call{Op: OpStatus, Key: "t:x"})
	if err == nil || !strings.Contains(err.Error(), ErrNoOwner.Error()) {
		t.Fatalf("err = %v, want the hop limit", err)
	}
}

func TestWithdrawnHeadUnblocksQueue(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Tokens: 1000} }
	c := newCluster(t, 1, limits, BatchConfig{})
	nd := c.nodes[0]
	bg := context.Background()
	if a, _ := nd.Do(bg, Call{Op: OpAcquire, Key: "t:k", Req: limiter.Request{Reserve: 500}}); !a.Decision.Allowed {
		t.Fatalf("first: %+v", a)
	}
	// The head needs 900 tokens and cannot fit; the second needs 10 and
	// could, but waits behind the head (no barging).
	headCtx, cancelHead := context.WithCancel(bg)
	headDone := make(chan error, 1)
	go func() {
		_, err := nd.Do(headCtx, Call{Op: OpAcquire, Key: "t:k", Req: limiter.Request{Reserve: 900, Wait: time.Minute}})
		headDone <- err
	}()
	waitWaiting(t, nd, 1)
	second := make(chan Answer, 1)
	go func() {
		a, _ := nd.Do(bg, Call{Op: OpAcquire, Key: "t:k", Req: limiter.Request{Reserve: 10, Wait: time.Minute}})
		second <- a
	}()
	waitWaiting(t, nd, 2)
	cancelHead() // the head's client goes away
	if err := <-headDone; err == nil {
		t.Fatal("withdrawn head got no error")
	}
	select {
	case a := <-second:
		if !a.Decision.Allowed || a.Decision.Reserved != 10 {
			t.Fatalf("second: %+v", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queue stayed blocked after its head withdrew")
	}
}

// waitWaiting waits until want calls are queued at nd.
func waitWaiting(t *testing.T, nd *Node, want int) {
	t.Helper()
	eventually(t, 5*time.Second, fmt.Sprintf("%d calls waiting at %s", want, nd.Name()), func() bool { return nd.Waiting() == want })
}

// A forward whose caller gave up (timeout, then fallback) must not leave an
// admission at the owner: when the owner admits it after all, the
// forwarding node cancels it there.
func TestAbandonedForwardIsCancelledAtOwner(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Concurrency: 1} }
	c := newCluster(t, 2, limits, BatchConfig{})
	key := c.keyOwnedBy(t, 0)
	owner, via := c.nodes[0], c.nodes[1]
	bg := context.Background()
	held, err := owner.Do(bg, Call{Op: OpAcquire, Key: key})
	if err != nil || !held.Decision.Allowed {
		t.Fatalf("hold: %+v %v", held, err)
	}
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	if _, err := via.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{Wait: time.Minute}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("forward: err %v, want the caller's deadline", err)
	}
	// The owner still has the waiter; freeing the slot admits it, and the
	// forwarding node, whose caller is gone, cancels that admission.
	if a, err := owner.Do(bg, Call{Op: OpRelease, Key: key, Lease: held.Decision.Lease}); err != nil || !a.OK {
		t.Fatalf("release: %+v %v", a, err)
	}
	eventually(t, 10*time.Second, "the abandoned admission cancelled at the owner: its slot free", func() bool {
		st, err := owner.Do(bg, Call{Op: OpStatus, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return st.Decision.Status.Concurrency.Remaining == 1
	})
	if a, err := owner.Do(bg, Call{Op: OpAcquire, Key: key}); err != nil || !a.Decision.Allowed {
		t.Fatalf("the abandoned admission still holds the slot: %+v %v", a.Decision, err)
	}
}
