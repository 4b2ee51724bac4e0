package allot

import (
	"reflect"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
	"pgregory.net/rapid"
)

// The holder's rule, as a state machine against a model: every admission
// allotted is handed out at most once and only before its slice's
// deadline, or returned once the deadline passed; none is lost.
func TestSliceHandsOutEachAdmissionOnceBeforeItsDeadline(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		al := NewHolder(1)
		key := "k"
		now := time.Unix(1000, 0)
		next := uint64(1)
		outstanding := map[uint64]time.Time{} // allotted, not handed out nor returned → its deadline
		handed := map[uint64]bool{}
		call := func(tokens int64) *peer.Call {
			return &peer.Call{Op: peer.OpAcquire, Key: key, Req: limiter.Request{PromptTokens: tokens, MaxTokens: 1}}
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
		al.Forwarded(call(5), now)
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
				a := peer.Answer{OK: n > 0, Owner: "owner", State: AppendGrant(nil, valid, ids)}
				al.Granted(key, "owner", now, now, 8, a, nil)
			case 1: // a request
				tokens := int64(rapid.IntRange(1, 10).Draw(t, "tokens"))
				c := call(tokens)
				// Some count several requests or name their lease: the
				// owner's to decide, never served from a slice.
				switch rapid.IntRange(0, 5).Draw(t, "kind") {
				case 0:
					c.Req.Hits = rapid.Int64Range(-1, 4).Draw(t, "hits")
				case 1:
					c.Req.Lease = rapid.Uint64Range(1, 1<<63).Draw(t, "lease")
				}
				a, ok, expired, _ := al.Take(c, now, "owner")
				returned(expired)
				if ok && (c.Req.Hits > 1 || c.Req.Lease != 0) {
					t.Fatalf("step %d: %+v served from a slice", step, c.Req)
				}
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
				for _, ids := range al.Sweep(now, time.Hour) {
					returned(ids)
				}
			}
		}
		now = now.Add(2 * time.Second) // past every deadline
		for _, ids := range al.Sweep(now, time.Hour) {
			returned(ids)
		}
		if len(outstanding) != 0 {
			t.Fatalf("%d admissions neither handed out nor returned: %v", len(outstanding), outstanding)
		}
	})
}

// Acquires no slice can serve (several hits, a chosen lease id) do not make
// a key hot, however many are forwarded; ordinary ones beside them do.
func TestHitsAndChosenLeasesDoNotHeatAKey(t *testing.T) {
	al := NewHolder(10)
	t0 := time.Unix(1000, 0)
	for i := range 300 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		for _, r := range []limiter.Request{{MaxTokens: 1, Hits: 2}, {MaxTokens: 1, Lease: uint64(i + 1)}} {
			if al.Forwarded(&peer.Call{Op: peer.OpAcquire, Key: "k", Req: r}, now) {
				t.Fatalf("%+v made the key hot", r)
			}
		}
	}
	plain := &peer.Call{Op: peer.OpAcquire, Key: "k", Req: limiter.Request{MaxTokens: 1, Hits: 1}}
	asked := false
	for i := range 300 {
		asked = asked || al.Forwarded(plain, t0.Add(time.Duration(300+i)*time.Millisecond))
	}
	if !asked {
		t.Fatal("300 plain acquires in 300 ms (hits 1) did not make the key hot")
	}
}

// A key whose slice ended with its bucket while it was being served is
// still hot (the sweep keeps it): its next forward asks for the next slice at once, without
// counting forwards again for a tenth of a second (every key's buckets end
// together, so that pause would forward every hot key at once). A key
// that slowed below the rate since its last ask is not asked for again.
func TestKeyStaysHotAcrossItsBucketEnd(t *testing.T) {
	call := &peer.Call{Op: peer.OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	for _, tc := range []struct {
		rate    int
		wantAsk bool
	}{{rate: 5, wantAsk: true}, {rate: 50, wantAsk: false}} {
		al := NewHolder(tc.rate)
		t0 := time.Unix(1000, 0)
		var now time.Time
		for i := range 6 {
			now = t0.Add(time.Duration(20*i) * time.Millisecond)
			if ask := al.Forwarded(call, now); ask != (i == 5) {
				t.Fatalf("rate %d: forward %d of 6 in 100 ms: ask %v", tc.rate, i+1, ask)
			}
		}
		c := al.Ask("k", now)
		al.Granted("k", "owner", now, now, c.Req.Reserve, peer.Answer{OK: true, Owner: "owner", State: AppendGrant(nil, 900*time.Millisecond, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})}, nil)
		for i := range 8 { // 8 served by 950 ms
			now = t0.Add(time.Duration(200+100*i) * time.Millisecond)
			if _, ok, _, _ := al.Take(call, now, "owner"); !ok {
				t.Fatalf("rate %d: acquire %d at %v not served from the slice", tc.rate, i, now.Sub(t0))
			}
		}
		now = t0.Add(1050 * time.Millisecond) // the slice ended at 1 s
		_, ok, expired, _ := al.Take(call, now, "owner")
		if ok || len(expired) != 2 {
			t.Fatalf("rate %d: after the deadline: served %v, %d returned; want not served, 2 returned", tc.rate, ok, len(expired))
		}
		al.Sweep(now, time.Hour) // a sweep between the slice's end and the next forward keeps the key
		if ask := al.Forwarded(call, now); ask != tc.wantAsk {
			t.Fatalf("rate %d: 9 acquires in the 950 ms since the last ask, then forwarded: ask %v, want %v", tc.rate, ask, tc.wantAsk)
		}
	}
}

// Admissions that could not be given back are owed: due again only from
// their next try on, merged per key, and keep the time they first failed
// (which bounds how long they are tried).
func TestOwedAdmissionsAreDueFromTheirNextTry(t *testing.T) {
	al := NewHolder(5)
	t0 := time.Unix(1000, 0)
	al.Owe("k", []uint64{1, 2}, t0, t0.Add(ReturnRetry))
	al.Owe("k", []uint64{3}, t0.Add(time.Second), t0.Add(time.Second+ReturnRetry))
	al.Owe("j", []uint64{9}, t0, t0.Add(ReturnRetry))
	if got := al.Due(t0.Add(ReturnRetry - time.Nanosecond)); len(got) != 0 {
		t.Fatalf("due before any next try: %v", got)
	}
	got := al.Due(t0.Add(ReturnRetry))
	if len(got) != 1 || !reflect.DeepEqual(got["j"].IDs, []uint64{9}) {
		t.Fatalf("due at j's next try: %v, want only j's [9]", got)
	}
	got = al.Due(t0.Add(time.Second + ReturnRetry))
	if o := got["k"]; len(got) != 1 || !reflect.DeepEqual(o.IDs, []uint64{1, 2, 3}) || !o.Since.Equal(t0) {
		t.Fatalf("due at k's next try: %+v, want [1 2 3] owed since t0", got)
	}
	if got := al.Due(t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("owed again after being due: %v", got)
	}
}

// What was given back in the last recallFor is owed again, due at once,
// when the ring moves (an owner that crashed lost its last returns); older
// returns are forgotten.
func TestReturnsAreMadeAgainWhenTheRingMoves(t *testing.T) {
	al := NewHolder(5)
	t0 := time.Unix(1000, 0)
	al.GaveBack("k", []uint64{1, 2}, t0)
	al.GaveBack("k", []uint64{3}, t0.Add(20*time.Second))
	al.GaveBack("j", []uint64{9}, t0.Add(5*time.Second))
	al.Forget(t0.Add(recallFor)) // k's first return is recallFor old
	now := t0.Add(recallFor + 10*time.Second)
	al.Recall(now) // j's is too by now
	got := al.Due(now)
	if len(got) != 1 || !reflect.DeepEqual(got["k"].IDs, []uint64{3}) {
		t.Fatalf("owed after the ring moved: %+v, want k's [3] (returned within recallFor)", got)
	}
	al.Recall(now.Add(time.Second))
	if got := al.Due(now.Add(time.Second)); len(got) != 0 {
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
	ask := peer.Call{Op: peer.OpAllot, Key: "k", Count: peer.MaxAllot, Req: limiter.Request{Reserve: 1}}
	grant := func() []uint64 {
		_, ids, err := DecodeGrant(Allot(b, now, &ask).State)
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

	al := NewHolder(5)
	call := &peer.Call{Op: peer.OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	for i := range 6 {
		if al.Forwarded(call, now.Add(time.Duration(20*i)*time.Millisecond)) {
			break
		}
	}
	sent := now.Add(100 * time.Millisecond)
	al.Ask("k", sent)
	al.Granted("k", "owner", sent, sent, 1, peer.Answer{OK: false, Owner: "owner", State: AppendGrant(nil, 300*time.Millisecond, nil)}, nil)
	if al.Forwarded(call, sent.Add(299*time.Millisecond)) {
		t.Fatal("asked again before the bucket of a refused ask ended")
	}
	if !al.Forwarded(call, sent.Add(300*time.Millisecond)) {
		t.Fatal("no ask once the bucket of a refused ask ended")
	}
}

// FuzzDecodeGrant: an peer.OpAllot answer from a peer decodes or is refused,
// never panics, holds at most peer.MaxAllot admissions, and what decodes
// encodes back to the same bytes.
func FuzzDecodeGrant(f *testing.F) {
	f.Add(AppendGrant(nil, 750*time.Millisecond, []uint64{1, 1 << 63, 42}))
	f.Add(AppendGrant(nil, 0, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x05})
	f.Fuzz(func(t *testing.T, b []byte) {
		validFor, ids, err := DecodeGrant(b)
		if err != nil {
			return
		}
		if len(ids) > peer.MaxAllot || validFor < 0 || validFor > time.Hour {
			t.Fatalf("decoded %d admissions valid for %v", len(ids), validFor)
		}
		again, ids2, err := DecodeGrant(AppendGrant(nil, validFor, ids))
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
		holders := []*Holder{NewHolder(5), NewHolder(5), NewHolder(5)}
		var arrivals []time.Time // of every admission handed out or made
		give := func(ids []uint64) {
			for _, id := range ids {
				if !owner.Cancel(now, id) {
					t.Fatalf("admission %d given back but unknown at the owner", id)
				}
			}
		}
		req := &peer.Call{Op: peer.OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
		for range rapid.IntRange(1, 400).Draw(t, "steps") {
			switch rapid.IntRange(0, 9).Draw(t, "what") {
			case 0, 1, 2: // time passes
				now = now.Add(time.Duration(rapid.IntRange(1, 400).Draw(t, "ms")) * time.Millisecond)
			case 3: // a sweep at one holder
				for _, ids := range holders[rapid.IntRange(0, 2).Draw(t, "h")].Sweep(now, time.Minute) {
					give(ids)
				}
			default: // a request at one holder
				al := holders[rapid.IntRange(0, 2).Draw(t, "h")]
				_, ok, expired, ask := al.Take(req, now, "owner")
				give(expired)
				if !ok {
					if d := owner.Acquire(now, req.Req); d.Allowed {
						ok = true
					}
					if al.Forwarded(req, now) {
						ask = true
					}
				}
				if ok {
					arrivals = append(arrivals, now)
				}
				if ask {
					c := al.Ask("k", now)
					a := Allot(owner, now, &c)
					a.Owner = "owner"
					al.Granted("k", "owner", now, now, c.Req.Reserve, a, nil)
				}
			}
			checkWindow(t, arrivals, window, limit)
		}
		now = now.Add(window) // every slice past its deadline
		for _, al := range holders {
			for _, ids := range al.Sweep(now, time.Hour) {
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
	ask := peer.Call{Op: peer.OpAllot, Key: "k", Count: peer.MaxAllot, Req: limiter.Request{Reserve: 1}}
	validFor, ids, err := DecodeGrant(Allot(b, now, &ask).State)
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

// A key with a budget is never sliced: the grant is empty and the key
// counts nothing it did not count before.
func TestAllotNothingOfABudget(t *testing.T) {
	t0 := time.Unix(5000, 0)
	l := limiter.Limits{Requests: 100_000, Window: time.Minute, Spend: 1e12}
	b := limiter.NewBudget(l, nil, t0)
	ask := peer.Call{Op: peer.OpAllot, Key: "k", Count: peer.MaxAllot, Req: limiter.Request{Reserve: 1}}
	a := Allot(b, t0, &ask)
	if _, ids, err := DecodeGrant(a.State); err != nil || len(ids) != 0 || a.OK {
		t.Fatalf("a budget's key granted %d admissions (%v)", len(ids), err)
	}
	if st := b.Status(t0); st.Requests.Remaining != l.Requests || st.Spend.Held != 0 {
		t.Fatalf("after no grant: %+v", st)
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
		ask := peer.Call{Op: peer.OpAllot, Key: "k", Count: rapid.SampledFrom([]uint32{0, 1, 7, peer.MaxAllot, 1 << 20, 1<<32 - 1}).Draw(rt, "count"),
			Req: limiter.Request{Reserve: rapid.Int64Range(-10, 1<<50).Draw(rt, "reserve"), Priority: limiter.Priority(rapid.IntRange(0, 3).Draw(rt, "priority"))}}
		before := l.Requests // the key is new (and asking its Status first would move it to now)
		validFor, ids, err := DecodeGrant(Allot(b, now, &ask).State)
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
	call := &peer.Call{Op: peer.OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}
	t0 := time.Unix(1000, 0)
	hot := func(al *Holder) {
		t.Helper()
		for i := range 6 {
			if al.Forwarded(call, t0.Add(time.Duration(20*i)*time.Millisecond)) != (i == 5) {
				t.Fatalf("forward %d of 6 in 100 ms: ask not as expected", i+1)
			}
		}
	}
	grant := func(al *Holder, sent, received time.Time, valid time.Duration, ids ...uint64) {
		c := al.Ask("k", sent)
		al.Granted("k", "owner", sent, received, c.Req.Reserve, peer.Answer{OK: true, Owner: "owner", State: AppendGrant(nil, valid, ids)}, nil)
	}

	al := NewHolder(5)
	hot(al)
	sent := t0.Add(100 * time.Millisecond)
	grant(al, sent, sent.Add(30*time.Millisecond), 900*time.Millisecond, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	select {
	case <-al.nudge:
	default:
		t.Fatal("a slice granted with a refill earlier than any did not nudge the refilling goroutine")
	}
	for i := range 8 {
		if _, ok, _, _ := al.Take(call, t0.Add(time.Duration(200+90*i)*time.Millisecond), "owner"); !ok {
			t.Fatalf("acquire %d not served from the slice", i)
		}
	}
	refillAt := t0.Add(1030 * time.Millisecond) // deadline 1 s, plus the ask's 30 ms
	due, next := al.Refills(refillAt.Add(-time.Nanosecond))
	if len(due) != 0 || !next.Equal(refillAt) {
		t.Fatalf("before the refill: %d due, next at %v; want none due, next at %v", len(due), next.Sub(t0), refillAt.Sub(t0))
	}
	if al.wakeAt.Load() != refillAt.UnixNano() {
		t.Fatal("refills did not record when the goroutine wakes next")
	}
	due, next = al.Refills(refillAt)
	if len(due) != 1 || !due[0].Ask || due[0].Addr != "owner" || len(due[0].Expired) != 2 || !next.IsZero() {
		t.Fatalf("at the refill: %+v, next %v; want one ask of owner giving back 2, none next", due, next)
	}
	if due, _ := al.Refills(refillAt.Add(time.Second)); len(due) != 0 {
		t.Fatalf("refilled twice: %+v", due)
	}
	if al.Forwarded(call, refillAt.Add(time.Millisecond)) {
		t.Fatal("a forward asked again while the refill's ask was under way")
	}

	// The next slice serves one request in its bucket, under the hot
	// rate: at its end the key is not asked for again.
	sent = refillAt
	grant(al, sent, sent.Add(time.Millisecond), 969*time.Millisecond, 11, 12, 13)
	if _, ok, _, _ := al.Take(call, sent.Add(20*time.Millisecond), "owner"); !ok {
		t.Fatal("an acquire was not served from the next slice")
	}
	due, _ = al.Refills(t0.Add(2*time.Second + 2*time.Millisecond))
	if len(due) != 1 || due[0].Ask || len(due[0].Expired) != 2 {
		t.Fatalf("after a bucket the slice served one request of: %+v; want no ask, 2 given back", due)
	}
}

// A top-up asked just before the bucket's end resets the key's counts, but
// not its heat: under a tenth of a second after an ask, the key's rate is
// the one that ask measured, so the refill still asks for the next
// bucket's slice, of the same token bound.
func TestTopUpJustBeforeTheBucketEndKeepsTheKeyHot(t *testing.T) {
	call := &peer.Call{Op: peer.OpAcquire, Key: "k", Req: limiter.Request{PromptTokens: 10, MaxTokens: 20}}
	al := NewHolder(5)
	t0 := time.Unix(1000, 0)
	for i := range 6 {
		al.Forwarded(call, t0.Add(time.Duration(20*i)*time.Millisecond))
	}
	grant := func(sent time.Time, valid time.Duration, ids ...uint64) {
		c := al.Ask("k", sent)
		if c.Req.Reserve != 30 {
			t.Fatalf("ask at %v reserves %d tokens an admission, want 30", sent.Sub(t0), c.Req.Reserve)
		}
		al.Granted("k", "owner", sent, sent, c.Req.Reserve, peer.Answer{OK: true, Owner: "owner", State: AppendGrant(nil, valid, ids)}, nil)
	}
	grant(t0.Add(100*time.Millisecond), 900*time.Millisecond, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for i := range 9 {
		if _, ok, _, _ := al.Take(call, t0.Add(time.Duration(150+90*i)*time.Millisecond), "owner"); !ok {
			t.Fatalf("acquire %d not served", i)
		}
	}
	grant(t0.Add(980*time.Millisecond), 20*time.Millisecond, 11, 12) // the top-up, a fifth left
	due, _ := al.Refills(t0.Add(time.Second))
	if len(due) != 1 || !due[0].Ask || len(due[0].Expired) != 3 {
		t.Fatalf("at the bucket's end, 20 ms after a top-up: %+v; want an ask, 3 given back", due)
	}
	if c := al.Ask("k", t0.Add(time.Second)); c.Req.Reserve != 30 || c.Count < 5 {
		t.Fatalf("the refill's ask: %d a second reserving %d tokens, want at least 5 reserving 30", c.Count, c.Req.Reserve)
	}
}

// An admission handed out from a slice reports the owner's status when it
// made the slice, which counts the whole slice: a forwarder's fallback
// takes that status as the owner's word, and a share computed from the
// slice's leftovers once the owner is out of reach and the slice has ended
// would admit what nobody counted (a stalled owner's tenant, at its limit,
// admitted once through a forwarder that had served it from a slice).
func TestSliceAnswersReportTheOwnersStatus(t *testing.T) {
	owner := limiter.Status{Requests: limiter.DimStatus{Limit: 100, Remaining: 0, Reset: time.Minute}}
	s := &slice{ids: []uint64{11, 12, 13}, reserve: 2, status: owner, deadline: time.Unix(2e9, 0)}
	id, ok := s.take(time.Unix(1e9, 0), 1)
	if !ok {
		t.Fatal("take from a slice with room refused")
	}
	if d := s.decision(id); d.Status != owner || !d.Allowed || d.Reserved != 2 {
		t.Fatalf("decision %+v: status %+v, want the owner's %+v (the 2 left in the slice are not the owner's room)", d, d.Status, owner)
	}
}
