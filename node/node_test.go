package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"reflect"
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

func TestCallRoundTrip(t *testing.T) {
	c := Call{Op: OpSettle, Key: "t:acme", Lease: 1 << 40, Hops: 1,
		Req:   limiter.Request{PromptTokens: 1200, MaxTokens: 512, Reserve: 7, Priority: limiter.Batch, Wait: 3 * time.Second},
		Usage: limiter.Usage{PromptTokens: 1100, CompletionTokens: 20}, From: "127.0.0.1:7001", State: []byte{1, 2, 3}}
	got, err := DecodeCall(AppendCall(nil, &c))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("call round trip: %+v %v", got, err)
	}
	a := Answer{OK: true, Owner: "n2", State: []byte("snapshot"), Expires: time.Unix(0, 1_700_000_000_123_456_789),
		Decision: limiter.Decision{Allowed: true, Ticket: 3, Lease: 9, Reserved: 1712, Reason: limiter.Tokens, RetryAfter: 1500 * time.Millisecond,
			Status: limiter.Status{Requests: limiter.DimStatus{Limit: 60, Remaining: 59, Reset: time.Minute}}}}
	gotA, err := DecodeAnswer(AppendAnswer(nil, &a))
	if err != nil || !gotA.Expires.Equal(a.Expires) {
		t.Fatalf("answer round trip: %+v %v", gotA, err)
	}
	gotA.Expires = a.Expires
	if !reflect.DeepEqual(gotA, a) {
		t.Fatalf("answer round trip: %+v, want %+v", gotA, a)
	}
	// A charge carries its debt; other ops do not encode one.
	ch := Call{Op: OpCharge, Key: "t:acme", Charge: Charge{Requests: 3, Tokens: 1 << 41, At: time.Unix(0, 1_700_000_000_987_654_321)}}
	gotC, err := DecodeCall(AppendCall(nil, &ch))
	if err != nil || !reflect.DeepEqual(gotC, ch) || gotC.Op.String() != "charge" {
		t.Fatalf("charge round trip: %+v %v, want %+v", gotC, err, ch)
	}
	if b := AppendCall(nil, &Call{Op: OpAcquire, Key: "k", Charge: ch.Charge}); !bytes.Equal(b, AppendCall(nil, &Call{Op: OpAcquire, Key: "k"})) {
		t.Fatal("a non-charge call encodes a charge")
	}
	if full := AppendCall(nil, &ch); func() bool { _, err := DecodeCall(full[:len(full)-1]); return err == nil }() {
		t.Fatal("truncated charge decoded")
	}
	al := Call{Op: OpAllot, Key: "p:pool", Count: maxAllot, Req: limiter.Request{Reserve: 4096}}
	if gotAl, err := DecodeCall(AppendCall(nil, &al)); err != nil || !reflect.DeepEqual(gotAl, al) || gotAl.Op.String() != "allot" {
		t.Fatalf("allot round trip: %+v %v, want %+v", gotAl, err, al)
	}
	al.Count = maxAllot + 1
	if _, err := DecodeCall(AppendCall(nil, &al)); err == nil {
		t.Fatalf("an allot of %d admissions decoded; at most %d", al.Count, maxAllot)
	}
	if _, err := DecodeCall([]byte{byte(OpAcquire)}); err == nil {
		t.Fatal("truncated call decoded")
	}
	if _, err := DecodeCall(append(AppendCall(nil, &c), 0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
}

func FuzzDecodeCall(f *testing.F) {
	f.Add(AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a", Req: limiter.Request{PromptTokens: 5}}))
	f.Add(AppendCall(nil, &Call{Op: OpAllot, Key: "p:a", Count: 7, Req: limiter.Request{Reserve: 20}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCall(b)
		if err != nil {
			return
		}
		again, err := DecodeCall(AppendCall(nil, &c))
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("re-encode of %+v: %+v %v", c, again, err)
		}
	})
}

func FuzzDecodeItems(f *testing.F) {
	f.Add(encodeFrame(nil, frameCalls, []item{{id: 1, body: []byte("x")}})[5:])
	f.Add(encodeFrame(nil, frameCalls, []item{{id: 1 << 40, status: 3, body: []byte("abc")}, {id: 7}, {id: 0, status: 255, body: []byte{0, 1}}})[5:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever decodes re-encodes to a frame that decodes to the same items.
		if items, err := decodeItems(b, nil); err == nil {
			checkItemsRoundTrip(t, items)
		}
		// Items built from the input (ids, statuses and bodies of every
		// length, empty ones included) survive encodeFrame and decodeItems.
		var items []item
		for i, rest := 0, b; len(rest) > 0; i++ {
			n := int(rest[0]) % 8
			if n > len(rest)-1 {
				n = len(rest) - 1
			}
			items = append(items, item{id: uint64(rest[0]) << (i % 57), status: rest[0] ^ byte(i), body: rest[1 : 1+n]})
			rest = rest[1+n:]
		}
		checkItemsRoundTrip(t, items)
	})
}

// checkItemsRoundTrip encodes items in a frame and checks that the frame's
// header is right and that decodeItems gives back the same ids, statuses and
// bodies, in order.
func checkItemsRoundTrip(t *testing.T, items []item) {
	t.Helper()
	frame := encodeFrame(nil, frameCalls, items)
	if n := binary.BigEndian.Uint32(frame[:4]); int(n) != len(frame)-4 || frame[4] != frameCalls {
		t.Fatalf("frame header: length %d kind %d, want %d %d", n, frame[4], len(frame)-4, frameCalls)
	}
	got, err := decodeItems(frame[5:], nil)
	if err != nil {
		t.Fatalf("decode of re-encoded %d items: %v", len(items), err)
	}
	if len(got) != len(items) {
		t.Fatalf("%d items after the round trip, want %d", len(got), len(items))
	}
	for i := range items {
		if got[i].id != items[i].id || got[i].status != items[i].status || !bytes.Equal(got[i].body, items[i].body) {
			t.Fatalf("item %d: %+v after the round trip, want %+v", i, got[i], items[i])
		}
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
	deadline := time.Now().Add(5 * time.Second)
	for c.nodes[0].Waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("waiter never queued at the owner")
		}
		time.Sleep(time.Millisecond)
	}
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

func waitWaiting(t *testing.T, nd *Node, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for nd.Waiting() != want {
		if time.Now().After(deadline) {
			t.Fatalf("waiting %d, want %d", nd.Waiting(), want)
		}
		time.Sleep(time.Millisecond)
	}
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := owner.Do(bg, Call{Op: OpAcquire, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if a.Decision.Allowed {
			break // the slot came back
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned admission still holds the slot: %+v", a.Decision)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
