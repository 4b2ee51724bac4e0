package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Allotments through nodes: a hot key's slices asked for, served, refilled
// and given back over the peer protocol. The holder's bookkeeping alone is
// tested in node/allot.

func hotAt(rate int) func(*Config) { return func(c *Config) { c.HotKeyRate = rate } }

// hammer sends acquires for key through every node of c at once, workers
// per node, until each has sent perNode; it returns how many were
// admitted.
func hammer(t *testing.T, c *cluster, key string, workers, perNode int) (allowed int64) {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		for range workers {
			wg.Go(func() {
				for range perNode / workers {
					a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
					if err != nil {
						t.Error(err)
						return
					}
					if a.Decision.Allowed {
						n.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	return n.Load()
}

// warm sends key's acquires through every node at about 150 a second
// each for 400 ms, over the hot-key rate: the key is hot everywhere when
// the hammer starts. It returns how many were admitted.
func warm(t *testing.T, c *cluster, key string) (allowed int64) {
	t.Helper()
	for range 60 {
		for _, nd := range c.nodes {
			a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
			if err != nil {
				t.Fatal(err)
			}
			if a.Decision.Allowed {
				allowed++
			}
		}
		time.Sleep(5 * time.Millisecond) // pacing: the rate is what makes the key hot
	}
	return allowed
}

// drain admits key through each node in turn until all three refuse; it
// returns how many it admitted.
func drain(t *testing.T, c *cluster, key string) (allowed int64) {
	t.Helper()
	for refusedBy := 0; refusedBy < len(c.nodes); {
		refusedBy = 0
		for _, nd := range c.nodes {
			a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
			if err != nil {
				t.Fatal(err)
			}
			if a.Decision.Allowed {
				allowed++
			} else {
				refusedBy++
			}
		}
	}
	return allowed
}

// allotted counts the acquires the nodes of c served from slices.
func (c *cluster) allotted() (n int64) {
	for _, nd := range c.nodes {
		n += nd.counts.allotted.Load()
	}
	return n
}

// A hot key sent through every node is decided where its requests arrive,
// from slices its owner allotted, and its limit is admitted exactly: every
// admission handed out was the owner's, and what was allotted but not
// handed out goes back to the owner when its bucket ends.
func TestHotKeyThroughEveryNodeIsExact(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits limiter.Limits
		want   int64 // admissions the limit allows
		left   func(limiter.Status) int64
	}{
		{"requests", limiter.Limits{Requests: 3000, Tokens: 1 << 40, Concurrency: 1 << 20}, 3000,
			func(s limiter.Status) int64 { return s.Requests.Remaining }},
		{"tokens", limiter.Limits{Requests: 1 << 40, Tokens: 20 * 2000, Concurrency: 1 << 20}, 2000, // 20 tokens a request
			func(s limiter.Status) int64 { return s.Tokens.Remaining / 20 }},
		{"concurrency", limiter.Limits{Requests: 1 << 40, Tokens: 1 << 40, Concurrency: 700}, 700, // leases never completed
			func(s limiter.Status) int64 { return s.Concurrency.Remaining }},
		{"not reached", limiter.Limits{Requests: 100_000, Tokens: 1 << 40, Concurrency: 1 << 20}, 100_000,
			func(s limiter.Status) int64 { return s.Requests.Remaining }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, func(string) limiter.Limits { return tc.limits }, BatchConfig{}, hotAt(50), noReplication)
			key := c.keyOwnedBy(t, 0)
			during := warm(t, c, key) + hammer(t, c, key, 8, 2400)
			if during > tc.want {
				t.Fatalf("%d admitted while hammering, over the limit of %d", during, tc.want)
			}
			if c.allotted() == 0 {
				t.Fatal("no acquire was served from a slice: the key never became hot")
			}
			// Slices end with their bucket (1 s): what they held and did
			// not hand out goes back to the owner, by the next sweep.
			left := func() int64 {
				st, err := c.nodes[0].Do(context.Background(), Call{Op: OpStatus, Key: key})
				if err != nil {
					t.Fatal(err)
				}
				return tc.left(st.Decision.Status)
			}
			eventually(t, 10*time.Second, "the slices' unused admissions back at the owner", func() bool { return left() == tc.want-during })
			if got := left(); got != tc.want-during {
				t.Fatalf("the owner has %d left after %d admitted of %d, want exactly %d: allotted admissions not handed out were not given back (%d returned)",
					got, during, tc.want, tc.want-during, c.nodes[1].counts.allotReturned.Load()+c.nodes[2].counts.allotReturned.Load())
			}
			if tc.want-during > 10_000 {
				return
			}
			after := drain(t, c, key)
			if got := during + after; got != tc.want {
				t.Fatalf("%d admitted in all (%d hammering, %d after), want exactly %d", got, during, after, tc.want)
			}
			t.Logf("%d admitted, %d of them from slices", tc.want, c.allotted())
		})
	}
}

// With the shipped HotKeyRate, a key that a node forwards 20 acquires a
// second for (warm, far from hot) is decided at that node from slices:
// only its first acquires, and those that find a slice being asked for,
// are forwarded.
func TestWarmKeyIsServedFromSlicesByDefault(t *testing.T) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 30, Tokens: 1 << 40, Concurrency: 1 << 20}
	}
	c := newCluster(t, 2, limits, BatchConfig{}, noReplication)
	holder := c.nodes[1]
	key := c.keyOwnedBy(t, 0)
	const n = 40
	for range n { // about 20 a second for 2 s
		a, err := holder.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
		if err != nil || !a.Decision.Allowed {
			t.Fatalf("acquire: %+v %v", a.Decision, err)
		}
		time.Sleep(50 * time.Millisecond) // pacing: the rate under test (20 a second)
	}
	served := holder.counts.allotted.Load()
	if served < n/2 || served > n {
		t.Fatalf("%d of %d acquires served from slices, want at least half", served, n)
	}
	t.Logf("%d of %d acquires served from slices", served, n)
}

// A slice serves only while its owner is reachable: once the owner's
// connection is down (it crashed), its admissions are left alone and the
// acquire is forwarded, and fails over, like any other; the caller falls
// back. (Served from the crashed owner's slice, an admission the owner had
// not replicated yet would be counted nowhere.)
func TestSliceOfAnUnreachableOwnerIsNotUsed(t *testing.T) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 30, Tokens: 1 << 40, Concurrency: 1 << 20}
	}
	c := newCluster(t, 2, limits, BatchConfig{}, hotAt(50), noReplication)
	owner, holder := c.nodes[0], c.nodes[1]
	key := c.keyOwnedBy(t, 0)
	acquire := func() (Answer, error) {
		return holder.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
	}
	deadline := time.Now().Add(10 * time.Second)
	for holder.counts.allotted.Load() == 0 && time.Now().Before(deadline) {
		if _, err := acquire(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // pacing of the load until the key is hot; the deadline bounds the loop
	}
	if holder.counts.allotted.Load() == 0 {
		t.Fatal("the holder never served from a slice")
	}
	owner.Close()
	eventually(t, 5*time.Second, "the holder's connection to the owner down", func() bool { return !holder.peers.Up(owner.PeerAddr()) })
	served := holder.counts.allotted.Load()
	a, err := acquire()
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("acquire after the owner crashed: %+v, %v; want ErrPeerDown (the caller falls back)", a.Decision, err)
	}
	if got := holder.counts.allotted.Load(); got != served {
		t.Fatalf("%d acquires served from the crashed owner's slice", got-served)
	}
}

// A node that leaves gracefully gives its slices back at once: the owner
// has exactly what was not admitted, without waiting for the slices'
// bucket to end, and the leaving node asks for no new one.
func TestDrainGivesSlicesBack(t *testing.T) {
	const limit = 1_000_000
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: limit, Tokens: 1 << 40, Concurrency: 1 << 20}
	}
	c := newCluster(t, 3, limits, BatchConfig{}, hotAt(50), noReplication)
	owner, holder := c.nodes[0], c.nodes[1]
	key := c.keyOwnedBy(t, 0)
	admitted := 0
	for holder.counts.allotted.Load() == 0 && admitted < 5000 {
		a, err := holder.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
		if err != nil || !a.Decision.Allowed {
			t.Fatalf("acquire: %+v %v", a.Decision, err)
		}
		admitted++
		time.Sleep(time.Millisecond) // pacing of the load until the key is hot; the count bounds the loop
	}
	if holder.counts.allotted.Load() == 0 {
		t.Fatal("the holder never served from a slice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := holder.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := owner.Do(context.Background(), Call{Op: OpStatus, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if left := st.Decision.Status.Requests.Remaining; left != limit-int64(admitted) {
		t.Fatalf("after the holder drained, the owner has %d left of %d after %d admitted; want exactly %d (its slices back)",
			left, limit, admitted, limit-int64(admitted))
	}
}

// A hot key keeps being decided from slices across its owner's bucket
// ends: the holder asks for each next slice as the bucket ends (refilling),
// not at the key's first request after it, which it would forward. The
// buckets here are 100 ms (a 6 s window), and node 2 sends a request every
// 20 ms for 2 s once the key is hot: 20 bucket ends. Asked for only at a
// forward, each bucket's first request would go to the owner: 20 forwards
// at least.
func TestHotKeyIsNotForwardedAtItsBucketEnds(t *testing.T) {
	limits := limiter.Limits{Requests: 1 << 40, Tokens: 1 << 40, Concurrency: 1 << 20, Window: 6 * time.Second}
	c := newCluster(t, 3, func(string) limiter.Limits { return limits }, BatchConfig{}, hotAt(5), noReplication)
	key := c.keyOwnedBy(t, 0)
	nd := c.nodes[1]
	send := func(n int) {
		t.Helper()
		for range n {
			a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 10, MaxTokens: 10}})
			if err != nil || !a.Decision.Allowed {
				t.Fatalf("acquire: allowed %v, err %v", a.Decision.Allowed, err)
			}
			time.Sleep(20 * time.Millisecond) // pacing: a request every 20 ms across the bucket ends under test
		}
	}
	send(25) // half a second: hot, and served from slices
	if nd.counts.allotted.Load() == 0 {
		t.Fatal("no acquire was served from a slice: the key never became hot")
	}
	const calls = 100
	before := nd.counts.allotted.Load()
	send(calls)
	forwarded := calls - (nd.counts.allotted.Load() - before)
	t.Logf("%d of %d acquires forwarded across about 20 bucket ends", forwarded, calls)
	if forwarded > 12 {
		t.Fatalf("%d of %d acquires of a hot key forwarded across about 20 bucket ends, want at most 12: its next slices were not asked for as its buckets ended", forwarded, calls)
	}
}
