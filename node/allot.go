package node

// Allotments: hot keys decided where their requests arrive.
//
// A key's owner alone admits against it, so one busy tenant or pool is
// capped by what its owner can decide, and every other node pays a forward
// per request. When a node forwards more than HotKeyRate acquires a second
// for one key, it asks the owner for a slice: peer.OpAllot admits, at the owner,
// as many ordinary requests as this node is expected to need before the
// owner's current bucket ends (each reserving the largest token bound seen
// here, each holding a concurrency slot), at most a hundredth of what the
// window has left. This node then hands those admissions out to its own
// callers without asking the owner, and asks for the next slice when a
// fifth of the last one is left.
//
// Exactness. Every admission handed out is one the owner made, in its own
// Budget: the window and the slots count it from the moment it is allotted,
// so the sum of live slices never exceeds what the window has left. An
// admission is handed out only before the owner's bucket it was charged to
// ends (deadline: the holder's clock when it asked, plus the time the owner
// said its bucket had left, so it never passes the owner's bucket end
// whatever the clocks read), so it is counted in the bucket its request
// arrived in, as if the owner had decided it then. At the deadline the
// admissions not handed out are cancelled at the owner (OpCancel: request,
// tokens and slot given back): nothing stays reserved longer than a bucket.
// A handed-out admission is an ordinary lease of the owner's: settle,
// release, renew and cancel go to the owner as for any other lease, and a
// handoff moves it with the key.
//
// What it costs: a request served from a slice reserves the slice's token
// bound, not its own estimate, until it is settled; a node that crashes
// holding a slice leaves its unused admissions charged until their bucket
// leaves the window and their slots until the lease TTL.

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
)

// A slice holds at most 1/allotShare of what its key's window has left, in
// each limited dimension, and a key with less than minSlice such shares
// left gets none. So what idles in slices while the owner refuses is small
// (a hundredth of what is left, per holder), and near its limit a key is
// decided by its owner alone: a burst then admits exactly what is left.
// (A slice under minSlice admissions would also cost more peer calls than
// it saves: the ask, the top-up, the give-back.)
const (
	allotShare = 100
	minSlice   = 4
)

// slice is admissions an owner made in advance for this node to hand out.
type slice struct {
	ids      []uint64       // admissions not handed out, handed out from the end
	reserve  int64          // tokens each reserves
	granted  int            // how many the owner made
	owner    string         // the owner's name
	addr     string         // the owner's peer address: the slice serves only while the key is forwarded there
	status   limiter.Status // the key's status at the owner once it made them
	deadline time.Time      // this node's clock; nothing is handed out at or after it
}

// take hands out one admission for a request of at most tokens tokens at
// now; ok is false when the slice cannot serve it.
func (s *slice) take(now time.Time, tokens int64) (id uint64, ok bool) {
	if len(s.ids) == 0 || !now.Before(s.deadline) || tokens > s.reserve {
		return 0, false
	}
	id = s.ids[len(s.ids)-1]
	s.ids = s.ids[:len(s.ids)-1]
	return id, true
}

// decision is the answer for one admission handed out: the owner's
// status when the slice was made, with what is left of the slice counted
// as still available (it is, to this node's callers).
func (s *slice) decision(id uint64) limiter.Decision {
	st := s.status
	left := int64(len(s.ids))
	st.Requests.Remaining += left
	if st.Tokens.Limit > 0 {
		st.Tokens.Remaining += left * s.reserve
	}
	if st.Concurrency.Limit > 0 {
		st.Concurrency.Remaining += left
	}
	return limiter.Decision{Allowed: true, Lease: id, Reserved: s.reserve, Status: st}
}

// hotKey is what this node knows of one key it forwards for.
type hotKey struct {
	slices     []*slice  // in the order granted: usually the current bucket's and the next's
	asking     bool      // an peer.OpAllot is under way
	maxTokens  int64     // the largest token bound of a request since the last ask
	uses       int       // acquires for the key since the last ask
	since      time.Time // the last ask (or the first forward)
	askedRate  float64   // the acquires a second the last ask asked for
	askedBound int64     // the token bound the last ask asked for
	served     time.Time // the last acquire served from a slice
	quiet      time.Time // no ask before it: the owner refused one for its bucket ending then
	refill     time.Time // past the owner's bucket end its last slice was made in: the next is asked for then (zero: none due)
	addr       string    // the owner's peer address the last slice came from
	forwarded  int       // forwarded acquires since counting
	counting   time.Time // start of the period forwarded counts (at most a second)
	lastActive time.Time
}

// allotments is a node's slices, by key, in shards so that the acquires
// of different keys do not contend. Its methods take the time.
type allotments struct {
	rate   int // forwarded acquires a second that make a key hot
	seed   maphash.Seed
	shards [16]allotShard

	// The refills (refills): wakeAt is the earliest refill the node's
	// refilling goroutine sleeps until (UnixNano; 0 while it looks, or
	// when none is due), and nudge wakes it for an earlier one.
	wakeAt atomic.Int64
	nudge  chan struct{}

	returns // what was and was not given back (giveback.go)
}

type allotShard struct {
	mu   sync.Mutex
	keys map[string]*hotKey
}

// maxHotKeys bounds the keys a shard watches for heat; a key beyond it is
// forwarded as usual until the sweep makes room (a key that is not hot is
// dropped a second after its count started).
const maxHotKeys = 256

func newAllotments(rate int) *allotments {
	al := &allotments{rate: rate, seed: maphash.MakeSeed(), returns: newReturns(), nudge: make(chan struct{}, 1)}
	for i := range al.shards {
		al.shards[i].keys = make(map[string]*hotKey)
	}
	return al
}

// shard returns key's shard, locked; the caller unlocks it.
func (al *allotments) shard(key string) *allotShard {
	sh := &al.shards[maphash.String(al.seed, key)%uint64(len(al.shards))]
	sh.mu.Lock()
	return sh
}

// requestBound is an upper bound of the tokens the owner would reserve for
// r, or false when there is none (no max_tokens: the owner's estimate
// depends on the key's history).
func requestBound(r limiter.Request) (int64, bool) {
	switch {
	case r.Reserve > 0:
		return r.Reserve, true
	case r.MaxTokens > 0:
		return max(0, r.PromptTokens) + r.MaxTokens, true
	}
	return 0, false
}

// take serves acquire c from a slice of its key, at now, while the key is
// forwarded to addr. expired returns the admissions of slices past their
// deadline or of another owner, to give back; ask is true when a new slice
// should be asked for.
func (al *allotments) take(c *Call, now time.Time, addr string) (a Answer, ok bool, expired []uint64, ask bool) {
	tokens, bounded := requestBound(c.Req)
	sh := al.shard(c.Key)
	defer sh.mu.Unlock()
	k := sh.keys[c.Key]
	if k == nil {
		return Answer{}, false, nil, false
	}
	k.lastActive = now
	expired = k.dropExpired(now, addr)
	if bounded {
		k.maxTokens = max(k.maxTokens, tokens)
		for _, s := range k.slices {
			if id, ok := s.take(now, tokens); ok {
				k.uses++
				k.served = now
				a = Answer{Decision: s.decision(id), Owner: s.owner}
				return a, true, expired, k.wantsMore(now)
			}
		}
	}
	return Answer{}, false, expired, false
}

// forwarded counts acquire c, which was forwarded, at now and reports
// whether a slice should be asked for.
func (al *allotments) forwarded(c *Call, now time.Time) (ask bool) {
	sh := al.shard(c.Key)
	defer sh.mu.Unlock()
	k := sh.keys[c.Key]
	if k == nil {
		if len(sh.keys) >= maxHotKeys {
			return false
		}
		k = &hotKey{since: now, counting: now}
		sh.keys[c.Key] = k
	}
	k.lastActive = now
	k.uses++
	if tokens, ok := requestBound(c.Req); ok {
		k.maxTokens = max(k.maxTokens, tokens)
	}
	if al.stillHot(k, now) {
		// The key's slices just ended with their bucket, and the
		// refill did not ask for the next (or its answer is not in).
		// The next is asked for at once, not after another tenth of a
		// second of counting forwards (every key's buckets end together,
		// so that pause would forward every hot key at each bucket's
		// end).
		return k.wantsMore(now)
	}
	elapsed := now.Sub(k.counting)
	if elapsed > time.Second || elapsed < 0 {
		k.counting, k.forwarded, elapsed = now, 0, 0
	}
	k.forwarded++
	// The rate over the counting period, once it is a tenth of a second
	// long: a key is hot within 100 ms.
	return al.atRate(k.forwarded, elapsed) && elapsed >= ratePeriod && k.wantsMore(now)
}

// stillHot reports whether k, whose slices may have ended, is hot at now:
// a slice served it within the last second, and its rate is the hot rate.
func (al *allotments) stillHot(k *hotKey, now time.Time) bool {
	return !k.served.IsZero() && now.Sub(k.served) < time.Second && k.rate(now) >= float64(al.rate)
}

// rate is k's acquires a second at now: since the last ask, or as that ask
// measured it when it is under ratePeriod old: a top-up asked just before
// the bucket ends leaves too few acquires since to tell.
func (k *hotKey) rate(now time.Time) float64 {
	elapsed := now.Sub(k.since)
	if elapsed < ratePeriod && k.askedRate > 0 {
		return k.askedRate
	}
	return perSecond(k.uses, elapsed)
}

// ratePeriod is the least time a rate of acquires is measured over: a key
// is hot within it, and a rate over less counts it as this long.
const ratePeriod = 100 * time.Millisecond

// perSecond is n acquires in elapsed, counted as at least ratePeriod.
func perSecond(n int, elapsed time.Duration) float64 {
	return float64(n) / max(elapsed, ratePeriod).Seconds()
}

// atRate reports whether n acquires in elapsed reach the hot rate.
func (al *allotments) atRate(n int, elapsed time.Duration) bool {
	return perSecond(n, elapsed) >= float64(al.rate)
}

// wantsMore reports whether a slice should be asked for at now: none is
// under way, the owner did not refuse one for the current bucket, and the
// slices held are low.
func (k *hotKey) wantsMore(now time.Time) bool {
	if k.asking || max(k.maxTokens, k.askedBound) == 0 || now.Before(k.quiet) {
		return false
	}
	left, granted := 0, 0
	for _, s := range k.slices {
		left, granted = left+len(s.ids), granted+s.granted
	}
	if left*5 >= granted && granted > 0 {
		return false
	}
	k.asking = true
	return true
}

// dropExpired removes the slices past their deadline at now, or (addr
// not empty) of an owner at another address than addr, and returns their
// admissions not handed out.
func (k *hotKey) dropExpired(now time.Time, addr string) (ids []uint64) {
	kept := k.slices[:0]
	for _, s := range k.slices {
		if now.Before(s.deadline) && (addr == "" || s.addr == addr) {
			kept = append(kept, s)
			continue
		}
		ids = append(ids, s.ids...)
	}
	clear(k.slices[len(kept):])
	k.slices = kept
	return ids
}

// ask returns the peer.OpAllot to send for key at now: the key's rate of
// acquires a second, and the largest token bound seen since the last ask
// (that ask's when none was); it resets those counts.
func (al *allotments) ask(key string, now time.Time) Call {
	sh := al.shard(key)
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k.maxTokens > 0 {
		k.askedBound = k.maxTokens
	}
	k.askedRate = k.rate(now)
	c := Call{Op: peer.OpAllot, Key: key, Count: uint32(min(peer.MaxAllot, max(1, k.askedRate))), Req: limiter.Request{Reserve: max(1, k.askedBound)}}
	k.uses, k.since, k.maxTokens = 0, now, 0
	return c
}

// granted installs the answer of the owner at addr to an ask sent at sent
// and answered at received (this node's clock); a failed ask (err) just
// ends the ask. A slice granted sets the key's refill (refills).
func (al *allotments) granted(key, addr string, sent, received time.Time, reserve int64, a Answer, err error) {
	sh := al.shard(key)
	defer sh.mu.Unlock()
	k := sh.keys[key]
	k.asking = false
	if err != nil {
		return
	}
	validFor, ids, derr := decodeGrant(a.State)
	switch {
	case derr != nil:
		return
	case !a.OK || len(ids) == 0:
		// Refused: the window is full, or too near its limit to share.
		// Asking again before the owner's bucket ends would be refused
		// too, and cost a call a forward.
		k.quiet = sent.Add(validFor)
		return
	}
	s := &slice{ids: ids, reserve: reserve, granted: len(ids), owner: a.Owner, addr: addr, status: a.Decision.Status, deadline: sent.Add(validFor)}
	k.slices = append(k.slices, s)
	// The owner's bucket ends, by this node's clock, between the
	// deadline (the owner measured what was left at sent, at the
	// earliest) and the deadline plus the ask's round trip (at received,
	// at the latest): an ask made then is for the next bucket.
	k.refill, k.addr = s.deadline.Add(max(0, received.Sub(sent))), addr
	if w := al.wakeAt.Load(); w == 0 || k.refill.UnixNano() < w {
		select {
		case al.nudge <- struct{}{}:
		default:
		}
	}
}

// sweep returns the admissions of slices past their deadline at now, by
// key, and drops the keys that hold no slice and are not hot (their count
// is over a second old, and no slice served them in the last second) or
// were not used since before idle.
func (al *allotments) sweep(now time.Time, idle time.Duration) map[string][]uint64 {
	out := map[string][]uint64{}
	for i := range al.shards {
		sh := &al.shards[i]
		sh.mu.Lock()
		for key, k := range sh.keys {
			if ids := k.dropExpired(now, ""); len(ids) > 0 {
				out[key] = ids
			}
			// Not hot: its count is over a second old and no slice served
			// it in the last second (a hot key's count stops while its
			// slices serve it; it must outlive its slices' end).
			cold := now.Sub(k.counting) > time.Second && now.Sub(k.served) >= time.Second
			if cold || now.Sub(k.lastActive) > idle {
				if len(k.slices) == 0 && !k.asking {
					delete(sh.keys, key)
				}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// appendGrant encodes an peer.OpAllot's answer State: how long the owner's
// bucket had left (ns), then the admissions' lease ids.
func appendGrant(b []byte, validFor time.Duration, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(max(0, validFor)))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

// decodeGrant decodes appendGrant's encoding.
func decodeGrant(b []byte) (time.Duration, []uint64, error) {
	r := peer.NewReader(b)
	validFor := time.Duration(min(r.Uvarint(), uint64(time.Hour)))
	n := r.Uvarint()
	if r.Err() == nil && n > peer.MaxAllot {
		return 0, nil, peer.ErrShort
	}
	ids := make([]uint64, 0, n)
	for range n {
		ids = append(ids, r.Uvarint())
	}
	if r.Err() == nil && r.Len() != 0 {
		return 0, nil, peer.ErrShort
	}
	return validFor, ids, r.Err()
}

// allot is the owner's side of peer.OpAllot: c.Count is the asker's acquires a
// second; it admits what the asker needs until the bucket ends (a quarter
// more), at most peer.MaxAllot and a hundredth of what the window has left in
// each limited dimension (allotShare), each reserving c.Req.Reserve tokens;
// none when that hundredth is under minSlice. Any refusal stops it.
// Callers hold the key's budget (Table.Do).
func allot(b *limiter.Budget, now time.Time, c *Call) Answer {
	st := b.Status(now) // first: it moves the key's window to now, and BucketEnd with it
	validFor := max(0, b.BucketEnd().Sub(now))
	want := int(float64(c.Count)*validFor.Seconds()*1.25) + 1
	reserve := max(1, c.Req.Reserve)
	share := int64(peer.MaxAllot)
	if st.Requests.Limit > 0 {
		share = min(share, st.Requests.Remaining/allotShare)
	}
	if st.Tokens.Limit > 0 {
		share = min(share, st.Tokens.Remaining/allotShare/reserve)
	}
	if st.Concurrency.Limit > 0 {
		share = min(share, st.Concurrency.Remaining/allotShare)
	}
	if share < minSlice {
		share = 0
	}
	want = min(want, int(share))
	ids := make([]uint64, 0, want)
	var a Answer
	for range want {
		d := b.Acquire(now, limiter.Request{Reserve: reserve, Priority: c.Req.Priority})
		if !d.Allowed {
			break
		}
		ids = append(ids, d.Lease)
	}
	a.Decision.Status = b.Status(now)
	a.OK = len(ids) > 0
	a.State = appendGrant(nil, validFor, ids)
	return a
}

// allotted serves acquire c, which this node forwards to addr, from a
// slice of its key when it can, and otherwise forwards it with forward;
// either way it keeps the key's slices: asks the owner for one when the
// key is hot, gives back the admissions of expired ones. A slice serves
// only while the owner is reachable: once its connection is down (a
// crash), the owner's admissions are left alone and the call is forwarded
// (and falls back) like any other.
func (n *Node) allotted(c *Call, addr string, forward func() (Answer, error)) (Answer, error) {
	al := n.allot
	if al == nil || c.Op != OpAcquire || c.Hops != 0 || c.Req.Wait > 0 || n.leaving.Load() || !n.peers.Up(addr) {
		return forward()
	}
	now := n.cfg.Now()
	key := c.Key // the closures below take the key, not c (Do's, on its stack)
	a, ok, expired, ask := al.take(c, now, addr)
	if len(expired) > 0 {
		n.background(func() { n.cancelAdmissions(key, expired, time.Time{}) })
	}
	if !ok {
		var err error
		if a, err = forward(); err != nil {
			return a, err
		}
		if al.forwarded(c, now) {
			ask = true
		}
	} else {
		n.counts.allotted.Add(1)
	}
	if ask {
		n.background(func() { n.askSlice(key, addr) })
	}
	return a, nil
}

// background runs fn on a goroutine Close waits for, unless the node is
// closing.
func (n *Node) background(fn func()) {
	n.bgMu.Lock()
	defer n.bgMu.Unlock()
	select {
	case <-n.stop:
		return
	default:
	}
	n.wg.Go(fn)
}

// askSlice asks key's owner, at addr, for a slice and installs it.
func (n *Node) askSlice(key, addr string) {
	sent := n.cfg.Now()
	c := n.allot.ask(key, sent)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TransferWait)
	defer cancel()
	a, err := n.Do(ctx, c)
	if err == nil && a.Owner == n.cfg.Name {
		// This node became the owner meanwhile: it decides for the key
		// itself. Give the admissions back.
		if _, ids, derr := decodeGrant(a.State); derr == nil && len(ids) > 0 {
			n.cancelAdmissions(key, ids, time.Time{})
		}
		err = ErrClosed
	}
	n.allot.granted(key, addr, sent, n.cfg.Now(), c.Req.Reserve, a, err)
}

// returnSlices gives every slice's admissions not handed out back to
// their owners: this node is leaving (Drain) and takes no new slice.
func (n *Node) returnSlices() {
	if n.allot == nil {
		return
	}
	for key, ids := range n.allot.sweep(n.cfg.Now().Add(24*time.Hour), 0) {
		n.cancelAdmissions(key, ids, time.Time{})
	}
}

// allotSweepInterval is how often expired slices are looked for; their
// admissions not handed out are cancelled at the owner by the next sweep
// at the latest.
const allotSweepInterval = 100 * time.Millisecond

// allotIdle is how long a key this node forwards for is watched after its
// last acquire.
const allotIdle = 10 * time.Second

// sweepAllotments cancels the admissions of expired slices, and those owed
// whose next try is due, and forgets the keys no longer used.
func (n *Node) sweepAllotments() {
	now := n.cfg.Now()
	for key, ids := range n.allot.sweep(now, allotIdle) {
		n.cancelAdmissions(key, ids, time.Time{})
	}
	for key, o := range n.allot.due(now) {
		n.cancelAdmissions(key, o.ids, o.since)
	}
	n.allot.forget(now)
}

// allotCollectors are the slices' metrics.
func (n *Node) allotCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_allotted_total", Help: "Acquires of hot keys this node admitted from slices their owners allotted it, without a forward.",
		}, func() float64 { return float64(n.counts.allotted.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "tokenring_allot_returned_total", Help: "Allotted admissions this node did not hand out before their bucket ended, cancelled at their owner.",
		}, func() float64 { return float64(n.counts.allotReturned.Load()) }),
	}
}
