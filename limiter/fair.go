package limiter

import (
	"math"
	"slices"
	"strings"
	"time"
)

// Fair shares: a key shared by flows (a pool by its tenants, Request.Flow)
// whose Limits.Fair is set gives each active flow a weighted max-min share
// of every limited dimension, computed afresh at each admission from what
// the flows demanded in the window.
//
// Demand. A flow's demand in a dimension is twice what its admissions
// count in the window, plus what it asked and was refused (or waits for)
// in the window, plus, for the flow asking, the request at hand; slots:
// twice those it holds (plus one for the request at hand). What a flow
// used counts twice as the headroom its next requests need: a light flow
// finds room at once instead of waiting until the heavy flows' use leaves
// the window, which, under a sliding window filled whenever room frees,
// can take most of a window. The headroom costs the heavy flows at most
// what the light ones use, and nothing while nobody is refused.
//
// Share (water-filling). With capacity C (the limit) and demands d_i of
// weights w_i, the level λ is the largest with Σ min(d_i, λ·w_i) = C, and
// flow i's share is min(d_i, λ·w_i): a flow that wants less than its
// weighted part gets all it wants, and what it leaves is divided among the
// others by weight. The key is contended while some flow was refused (or
// waited) in the window; until then no share refuses, and a lone flow may
// use the whole key. Once contended, a request is admitted only if its
// flow stays within its share; the
// rest of the key's rules (room, slots, no barging past waiters) hold as
// for any key. The shares converge within one window of contention: what
// a flow took before it began is forgotten as it leaves the window.
//
// Waiters are served by weighted fair queuing across flows within each
// priority class (queue.go): a waiter's tag is its flow's last tag (or
// the virtual time, the tag of the waiter last admitted, if that is later)
// plus its cost (its reserved tokens, or 1 where tokens are unlimited)
// divided by its weight; a class is served in tag order, and a settle
// corrects the flow's last tag by its real tokens. Waiters are not held to
// their shares: the order of service is their fairness.
//
// Bounds: a key tracks at most MaxFlows flows; a flow that holds and
// wants nothing in the window is forgotten, and a new flow past the bound
// is treated as no flow (first come, first served). Flows are not part of
// a snapshot: a key restored elsewhere, or whose window changes, starts
// its shares afresh (its own windows stay exact).

// MaxFlows bounds the flows a fair key tracks.
const MaxFlows = 1024

// fairness is a fair key's flows; nil until the first flow asks.
type fairness struct {
	flows   map[string]*flow
	leases  map[uint64]*flow // each live lease's flow
	vtime   float64          // the tag of the waiter admitted last
	scratch []demand
	// wantUntil is when the last refusal (or wait) noted leaves the
	// window, unix ns: the key is contended before it.
	wantUntil int64
	// The water levels of the three dimensions (level), computed at the
	// newest bucket levelHead and read levelUses times since.
	levels    [3]float64
	levelSet  [3]bool
	levelHead int64
	levelUses int
	// forgotHead is the newest bucket at the last forgetIdleFlows.
	forgotHead int64
}

// flow is one flow's use of a fair key: rings of what its admissions count
// and what it was refused, on the key's buckets.
type flow struct {
	name   string
	weight int64
	head   int64   // absolute index of the newest bucket, as the key's
	cnt    []int64 // 4 rings of N+1: requests, tokens admitted; requests, tokens refused
	sum    [4]int64
	slots  int64   // live leases
	finish float64 // the tag of its last waiter
}

// The rings of a flow.
const (
	flowReq = iota
	flowTok
	flowWantReq
	flowWantTok
)

// demand is one flow's demand and weight in one dimension.
type demand struct{ d, w int64 }

// flowOf returns r's flow at the fair key b at t, made if new; nil if r
// names none, b is not fair, or b tracks MaxFlows flows already.
func (b *Budget) flowOf(t int64, r *Request) *flow {
	if !b.lim.Fair || r.Flow == "" {
		return nil
	}
	if b.fr == nil {
		b.fr = &fairness{flows: make(map[string]*flow), leases: make(map[uint64]*flow)}
	}
	f, ok := b.fr.flows[r.Flow]
	if !ok {
		if len(b.fr.flows) >= MaxFlows {
			b.forgetIdleFlows()
		}
		if len(b.fr.flows) >= MaxFlows {
			return nil
		}
		f = &flow{name: r.Flow, head: b.head, cnt: make([]int64, 4*b.ring())}
		b.fr.flows[r.Flow] = f
	}
	f.weight = max(r.Weight, 1)
	b.slideFlow(f)
	return f
}

// idle reports whether f holds and wants nothing (its rings slid).
func (f *flow) idle() bool { return f.slots == 0 && f.sum == [4]int64{} }

// forgetIdleFlows drops the flows that hold and want nothing, at most
// once a bucket (a key at MaxFlows asks for it at every new flow).
func (b *Budget) forgetIdleFlows() {
	if b.fr.forgotHead == b.head {
		return
	}
	b.fr.forgotHead = b.head
	for name, f := range b.fr.flows {
		if b.slideFlow(f); f.idle() {
			delete(b.fr.flows, name)
		}
	}
}

// slideFlow brings f's rings to b's head.
func (b *Budget) slideFlow(f *flow) {
	m := int64(b.ring())
	for k := f.head + 1; k <= b.head && k <= f.head+m; k++ {
		i := ringIndex(k, int(m))
		for r := range 4 {
			f.sum[r] -= f.cnt[r*int(m)+i]
			f.cnt[r*int(m)+i] = 0
		}
	}
	f.head = b.head
}

// addFlow adds v to ring r of f at live bucket k.
func (b *Budget) addFlow(f *flow, r int, k, v int64) {
	if f == nil || !b.live(k) {
		return
	}
	b.slideFlow(f)
	i := r*b.ring() + ringIndex(k, b.ring())
	nv := min(max(f.cnt[i]+v, 0), maxUnits)
	f.sum[r] += nv - f.cnt[i]
	f.cnt[i] = nv
}

// overShare returns the first dimension, requests, tokens, concurrency, in
// which admitting n would take flow f past its share, and how long until
// it would not if nothing else happened; None if it stays within.
func (b *Budget) overShare(t int64, f *flow, n need) (Dimension, int64) {
	if !b.contended() {
		return None, 0 // nobody was refused in the window: no share refuses
	}
	b.slideFlow(f)
	for dim, d := range [...]struct {
		limit, ask int64
		used, want int64
	}{
		{b.lim.Requests, n.req, f.sum[flowReq], f.sum[flowWantReq]},
		{b.lim.Tokens, n.tok, f.sum[flowTok], f.sum[flowWantTok]},
		{b.lim.Concurrency, n.slots, f.slots, 0},
	} {
		if d.limit <= 0 {
			continue
		}
		share := min(2*d.used+d.want+d.ask, int64(min(b.level(dim, d.limit)*float64(f.weight), 1<<62)))
		if d.used+d.ask > share {
			return FairShare, b.shareWait(t, f, Dimension(int(Requests)+dim), d.used+d.ask-share)
		}
	}
	return None, 0
}

// contended reports whether a flow was refused (or waited) in the window
// (a bound: an admitted waiter's want taken back does not shorten it).
func (b *Budget) contended() bool { return b.last < b.fr.wantUntil }

// levelEvery bounds how many admissions use one water level before it is
// computed again (it is, too, whenever the key's newest bucket moves).
const levelEvery = 32

// level is the water level λ of dimension dim (0 requests, 1 tokens, 2
// slots) with capacity c: the largest with Σ min(d_i, λ·w_i) = c over the
// flows' demands d_i (twice what they use, plus what they want) and
// weights w_i; +Inf when every demand fits. It is computed from every
// flow (sorted by d/w) at most once a bucket or every levelEvery
// admissions, and read between.
func (b *Budget) level(dim int, c int64) float64 {
	fr := b.fr
	if fr.levelHead == b.head && fr.levelUses < levelEvery && fr.levelSet[dim] {
		fr.levelUses++
		return fr.levels[dim]
	}
	if fr.levelHead != b.head || fr.levelUses >= levelEvery {
		fr.levelSet = [3]bool{}
		fr.levelHead, fr.levelUses = b.head, 0
	}
	ds := fr.scratch[:0]
	var weights int64
	for _, g := range fr.flows {
		b.slideFlow(g)
		d := [3]int64{2*g.sum[flowReq] + g.sum[flowWantReq], 2*g.sum[flowTok] + g.sum[flowWantTok], 2 * g.slots}[dim]
		ds = append(ds, demand{d, g.weight})
		weights += g.weight
	}
	slices.SortFunc(ds, func(x, y demand) int { // by d/w
		switch l, r := x.d*y.w, y.d*x.w; {
		case l < r:
			return -1
		case l > r:
			return 1
		}
		return 0
	})
	left, lv := c, math.Inf(1)
	for _, d := range ds {
		if float64(d.d)*float64(weights) > float64(left)*float64(d.w) { // d/w above the level: every flow from here is capped
			lv = float64(left) / float64(weights)
			break
		}
		left, weights = left-d.d, weights-d.w
	}
	fr.scratch = ds
	fr.levels[dim], fr.levelSet[dim] = lv, true
	return lv
}

// shareWait is how long after t f's use of dim drops by excess as its
// buckets leave the window (for slots: the lease TTL, a bound).
func (b *Budget) shareWait(t int64, f *flow, dim Dimension, excess int64) int64 {
	r := flowReq
	switch dim {
	case Tokens:
		r = flowTok
	case Concurrency:
		return int64(b.lim.LeaseTTL)
	}
	N := int64(b.nb)
	for k := b.head - N; k <= b.head; k++ {
		excess -= f.cnt[r*b.ring()+ringIndex(k, b.ring())]
		if excess <= 0 {
			return max(0, (k+N+1)*b.width-t)
		}
	}
	return int64(b.lim.Window)
}

// refusedFlow counts what f asked and was refused, in the current bucket.
func (b *Budget) refusedFlow(f *flow, n need) {
	b.addFlow(f, flowWantReq, b.head, n.req)
	b.addFlow(f, flowWantTok, b.head, n.tok)
	b.fr.wantUntil = max(b.fr.wantUntil, (b.head+int64(b.nb)+1)*b.width)
}

// admittedFlow counts lease id's admission n for f.
func (b *Budget) admittedFlow(f *flow, id uint64, n need) {
	if f == nil {
		return
	}
	b.addFlow(f, flowReq, b.head, n.req)
	b.addFlow(f, flowTok, b.head, n.tok)
	f.slots++
	b.fr.leases[id] = f
}

// endFlow ends lease id's part in its flow: its slot, and delta tokens
// (a settle's correction, a cancel's removal) and reqs requests (a
// cancel's) at the lease's bucket k; and corrects the flow's last tag by
// the tokens. A lease of no flow changes nothing.
func (b *Budget) endFlow(id uint64, k, reqs, delta int64) {
	if b.fr == nil {
		return
	}
	f, ok := b.fr.leases[id]
	if !ok {
		return
	}
	delete(b.fr.leases, id)
	f.slots--
	b.addFlow(f, flowReq, k, reqs)
	b.addFlow(f, flowTok, k, delta)
	f.finish += float64(delta) / float64(f.weight)
}

// queueTag is the tag of r, needing n, queued at t: its arrival (the
// ticket) at a key that is not fair, or for no flow; at a fair key its
// flow's last tag, or the virtual time if later, plus its cost (tokens,
// or requests where tokens are unlimited) over its weight.
func (b *Budget) queueTag(t int64, r Request, n need) float64 {
	f := b.flowOf(t, &r)
	if f == nil {
		if b.fr != nil {
			return b.fr.vtime
		}
		return float64(b.seq)
	}
	cost := n.req
	if b.lim.Tokens > 0 {
		cost = n.tok
	}
	f.finish = max(b.fr.vtime, f.finish) + float64(cost)/float64(f.weight)
	b.refusedFlow(f, n) // wanted while it waits (unqueuedFlow takes it back if admitted)
	return f.finish
}

// unqueuedFlow notes that waiter w of a fair key left the queue: admitted,
// its want is taken back (its admission counts it) and the virtual time
// moves to its tag; not admitted, its tag's cost is given back to its
// flow, which did not get that service.
func (b *Budget) unqueuedFlow(w *waiter, admitted bool) {
	if b.fr == nil || w.flow == "" {
		return
	}
	f, ok := b.fr.flows[w.flow]
	if !ok {
		return
	}
	if !admitted {
		cost := w.hits
		if b.lim.Tokens > 0 {
			cost = w.tok
		}
		f.finish -= float64(cost) / float64(f.weight)
		return
	}
	b.fr.vtime = max(b.fr.vtime, w.tag)
	k := floorDiv(w.enq, b.width)
	b.addFlow(f, flowWantReq, k, -w.hits)
	b.addFlow(f, flowWantTok, k, -w.tok)
}

// FairContended reports whether b is fair and some flow was refused in
// the window (its demands were past its limits): the owner then grants no
// slice of it, since a slice's admissions are of no flow.
func (b *Budget) FairContended(now time.Time) bool {
	if b.fr == nil {
		return false
	}
	b.tick(now.UnixNano())
	return b.contended()
}

// decideFair is decide at a fair key for flow f: admitted if the key has
// room and f stays within its share, whatever waits (a waiter that fits
// both would have been admitted by the last Wake); else queued if it may
// wait, else refused for the key's limit or for the share.
func (b *Budget) decideFair(t int64, r Request, n need, f *flow) Decision {
	d := b.blocking(n)
	wait := int64(0)
	if d == None {
		d, wait = b.overShare(t, f, n)
	} else {
		wait, _ = b.fitAfter(t, n)
	}
	switch {
	case d == None:
		return b.admit(t, n, r.Lease, r.Price, f)
	case r.Wait > 0 && b.q.len() < b.pol.queueLen():
		return b.enqueue(t, r, n, d)
	case r.Wait > 0:
		return b.refuse(t, QueueFull, wait)
	}
	return b.refuse(t, d, wait)
}

// fairHead is the class and index of the waiter Wake takes next at a fair
// key, skipping those whose flow is past its share (they wait on): in
// each class the first whose flow is within its share (or that names no
// flow), the two compared as head compares fronts; -1 if none.
func (b *Budget) fairHead(t int64) (int, int) {
	var first [2]int
	over := make(map[*flow]bool) // a flow's waiters past its share: one water-filling per flow
	for c := range b.q.cls {
		first[c] = -1
		q := &b.q.cls[c]
		for i := q.h; i < len(q.w); i++ {
			w := &q.w[i]
			f := b.fr.flows[w.flow]
			if f == nil || b.blocking(w.need()) != None {
				first[c] = i // no flow, or the key is full: it decides the wait
				break
			}
			o, seen := over[f]
			if !seen {
				d, _ := b.overShare(t, f, w.need())
				o = d != None
				over[f] = o
			}
			if !o {
				first[c] = i
				break
			}
		}
	}
	in, ba := first[Interactive], first[Batch]
	switch {
	case in < 0:
		return int(Batch), ba
	case ba < 0:
		return int(Interactive), in
	case b.q.cls[Batch].w[ba].enq+b.pol.aging() < b.q.cls[Interactive].w[in].enq:
		return int(Batch), ba
	}
	return int(Interactive), in
}

// FlowShare is one flow's use of a fair key and its share, per dimension:
// [0] requests and [1] tokens in the window, [2] slots held.
type FlowShare struct {
	Flow   string
	Weight int64
	Used   [3]int64
	// Share is what the flow may use now: its weighted max-min share
	// while the key is contended, the whole limit while it is not; 0 for
	// an unlimited dimension.
	Share [3]int64
}

// Shares returns, at now, the use and share of every flow of a fair key
// that holds or wants something in the window; nil for a key that is not
// fair or has no flow.
func (b *Budget) Shares(now time.Time) []FlowShare {
	b.tick(now.UnixNano())
	if b.fr == nil {
		return nil
	}
	limits := [3]int64{b.lim.Requests, b.lim.Tokens, b.lim.Concurrency}
	contended := b.contended()
	var out []FlowShare
	for _, f := range b.fr.flows {
		if b.slideFlow(f); f.idle() {
			continue
		}
		s := FlowShare{Flow: f.name, Weight: f.weight, Used: [3]int64{f.sum[flowReq], f.sum[flowTok], f.slots}}
		for dim, c := range limits {
			switch {
			case c <= 0:
			case !contended:
				s.Share[dim] = c
			default:
				s.Share[dim] = min(c, int64(min(b.level(dim, c)*float64(f.weight), 1<<62)))
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y FlowShare) int { return strings.Compare(x.Flow, y.Flow) })
	return out
}
