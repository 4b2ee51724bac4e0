package limiter

import "math"

// The two sliding windows of a Budget (requests and tokens) share one ring of
// time-bucketed counters, stored in Budget.cnt: cnt[0:N+1] counts requests and
// cnt[N+1:2N+2] counts tokens, where N is the number of buckets per window.
//
// Time is cut into buckets of width w = ceil(Window/N) nanoseconds; bucket k
// (an absolute index, k = floor(unixNano/w)) covers [k·w, (k+1)·w). At a time t
// in bucket c the window counts buckets c−N … c: exactly the N+1 buckets whose
// range intersects (t−N·w, t] ⊇ (t−Window, t]. Bucket k therefore stops
// counting at (k+N+1)·w, its end plus the window. An admission at time s is
// counted by every check made at a time t with t−Window < s, so in any interval
// of length Window the admitted units never exceed the limit (conservatively:
// up to one bucket width longer than strictly needed). Memory is constant per
// key whatever the rate; sliding the ring costs O(1) amortised per operation,
// and at most N+1 counter resets after any gap.
//
// Counts only ever receive amounts that were added to the same bucket before
// (credits, cancels) or non-negative amounts, so they stay ≥ 0; they are
// clamped to [0, maxUnits] so that sums can never overflow even for garbage
// usage reports.

const (
	// maxUnits caps one bucket's count and one request's token amount
	// (2.8e14 tokens), so sums over maxBuckets+1 buckets fit in an int64.
	maxUnits = 1 << 48
	// maxBuckets caps Policy.Buckets.
	maxBuckets = 1 << 12
	// gone marks a lease whose bucket is no longer in the window (after a
	// change of bucket width): its credits are dropped, its debits go to the
	// current bucket, exactly as for a bucket that slid out.
	gone = math.MinInt64
)

// clampUnits limits a caller-supplied token amount to [0, maxUnits].
func clampUnits(x int64) int64 {
	if x < 0 {
		return 0
	}
	if x > maxUnits {
		return maxUnits
	}
	return x
}

// floorDiv is a/b rounded towards −∞ (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// ringIndex maps absolute bucket k to its slot in a ring of m counters.
func ringIndex(k int64, m int) int {
	r := k % int64(m)
	if r < 0 {
		r += int64(m)
	}
	return int(r)
}

// bucketWidth is ceil(window/n) in nanoseconds, at least 1, so that n buckets
// always cover at least the whole window.
func bucketWidth(window int64, n int) int64 {
	w := (window + int64(n) - 1) / int64(n)
	if w < 1 {
		w = 1
	}
	return w
}

// need is what one admission (or several, summed) takes from each dimension.
type need struct {
	req, tok, slots int64
	cost            int64 // picodollars of the spend limit
}

// admission is the need of one admission counting hits requests (≥ 1) and
// reserving tok tokens: it holds one slot whatever hits is.
func admission(hits, tok int64) need { return need{req: hits, tok: tok, slots: 1} }

// hitsOf is the number of requests r counts: Request.Hits, 1 if that is
// not positive, capped at maxUnits.
func hitsOf(r Request) int64 {
	if r.Hits <= 1 { // the common case: one branch, no clamping
		return 1
	}
	return min(r.Hits, maxUnits)
}

func (a need) plus(b need) need {
	return need{a.req + b.req, a.tok + b.tok, a.slots + b.slots, a.cost + b.cost}
}

// advance slides the window so that its newest bucket is the one holding t.
// Time never goes backwards for a Budget: an earlier t (a clock step back, a
// state restored on a node whose clock lags) leaves the window where it is.
func (b *Budget) advance(t int64) {
	if t <= b.last {
		return
	}
	b.last = t
	c := floorDiv(t, b.width)
	if c <= b.head {
		return
	}
	if c-b.head > int64(b.nb) {
		clear(b.cnt)
		b.sumReq, b.sumTok = 0, 0
	} else {
		m := b.ring()
		for k := b.head + 1; k <= c; k++ {
			i := ringIndex(k, m)
			b.sumReq -= b.cnt[i]
			b.sumTok -= b.cnt[m+i]
			b.cnt[i], b.cnt[m+i] = 0, 0
		}
	}
	b.head = c
}

// ring is the number of buckets the ring holds: N+1.
func (b *Budget) ring() int { return int(b.nb) + 1 }

// live reports whether absolute bucket k is still counted by the window.
func (b *Budget) live(k int64) bool {
	return k <= b.head && k >= b.head-int64(b.nb)
}

// addReq adds d requests to live bucket k.
func (b *Budget) addReq(k, d int64) {
	i := ringIndex(k, b.ring())
	v := min(max(b.cnt[i]+d, 0), maxUnits)
	b.sumReq += v - b.cnt[i]
	b.cnt[i] = v
}

// addTok adds d tokens (negative: a credit) to live bucket k.
func (b *Budget) addTok(k, d int64) {
	i := b.ring() + ringIndex(k, b.ring())
	v := min(max(b.cnt[i]+d, 0), maxUnits)
	b.sumTok += v - b.cnt[i]
	b.cnt[i] = v
}

// fitWindow returns how long after t the window starting at cnt[base] (requests
// base 0, tokens base N+1), currently summing to sum, has room for n more
// units under limit: 0 if it fits now. ok is false if it can never fit
// (n > limit). It is fitWindowWith with nothing extra.
func (b *Budget) fitWindow(t int64, base int, limit, sum, n int64) (wait int64, ok bool) {
	if limit > 0 && n > limit {
		return 0, false
	}
	return b.fitWindowWith(t, base, limit, sum, n, b.head, 0), true
}

// fitWindowWith returns how long after t the window starting at cnt[base],
// currently summing to sum, has room for n more units under limit once it
// also holds extra more units in bucket extraK (≥ head, so they leave the
// window last): 0 if it fits now. The extra units are the queue head,
// admitted later (fitBehind). It assumes n ≤ limit and extra ≤ limit. The
// answer is exact: it is the expiry time of the oldest bucket whose
// departure brings the sum low enough.
func (b *Budget) fitWindowWith(t int64, base int, limit, sum, n, extraK, extra int64) int64 {
	if limit <= 0 {
		return 0
	}
	excess := sum + extra + n - limit
	if excess <= 0 {
		return 0
	}
	N := int64(b.nb)
	for k := b.head - N; k <= b.head; k++ {
		excess -= b.cnt[base+ringIndex(k, b.ring())]
		if excess <= 0 {
			return max(0, (k+N+1)*b.width-t)
		}
	}
	// What is left is extra, which leaves with bucket extraK. (With no
	// extra this is unreachable while sum is the sum of the buckets.)
	return max(0, (extraK+N+1)*b.width-t)
}

// resetWindow returns how long after t the window starting at cnt[base] is
// empty: the expiry of its newest non-zero bucket, 0 if it is empty.
func (b *Budget) resetWindow(t int64, base int) int64 {
	N := int64(b.nb)
	for k := b.head; k >= b.head-N; k-- {
		if b.cnt[base+ringIndex(k, b.ring())] != 0 {
			return max(0, (k+N+1)*b.width-t)
		}
	}
	return 0
}

// rebucket changes the bucket width and count (after a change of Window or
// Policy.Buckets) without letting anything be forgotten early. Every unit in
// old bucket k was admitted at a time ≤ min(end of k, last), so it moves to
// the new bucket holding that instant: it stays counted at least until its
// admission time plus the new window. Units whose new bucket is already out
// of the new window at last are dropped; leases follow their units, or are
// marked gone with them.
func (b *Budget) rebucket(width int64, nb int) {
	if width == b.width && nb == int(b.nb) {
		return
	}
	oldW, oldN, oldHead, old := b.width, int(b.nb), b.head, b.cnt
	b.width, b.nb, b.head = width, uint16(nb), floorDiv(b.last, width)
	remap := func(k int64) (int64, bool) {
		if k < oldHead-int64(oldN) || k > oldHead {
			return 0, false
		}
		nk := floorDiv(min((k+1)*oldW-1, b.last), width)
		return nk, b.live(nk)
	}
	b.cnt = make([]int64, 2*(nb+1))
	b.sumReq, b.sumTok = 0, 0
	b.fr = nil // the flows' rings had the old buckets: shares start afresh
	for k := oldHead - int64(oldN); k <= oldHead; k++ {
		if nk, ok := remap(k); ok {
			i := ringIndex(k, oldN+1)
			b.addReq(nk, old[i])
			b.addTok(nk, old[oldN+1+i])
		}
	}
	for id, l := range b.leases {
		if nk, ok := remap(l.bucket); ok {
			l.bucket = nk
		} else {
			l.bucket = gone
		}
		b.leases[id] = l
	}
}
