package allot

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/internal/wire"
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

// decision is the answer for one admission handed out: the owner's status
// when the slice was made, which already counts the whole slice. Callers
// see no more remaining than the owner had then (the slice's unused part
// is this node's alone, and only until the slice ends); and the fallback,
// which takes a forwarded answer's status as the owner's report, must
// never learn of admissions nobody counted (a degraded share computed from
// a slice's leftovers once its owner is out of reach would admit them).
func (s *slice) decision(id uint64) limiter.Decision {
	return limiter.Decision{Allowed: true, Lease: id, Reserved: s.reserve, Status: s.status}
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

// Holder is what a node that forwards keys knows of their heat and holds
// of their owners': its slices, by key, in shards so that the acquires of
// different keys do not contend; the refills due; what it gave back lately
// and what it still owes (giveback.go). Its methods take the time; the
// node carries out what they say (node/allot.go). Safe for concurrent use.
type Holder struct {
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

// Nudge is where the refilling goroutine hears of a refill due earlier
// than the one it sleeps until.
func (al *Holder) Nudge() <-chan struct{} { return al.nudge }

// NewHolder returns an empty Holder for which a key is hot at rate
// forwarded acquires a second.
func NewHolder(rate int) *Holder {
	al := &Holder{rate: rate, seed: maphash.MakeSeed(), returns: newReturns(), nudge: make(chan struct{}, 1)}
	for i := range al.shards {
		al.shards[i].keys = make(map[string]*hotKey)
	}
	return al
}

// shard returns key's shard, locked; the caller unlocks it.
func (al *Holder) shard(key string) *allotShard {
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

// sliceable reports whether an admission from a slice can answer r: it is
// one request under an id its owner drew. An acquire that counts several
// requests (Hits > 1) or names its lease (Lease, so that a repeat of it is
// charged once) is its owner's to decide: no slice serves it, and it does
// not make its key hot (slices it could not use would idle).
func sliceable(r limiter.Request) bool { return r.Hits <= 1 && r.Lease == 0 }

// Take serves acquire c from a slice of its key, at now, while the key is
// forwarded to addr. expired returns the admissions of slices past their
// deadline or of another owner, to give back; ask is true when a new slice
// should be asked for. An acquire no slice can serve (sliceable) is left
// alone: ok false, nothing else.
func (al *Holder) Take(c *peer.Call, now time.Time, addr string) (a peer.Answer, ok bool, expired []uint64, ask bool) {
	if !sliceable(c.Req) {
		return peer.Answer{}, false, nil, false
	}
	tokens, bounded := requestBound(c.Req)
	sh := al.shard(c.Key)
	defer sh.mu.Unlock()
	k := sh.keys[c.Key]
	if k == nil {
		return peer.Answer{}, false, nil, false
	}
	k.lastActive = now
	expired = k.dropExpired(now, addr)
	if bounded {
		k.maxTokens = max(k.maxTokens, tokens)
		for _, s := range k.slices {
			if id, ok := s.take(now, tokens); ok {
				k.uses++
				k.served = now
				a = peer.Answer{Decision: s.decision(id), Owner: s.owner}
				return a, true, expired, k.wantsMore(now)
			}
		}
	}
	return peer.Answer{}, false, expired, false
}

// Sliced reports whether the holder holds a slice of key's owner now:
// an acquire of key may be served here (Take) rather than forwarded.
func (al *Holder) Sliced(key string) bool {
	sh := al.shard(key)
	defer sh.mu.Unlock()
	k := sh.keys[key]
	return k != nil && len(k.slices) > 0
}

// Forwarded counts acquire c, which was forwarded, at now and reports
// whether a slice should be asked for. An acquire no slice could serve
// (sliceable) is not counted.
func (al *Holder) Forwarded(c *peer.Call, now time.Time) (ask bool) {
	if !sliceable(c.Req) {
		return false
	}
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
func (al *Holder) stillHot(k *hotKey, now time.Time) bool {
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
func (al *Holder) atRate(n int, elapsed time.Duration) bool {
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

// Ask returns the peer.OpAllot to send for key at now: the key's rate of
// acquires a second, and the largest token bound seen since the last ask
// (that ask's when none was); it resets those counts.
func (al *Holder) Ask(key string, now time.Time) peer.Call {
	sh := al.shard(key)
	defer sh.mu.Unlock()
	k := sh.keys[key]
	if k.maxTokens > 0 {
		k.askedBound = k.maxTokens
	}
	k.askedRate = k.rate(now)
	c := peer.Call{Op: peer.OpAllot, Key: key, Count: uint32(min(peer.MaxAllot, max(1, k.askedRate))), Req: limiter.Request{Reserve: max(1, k.askedBound)}}
	k.uses, k.since, k.maxTokens = 0, now, 0
	return c
}

// Granted installs the answer of the owner at addr to an ask sent at sent
// and answered at received (this node's clock); a failed ask (err) just
// ends the ask. A slice granted sets the key's refill (refills).
func (al *Holder) Granted(key, addr string, sent, received time.Time, reserve int64, a peer.Answer, err error) {
	sh := al.shard(key)
	defer sh.mu.Unlock()
	k := sh.keys[key]
	k.asking = false
	if err != nil {
		return
	}
	validFor, ids, derr := DecodeGrant(a.State)
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

// Sweep returns the admissions of slices past their deadline at now, by
// key, and drops the keys that hold no slice and are not hot (their count
// is over a second old, and no slice served them in the last second) or
// were not used since before idle.
func (al *Holder) Sweep(now time.Time, idle time.Duration) map[string][]uint64 {
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

// AppendGrant encodes an peer.OpAllot's answer State: how long the owner's
// bucket had left (ns), then the admissions' lease ids.
func AppendGrant(b []byte, validFor time.Duration, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(max(0, validFor)))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

// DecodeGrant decodes AppendGrant's encoding.
func DecodeGrant(b []byte) (time.Duration, []uint64, error) {
	r := wire.NewReader(b)
	validFor := time.Duration(min(r.Uvarint(), uint64(time.Hour)))
	n := r.Uvarint()
	if r.Err() == nil && n > peer.MaxAllot {
		return 0, nil, wire.ErrShort
	}
	ids := make([]uint64, 0, n)
	for range n {
		ids = append(ids, r.Uvarint())
	}
	if r.Err() == nil && r.Len() != 0 {
		return 0, nil, wire.ErrShort
	}
	return validFor, ids, r.Err()
}

// Allot is the owner's side of peer.OpAllot: c.Count is the asker's acquires a
// second; it admits what the asker needs until the bucket ends (a quarter
// more), at most peer.MaxAllot and a hundredth of what the window has left in
// each limited dimension (allotShare), each reserving c.Req.Reserve tokens;
// none when that hundredth is under minSlice. Any refusal stops it.
// Callers hold the key's budget (Table.Do).
func Allot(b *limiter.Budget, now time.Time, c *peer.Call) peer.Answer {
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
	if share < minSlice || st.Spend.Limit > 0 || b.FairContended(now) {
		share = 0 // a budget's key is never sliced (each request's cost is its own price's), a contended fair key neither (a slice's admissions are of no flow)
	}
	want = min(want, int(share))
	ids := make([]uint64, 0, want)
	var a peer.Answer
	for range want {
		d := b.Acquire(now, limiter.Request{Reserve: reserve, Priority: c.Req.Priority})
		if !d.Allowed {
			break
		}
		ids = append(ids, d.Lease)
	}
	a.Decision.Status = b.Status(now)
	a.OK = len(ids) > 0
	a.State = AppendGrant(nil, validFor, ids)
	return a
}
