package node

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
	"pgregory.net/rapid"
)

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
		time.Sleep(5 * time.Millisecond)
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
			deadline := time.Now().Add(10 * time.Second)
			for left() != tc.want-during && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
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
		time.Sleep(50 * time.Millisecond)
	}
	served := holder.counts.allotted.Load()
	if served < n/2 || served > n {
		t.Fatalf("%d of %d acquires served from slices, want at least half", served, n)
	}
	t.Logf("%d of %d acquires served from slices", served, n)
}

// The holder's rule, as a state machine against a model: every admission
// allotted is handed out at most once and only before its slice's
// deadline, or returned once the deadline passed; none is lost.
func TestSliceHandsOutEachAdmissionOnceBeforeItsDeadline(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		al := newAllotments(1)
		key := "k"
		now := time.Unix(1000, 0)
		next := uint64(1)
		outstanding := map[uint64]time.Time{} // allotted, not handed out nor returned → its deadline
		handed := map[uint64]bool{}
		call := func(tokens int64) *Call {
			return &Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: tokens, MaxTokens: 1}}
		}
		returned := func(ids []uint64) {
			for _, id := range ids {
				dl, ok := outstanding[id]
				if !ok {
					t.Fatalf("admission %d returned but not outstanding", id)
				}
				if now.Before(dl) {
					t.Fatalf("admission %d returned before its deadline", id)
				}
				delete(outstanding, id)
			}
		}
		al.forwarded(call(5), now)
		for step := range 60 {
			switch rapid.IntRange(0, 3).Draw(t, "action") {
			case 0: // a grant arrives
				sh := al.shard(key)
				if sh.keys[key] == nil {
					sh.keys[key] = &hotKey{since: now}
				}
				sh.keys[key].asking = true // granted answers an ask
				sh.mu.Unlock()
				n := rapid.IntRange(0, 5).Draw(t, "granted")
				valid := time.Duration(rapid.IntRange(1, 1000).Draw(t, "valid ms")) * time.Millisecond
				ids := make([]uint64, n)
				for i := range ids {
					ids[i], next = next, next+1
					outstanding[ids[i]] = now.Add(valid)
				}
				a := Answer{OK: n > 0, Owner: "owner", State: appendGrant(nil, valid, ids)}
				al.granted(key, "owner", now, now, 8, a, nil)
			case 1: // a request
				tokens := int64(rapid.IntRange(1, 10).Draw(t, "tokens"))
				a, ok, expired, _ := al.take(call(tokens), now, "owner")
				returned(expired)
				if ok {
					id := a.Decision.Lease
					dl, out := outstanding[id]
					switch {
					case handed[id] || !out:
						t.Fatalf("step %d: admission %d handed out twice or never allotted", step, id)
					case !now.Before(dl):
						t.Fatalf("step %d: admission %d handed out at its deadline or after", step, id)
					case tokens+1 > 8:
						t.Fatalf("step %d: a request of %d tokens served from a slice reserving 8", step, tokens+1)
					}
					handed[id] = true
					delete(outstanding, id)
				}
			case 2: // time passes
				now = now.Add(time.Duration(rapid.IntRange(1, 600).Draw(t, "ms")) * time.Millisecond)
			case 3: // the sweep
				for _, ids := range al.sweep(now, time.Hour) {
					returned(ids)
				}
			}
		}
		now = now.Add(2 * time.Second) // past every deadline
		for _, ids := range al.sweep(now, time.Hour) {
			returned(ids)
		}
		if len(outstanding) != 0 {
			t.Fatalf("%d admissions neither handed out nor returned: %v", len(outstanding), outstanding)
		}
	})
}

// A key whose slice ended with its bucket while it was being served is
// still hot (the sweep keeps it): its next forward asks for the next slice at once, without
// counting forwards again for a tenth of a second (every key's buckets end
// together, so that pause would forward every hot key at once). A key
// that slowed below the rate since its last ask is not asked for again.
func TestKeyStaysHotAcrossItsBucketEnd(t *testing.T) {
	call := &Call{Op: OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	for _, tc := range []struct {
		rate    int
		wantAsk bool
	}{{rate: 5, wantAsk: true}, {rate: 50, wantAsk: false}} {
		al := newAllotments(tc.rate)
		t0 := time.Unix(1000, 0)
		var now time.Time
		for i := range 6 {
			now = t0.Add(time.Duration(20*i) * time.Millisecond)
			if ask := al.forwarded(call, now); ask != (i == 5) {
				t.Fatalf("rate %d: forward %d of 6 in 100 ms: ask %v", tc.rate, i+1, ask)
			}
		}
		c := al.ask("k", now)
		al.granted("k", "owner", now, now, c.Req.Reserve, Answer{OK: true, Owner: "owner", State: appendGrant(nil, 900*time.Millisecond, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})}, nil)
		for i := range 8 { // 8 served by 950 ms
			now = t0.Add(time.Duration(200+100*i) * time.Millisecond)
			if _, ok, _, _ := al.take(call, now, "owner"); !ok {
				t.Fatalf("rate %d: acquire %d at %v not served from the slice", tc.rate, i, now.Sub(t0))
			}
		}
		now = t0.Add(1050 * time.Millisecond) // the slice ended at 1 s
		_, ok, expired, _ := al.take(call, now, "owner")
		if ok || len(expired) != 2 {
			t.Fatalf("rate %d: after the deadline: served %v, %d returned; want not served, 2 returned", tc.rate, ok, len(expired))
		}
		al.sweep(now, time.Hour) // a sweep between the slice's end and the next forward keeps the key
		if ask := al.forwarded(call, now); ask != tc.wantAsk {
			t.Fatalf("rate %d: 9 acquires in the 950 ms since the last ask, then forwarded: ask %v, want %v", tc.rate, ask, tc.wantAsk)
		}
	}
}

// Admissions that could not be given back are owed: due again only from
// their next try on, merged per key, and keep the time they first failed
// (which bounds how long they are tried).
func TestOwedAdmissionsAreDueFromTheirNextTry(t *testing.T) {
	al := newAllotments(5)
	t0 := time.Unix(1000, 0)
	al.owe("k", []uint64{1, 2}, t0, t0.Add(allotRetry))
	al.owe("k", []uint64{3}, t0.Add(time.Second), t0.Add(time.Second+allotRetry))
	al.owe("j", []uint64{9}, t0, t0.Add(allotRetry))
	if got := al.due(t0.Add(allotRetry - time.Nanosecond)); len(got) != 0 {
		t.Fatalf("due before any next try: %v", got)
	}
	got := al.due(t0.Add(allotRetry))
	if len(got) != 1 || !reflect.DeepEqual(got["j"].ids, []uint64{9}) {
		t.Fatalf("due at j's next try: %v, want only j's [9]", got)
	}
	got = al.due(t0.Add(time.Second + allotRetry))
	if o := got["k"]; len(got) != 1 || !reflect.DeepEqual(o.ids, []uint64{1, 2, 3}) || !o.since.Equal(t0) {
		t.Fatalf("due at k's next try: %+v, want [1 2 3] owed since t0", got)
	}
	if got := al.due(t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("owed again after being due: %v", got)
	}
}

// What was given back in the last allotRecall is owed again, due at once,
// when the ring moves (an owner that crashed lost its last returns); older
// returns are forgotten.
func TestReturnsAreMadeAgainWhenTheRingMoves(t *testing.T) {
	al := newAllotments(5)
	t0 := time.Unix(1000, 0)
	al.gaveBack("k", []uint64{1, 2}, t0)
	al.gaveBack("k", []uint64{3}, t0.Add(20*time.Second))
	al.gaveBack("j", []uint64{9}, t0.Add(5*time.Second))
	al.forget(t0.Add(allotRecall)) // k's first return is allotRecall old
	now := t0.Add(allotRecall + 10*time.Second)
	al.recall(now) // j's is too by now
	got := al.due(now)
	if len(got) != 1 || !reflect.DeepEqual(got["k"].ids, []uint64{3}) {
		t.Fatalf("owed after the ring moved: %+v, want k's [3] (returned within allotRecall)", got)
	}
	al.recall(now.Add(time.Second))
	if got := al.due(now.Add(time.Second)); len(got) != 0 {
		t.Fatalf("owed again by a second move: %+v; a recall is made once", got)
	}
}

// A slice holds at most a hundredth of what the window has left, and a
// key with less than minSlice hundredths left gets none: near its limit
// a key is decided by its owner alone. A holder refused a slice asks no
// more until the owner's bucket ends.
func TestSliceIsAHundredthOfWhatIsLeft(t *testing.T) {
	now := time.Unix(5000, 0)
	b := limiter.NewBudget(limiter.Limits{Requests: 1000, Window: time.Minute, Concurrency: 1 << 20, Tokens: 1 << 40}, nil, now)
	ask := Call{Op: peer.OpAllot, Key: "k", Count: peer.MaxAllot, Req: limiter.Request{Reserve: 1}}
	grant := func() []uint64 {
		_, ids, err := decodeGrant(allot(b, now, &ask).State)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if got := len(grant()); got != 1000/allotShare {
		t.Fatalf("a slice of %d admissions with 1000 left, want %d", got, 1000/allotShare)
	}
	for range 990 - minSlice*allotShare + 1 { // 399 left
		if d := b.Acquire(now, limiter.Request{Reserve: 1}); !d.Allowed {
			t.Fatal("refused under the limit")
		}
	}
	if got := grant(); len(got) != 0 {
		t.Fatalf("a slice of %d admissions with %d left, want none", len(got), minSlice*allotShare-1)
	}

	al := newAllotments(5)
	call := &Call{Op: OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	for i := range 6 {
		if al.forwarded(call, now.Add(time.Duration(20*i)*time.Millisecond)) {
			break
		}
	}
	sent := now.Add(100 * time.Millisecond)
	al.ask("k", sent)
	al.granted("k", "owner", sent, sent, 1, Answer{OK: false, Owner: "owner", State: appendGrant(nil, 300*time.Millisecond, nil)}, nil)
	if al.forwarded(call, sent.Add(299*time.Millisecond)) {
		t.Fatal("asked again before the bucket of a refused ask ended")
	}
	if !al.forwarded(call, sent.Add(300*time.Millisecond)) {
		t.Fatal("no ask once the bucket of a refused ask ended")
	}
}

// FuzzDecodeGrant: an peer.OpAllot answer from a peer decodes or is refused,
// never panics, holds at most peer.MaxAllot admissions, and what decodes
// encodes back to the same bytes.
func FuzzDecodeGrant(f *testing.F) {
	f.Add(appendGrant(nil, 750*time.Millisecond, []uint64{1, 1 << 63, 42}))
	f.Add(appendGrant(nil, 0, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		validFor, ids, err := decodeGrant(b)
		if err != nil {
			return
		}
		if len(ids) > peer.MaxAllot || validFor < 0 || validFor > time.Hour {
			t.Fatalf("decoded %d admissions valid for %v", len(ids), validFor)
		}
		again, ids2, err := decodeGrant(appendGrant(nil, validFor, ids))
		if err != nil || again != validFor || !reflect.DeepEqual(ids, ids2) {
			t.Fatalf("re-encode: %v %v %v, want %v %v", again, ids2, err, validFor, ids)
		}
	})
}

// A simulation of the conservation rule, against the real limiter: one
// owner's Budget, three holders with their slices, one clock. Requests
// arrive at random holders at random times; a holder serves one from a
// slice when it can, else "forwards" it (an Acquire at the owner) and asks
// for a slice when the key is hot; sweeps give expired slices back.
// Checked throughout: in every interval of one window, the requests
// admitted (from slices or by the owner, at the time each arrived) never
// exceed the limit; and at the end, with every slice expired and swept,
// the owner counts exactly the admissions handed out.
func TestAllotmentConservationSim(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const limit, window = 40, 10 * time.Second // 60 buckets of 1/6 s
		now := time.Unix(5000, 0)
		owner := limiter.NewBudget(limiter.Limits{Requests: limit, Window: window, Concurrency: 1 << 20, Tokens: 1 << 40, LeaseTTL: 24 * time.Hour}, nil, now)
		holders := []*allotments{newAllotments(5), newAllotments(5), newAllotments(5)}
		var arrivals []time.Time // of every admission handed out or made
		give := func(ids []uint64) {
			for _, id := range ids {
				if !owner.Cancel(now, id) {
					t.Fatalf("admission %d given back but unknown at the owner", id)
				}
			}
		}
		req := &Call{Op: OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
		for range rapid.IntRange(1, 400).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "what") {
			case 0, 1, 2: // time passes
				now = now.Add(time.Duration(rapid.IntRange(1, 400).Draw(t, "ms")) * time.Millisecond)
			case 3: // a sweep at one holder
				for _, ids := range holders[rapid.IntRange(0, 2).Draw(t, "h")].sweep(now, time.Minute) {
					give(ids)
				}
			default: // a request at one holder
				al := holders[rapid.IntRange(0, 2).Draw(t, "h")]
				_, ok, expired, ask := al.take(req, now, "owner")
				give(expired)
				if !ok {
					if d := owner.Acquire(now, req.Req); d.Allowed {
						ok = true
					}
					if al.forwarded(req, now) {
						ask = true
					}
				}
				if ok {
					arrivals = append(arrivals, now)
				}
				if ask {
					c := al.ask("k", now)
					a := allot(owner, now, &c)
					a.Owner = "owner"
					al.granted("k", "owner", now, now, c.Req.Reserve, a, nil)
				}
			}
			checkWindow(t, arrivals, window, limit)
		}
		now = now.Add(window) // every slice past its deadline
		for _, al := range holders {
			for _, ids := range al.sweep(now, time.Hour) {
				give(ids)
			}
		}
		// Nothing completes here and leases outlive the run: the owner
		// holds one lease per admission handed out or made, and no other.
		if held := owner.Status(now).Concurrency.Limit - owner.Status(now).Concurrency.Remaining; held != int64(len(arrivals)) {
			t.Fatalf("the owner holds %d leases for %d admissions: allotted ones were lost or handed out twice", held, len(arrivals))
		}
	})
}

// checkWindow fails t if more than limit of arrivals lie in one interval
// of length window.
func checkWindow(t *rapid.T, arrivals []time.Time, window time.Duration, limit int) {
	last := arrivals
	if len(last) == 0 {
		return
	}
	end := last[len(last)-1]
	n := 0
	for _, at := range last {
		if end.Sub(at) < window {
			n++
		}
	}
	if n > limit {
		t.Fatalf("%d admissions in the window ending %v, limit %d", n, end, limit)
	}
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
		time.Sleep(time.Millisecond)
	}
	if holder.counts.allotted.Load() == 0 {
		t.Fatal("the holder never served from a slice")
	}
	owner.Close()
	eventually(t, "the holder's connection to the owner down", func() bool { return !holder.peers.Up(owner.PeerAddr()) })
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
		time.Sleep(time.Millisecond)
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

// An ask that reaches the owner after the key's last bucket has ended
// (nothing touched the key since) is granted a slice valid until the end
// of the current bucket. (allot once took the end of the key's last
// bucket, in the past: its "how many" came out negative, and making the
// grant panicked, exiting the owner; a hot-tenant benchmark run showed it.)
func TestAllotAfterAQuietBucket(t *testing.T) {
	t0 := time.Unix(5000, 0)
	l := limiter.Limits{Requests: 100_000, Window: time.Minute, Concurrency: 1 << 20, Tokens: 1 << 40}
	b := limiter.NewBudget(l, nil, t0)
	now := t0.Add(5 * time.Second) // four buckets of a second later
	ask := Call{Op: peer.OpAllot, Key: "k", Count: peer.MaxAllot, Req: limiter.Request{Reserve: 1}}
	validFor, ids, err := decodeGrant(allot(b, now, &ask).State)
	if err != nil {
		t.Fatal(err)
	}
	width := l.Window / time.Duration(limiter.DefaultBuckets)
	if validFor <= 0 || validFor > width || len(ids) == 0 || len(ids) > peer.MaxAllot {
		t.Fatalf("grant after a quiet bucket: valid for %v (want (0, %v]), %d admissions (want 1..%d)", validFor, width, len(ids), peer.MaxAllot)
	}
	if st := b.Status(now); st.Requests.Remaining != int64(l.Requests)-int64(len(ids)) {
		t.Fatalf("remaining %d after granting %d of %d", st.Requests.Remaining, len(ids), l.Requests)
	}
}

// Whatever the ask (any count and reservation, any priority) and whenever
// it comes (before or long after the key's last call), allot answers
// without panicking, grants at most peer.MaxAllot admissions valid until the
// end of the bucket they are charged to, and takes exactly them from the
// window.
func TestAllotAnyAskAnyTime(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		t0 := time.Unix(5000, 0)
		l := limiter.Limits{Requests: rapid.Int64Range(1, 1<<40).Draw(rt, "rpm"), Window: time.Minute,
			Concurrency: rapid.Int64Range(1, 1<<30).Draw(rt, "concurrency"), Tokens: rapid.Int64Range(1, 1<<50).Draw(rt, "tpm")}
		b := limiter.NewBudget(l, nil, t0)
		now := t0.Add(time.Duration(rapid.IntRange(-2, 120).Draw(rt, "seconds later"))*time.Second +
			time.Duration(rapid.Int64Range(0, int64(time.Second)-1).Draw(rt, "and ns")))
		ask := Call{Op: peer.OpAllot, Key: "k", Count: rapid.SampledFrom([]uint32{0, 1, 7, peer.MaxAllot, 1 << 20, 1<<32 - 1}).Draw(rt, "count"),
			Req: limiter.Request{Reserve: rapid.Int64Range(-10, 1<<50).Draw(rt, "reserve"), Priority: limiter.Priority(rapid.IntRange(0, 3).Draw(rt, "priority"))}}
		before := l.Requests // the key is new (and asking its Status first would move it to now)
		validFor, ids, err := decodeGrant(allot(b, now, &ask).State)
		if err != nil {
			rt.Fatal(err)
		}
		// A bucket at most, from the key's latest time: an ask dated
		// before it (the owner's clock behind a time the key saw) waits
		// for that bucket's end.
		if len(ids) > peer.MaxAllot || validFor < 0 || validFor > l.Window/limiter.DefaultBuckets+max(0, t0.Sub(now)) {
			rt.Fatalf("granted %d, valid for %v", len(ids), validFor)
		}
		if after := b.Status(now).Requests.Remaining; after != before-int64(len(ids)) {
			rt.Fatalf("remaining %d → %d for %d admissions", before, after, len(ids))
		}
	})
}

// A hot key's next slice is asked for as soon as its owner's bucket has
// ended, by this node's clock: its last slice's deadline plus that ask's
// round trip, not at its next forward. Its expired admissions are given
// back then too. A key no slice served in the last second is not asked for
// again; one already asking is not asked for twice.
func TestNextSliceIsAskedForWhenTheBucketEnds(t *testing.T) {
	call := &Call{Op: OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	t0 := time.Unix(1000, 0)
	hot := func(al *allotments) {
		t.Helper()
		for i := range 6 {
			if al.forwarded(call, t0.Add(time.Duration(20*i)*time.Millisecond)) != (i == 5) {
				t.Fatalf("forward %d of 6 in 100 ms: ask not as expected", i+1)
			}
		}
	}
	grant := func(al *allotments, sent, received time.Time, valid time.Duration, ids ...uint64) {
		c := al.ask("k", sent)
		al.granted("k", "owner", sent, received, c.Req.Reserve, Answer{OK: true, Owner: "owner", State: appendGrant(nil, valid, ids)}, nil)
	}

	al := newAllotments(5)
	hot(al)
	sent := t0.Add(100 * time.Millisecond)
	grant(al, sent, sent.Add(30*time.Millisecond), 900*time.Millisecond, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	select {
	case <-al.nudge:
	default:
		t.Fatal("a slice granted with a refill earlier than any did not nudge the refilling goroutine")
	}
	for i := range 8 {
		if _, ok, _, _ := al.take(call, t0.Add(time.Duration(200+90*i)*time.Millisecond), "owner"); !ok {
			t.Fatalf("acquire %d not served from the slice", i)
		}
	}
	refillAt := t0.Add(1030 * time.Millisecond) // deadline 1 s, plus the ask's 30 ms
	due, next := al.refills(refillAt.Add(-time.Nanosecond))
	if len(due) != 0 || !next.Equal(refillAt) {
		t.Fatalf("before the refill: %d due, next at %v; want none due, next at %v", len(due), next.Sub(t0), refillAt.Sub(t0))
	}
	if al.wakeAt.Load() != refillAt.UnixNano() {
		t.Fatal("refills did not record when the goroutine wakes next")
	}
	due, next = al.refills(refillAt)
	if len(due) != 1 || !due[0].ask || due[0].addr != "owner" || len(due[0].expired) != 2 || !next.IsZero() {
		t.Fatalf("at the refill: %+v, next %v; want one ask of owner giving back 2, none next", due, next)
	}
	if due, _ := al.refills(refillAt.Add(time.Second)); len(due) != 0 {
		t.Fatalf("refilled twice: %+v", due)
	}
	if al.forwarded(call, refillAt.Add(time.Millisecond)) {
		t.Fatal("a forward asked again while the refill's ask was under way")
	}

	// The next slice serves one request in its bucket, under the hot
	// rate: at its end the key is not asked for again.
	sent = refillAt
	grant(al, sent, sent.Add(time.Millisecond), 969*time.Millisecond, 11, 12, 13)
	if _, ok, _, _ := al.take(call, sent.Add(20*time.Millisecond), "owner"); !ok {
		t.Fatal("an acquire was not served from the next slice")
	}
	due, _ = al.refills(t0.Add(2*time.Second + 2*time.Millisecond))
	if len(due) != 1 || due[0].ask || len(due[0].expired) != 2 {
		t.Fatalf("after a bucket the slice served one request of: %+v; want no ask, 2 given back", due)
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
			time.Sleep(20 * time.Millisecond)
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

// A top-up asked just before the bucket's end resets the key's counts, but
// not its heat: under a tenth of a second after an ask, the key's rate is
// the one that ask measured, so the refill still asks for the next
// bucket's slice, of the same token bound.
func TestTopUpJustBeforeTheBucketEndKeepsTheKeyHot(t *testing.T) {
	call := &Call{Op: OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 10, MaxTokens: 20}}
	al := newAllotments(5)
	t0 := time.Unix(1000, 0)
	for i := range 6 {
		al.forwarded(call, t0.Add(time.Duration(20*i)*time.Millisecond))
	}
	grant := func(sent time.Time, valid time.Duration, ids ...uint64) {
		c := al.ask("k", sent)
		if c.Req.Reserve != 30 {
			t.Fatalf("ask at %v reserves %d tokens an admission, want 30", sent.Sub(t0), c.Req.Reserve)
		}
		al.granted("k", "owner", sent, sent, c.Req.Reserve, Answer{OK: true, Owner: "owner", State: appendGrant(nil, valid, ids)}, nil)
	}
	grant(t0.Add(100*time.Millisecond), 900*time.Millisecond, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for i := range 9 {
		if _, ok, _, _ := al.take(call, t0.Add(time.Duration(150+90*i)*time.Millisecond), "owner"); !ok {
			t.Fatalf("acquire %d not served", i)
		}
	}
	grant(t0.Add(980*time.Millisecond), 20*time.Millisecond, 11, 12) // the top-up, a fifth left
	due, _ := al.refills(t0.Add(time.Second))
	if len(due) != 1 || !due[0].ask || len(due[0].expired) != 3 {
		t.Fatalf("at the bucket's end, 20 ms after a top-up: %+v; want an ask, 3 given back", due)
	}
	if c := al.ask("k", t0.Add(time.Second)); c.Req.Reserve != 30 || c.Count < 5 {
		t.Fatalf("the refill's ask: %d a second reserving %d tokens, want at least 5 reserving 30", c.Count, c.Req.Reserve)
	}
}
