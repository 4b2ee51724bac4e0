package router

// The descriptor keys (d:...) of one Envoy rate limit request: its charges
// decided all or nothing in the order of their keys (or each on its own),
// and its checks, settles and charges beside them.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// MaxHits is the most hits one DecideHits call takes: an Envoy request's
// descriptors. Each key is reserved by a call of its own (reserveAll over
// one side), so the bound is not MaxSides; it only caps the work a single
// request can ask of the owners.
const MaxHits = 64

// ErrTooManyHits is DecideHits's error for more than MaxHits hits.
var ErrTooManyHits = fmt.Errorf("more than %d descriptors in one request", MaxHits)

// Hit is one descriptor key a request acts on.
type Hit struct {
	// Op is what the key's owner does:
	//   - node.OpAcquire admits Req (Req.Hits requests, the tokens its
	//     estimate reserves, one slot, under the lease id Req.Lease when
	//     not 0), or refuses it;
	//   - node.OpStatus only reads the key's status (Envoy's hits_addend 0);
	//   - node.OpSettle settles lease Lease with Usage, freeing its slot
	//     (the second call of a token reservation);
	//   - node.OpCharge counts Usage's tokens in the key's window, never
	//     refused (usage reported with no reservation to settle).
	Op  node.Op
	Key string // a descriptor key, "d:..."
	Req limiter.Request
	// Limits, on an OpAcquire, are the requests, tokens and concurrency the
	// request sent for the key (limiter.Budget.SetSentLimits); nil: the
	// owner's.
	Limits *limiter.Limits
	Lease  uint64        // OpSettle
	Usage  limiter.Usage // OpSettle, OpCharge
	// Shadow marks a limit in shadow mode: its OpAcquire is decided and
	// reported, but its refusal refuses none of the others.
	Shadow bool
}

// HitResult is what one Hit came to.
type HitResult struct {
	// Held: an OpAcquire admitted and still charged (false when this key
	// refused, when another key's refusal rolled it back, or when it was
	// not asked). For OpSettle: the lease was found and settled; for
	// OpCharge: the owner counted it (else it is owed, as a debt).
	Held bool
	// Refused: this key refused its OpAcquire, for Reason (a
	// limiter.Dimension's String), with RetryAfter the time until it would
	// fit if nothing else happened.
	Refused    bool
	Reason     string
	RetryAfter time.Duration
	// Status is the key's status after this request: a reservation
	// rolled back is taken out of it again, a key not asked (after an
	// all-or-nothing refusal) was read with an OpStatus.
	Status limiter.Status
	// Lease is the lease id of an OpAcquire admitted (a rolled-back one's
	// too, cancelled since).
	Lease uint64
	Owner string
	// Fallback: the fallback decided, the key's owner being out of reach
	// (an OpStatus, OpSettle or OpCharge then reports a zero Status).
	Fallback bool

	reserved int64 // the tokens an admitted OpAcquire reserved
}

// DecideHits runs hits, one Envoy request's descriptor keys, filling out
// (len(hits) of it) in the order of hits, and reports whether a key that
// is not in shadow mode refused its OpAcquire.
//
// First every OpSettle and OpCharge, each on its own (usage being
// reported: nothing refuses it). Then the OpAcquires: with allOrNothing,
// reserved one after the other in the order of their keys (hits of the
// same key in their order in hits), and when one that is not Shadow
// refuses, every reservation made is cancelled, last first, and the
// acquires not asked yet only read their status; so nothing of a refused
// request stays charged, and two requests contending for the last units
// of two keys cannot each take one and refuse each other (every request
// reserves the keys it shares with another in the same order). Without
// allOrNothing each OpAcquire is decided on its own (Envoy's reference
// service: a refused descriptor leaves the others charged). Last every
// OpStatus.
//
// An error (more than MaxHits hits, an owner alive but too slow, a full
// table: see decide) cancels every reservation this call made; settles
// and charges already made stay.
func (r *Router) DecideHits(ctx context.Context, hits []Hit, allOrNothing bool, out []HitResult) (refused bool, err error) {
	if len(hits) > MaxHits {
		return false, ErrTooManyHits
	}
	out = out[:len(hits)]
	clear(out)
	for i := range hits {
		switch hits[i].Op {
		case node.OpSettle:
			err = r.settleHit(ctx, &hits[i], &out[i])
		case node.OpCharge:
			err = r.chargeHit(ctx, &hits[i], &out[i])
		case node.OpAcquire, node.OpStatus:
		default:
			err = fmt.Errorf("descriptor %s: op %v is not a hit's", hits[i].Key, hits[i].Op)
		}
		if err != nil {
			return false, err
		}
	}
	var order [MaxHits]int
	n := 0
	for i := range hits {
		if hits[i].Op == node.OpAcquire {
			order[n] = i
			n++
		}
	}
	if allOrNothing {
		slices.SortStableFunc(order[:n], func(a, b int) int { return cmp.Compare(hits[a].Key, hits[b].Key) })
	}
	for k, i := range order[:n] {
		if refused && allOrNothing {
			if err := r.statusHit(ctx, &hits[i], &out[i]); err != nil {
				return r.rollbackHits(hits, out, order[:k], err)
			}
			continue
		}
		if err := r.acquireHit(ctx, &hits[i], &out[i]); err != nil {
			return r.rollbackHits(hits, out, order[:k], err)
		}
		if out[i].Refused && !hits[i].Shadow {
			refused = true
			if allOrNothing {
				r.rollbackHits(hits, out, order[:k], nil)
			}
		}
	}
	for i := range hits {
		if hits[i].Op == node.OpStatus {
			if err := r.statusHit(ctx, &hits[i], &out[i]); err != nil {
				return r.rollbackHits(hits, out, order[:n], err)
			}
		}
	}
	return refused, nil
}

// acquireHit reserves h's key alone (reserveAll over one side).
func (r *Router) acquireHit(ctx context.Context, h *Hit, res *HitResult) error {
	var ss sideSet
	_, name, _ := SplitKey(h.Key)
	ss.add(Side{Key: h.Key, Kind: KeyDescriptor, Name: name})
	ss.sent[0] = h.Limits
	v, _, err := r.reserveAll(ctx, h.Req, &ss, 0)
	if err != nil {
		return err
	}
	res.Status, res.Owner, res.Fallback = v.Status, v.Owner, v.Fallback
	if !v.Allowed {
		res.Refused, res.Reason, res.RetryAfter = true, v.Reason, v.RetryAfter
		return nil
	}
	side := v.Lease.Sides()[0]
	res.Held, res.Lease, res.Fallback, res.reserved = true, side.ID, side.Fallback, v.Reserved
	return nil
}

// rollbackHits cancels the reservations held by the hits at indexes done,
// the last reserved first, and reports each key's status without its
// reservation: read again after a refusal (err nil), else worked out from
// the status its admission reported. It returns err (refused false: an
// error refuses nothing by itself).
func (r *Router) rollbackHits(hits []Hit, out []HitResult, done []int, err error) (bool, error) {
	for k := len(done) - 1; k >= 0; k-- {
		i := done[k]
		res := &out[i]
		if !res.Held {
			continue
		}
		r.undo(hits[i].Key, outcome{answer: node.Answer{Decision: limiter.Decision{Lease: res.Lease}}, fallback: res.Fallback}, node.OpCancel)
		res.Held = false
		st := uncharged(res.Status, max(hits[i].Req.Hits, 1), res.reserved)
		if err == nil && !res.Fallback {
			// A refusal's answer: the key as it is now (its reset too),
			// read again; the arithmetic above if its owner does not say.
			if r.statusHit(context.Background(), &hits[i], res) == nil && !res.Fallback {
				continue
			}
		}
		res.Status = st
	}
	return false, err
}

// uncharged is st with one admission of hits requests reserving tokens
// taken out again: what the key shows once it is cancelled.
func uncharged(st limiter.Status, hits, tokens int64) limiter.Status {
	back := func(d *limiter.DimStatus, n int64) {
		if d.Limit > 0 {
			d.Remaining = min(d.Limit, d.Remaining+n)
		}
	}
	back(&st.Requests, hits)
	back(&st.Tokens, tokens)
	back(&st.Concurrency, 1)
	return st
}

// statusHit reads h's key's status.
func (r *Router) statusHit(ctx context.Context, h *Hit, res *HitResult) error {
	c := node.Call{Op: node.OpStatus, Key: h.Key}
	o, err := r.decide(ctx, &c, 0)
	if err != nil {
		return err
	}
	res.Status, res.Owner, res.Fallback = o.answer.Decision.Status, o.answer.Owner, o.fallback
	return nil
}

// settleHit settles h's lease with its usage. A lease the owner does not
// hold (never admitted, already settled, expired: its reservation stays
// charged as reserved) is not an error: Held stays false.
func (r *Router) settleHit(ctx context.Context, h *Hit, res *HitResult) error {
	c := node.Call{Op: node.OpSettle, Key: h.Key, Lease: h.Lease, Usage: h.Usage}
	o, err := r.decide(ctx, &c, 0)
	if err != nil {
		return err
	}
	res.Held = o.answer.OK && !o.fallback
	res.Status, res.Owner, res.Fallback = o.answer.Decision.Status, o.answer.Owner, o.fallback
	return nil
}

// chargeHit counts h's usage at its key's owner (OpCharge); an owner out of
// reach gets it later, as a debt (Owe).
func (r *Router) chargeHit(ctx context.Context, h *Hit, res *HitResult) error {
	tokens := max(h.Usage.PromptTokens, 0) + max(h.Usage.CompletionTokens, 0)
	if tokens == 0 {
		return r.statusHit(ctx, h, res)
	}
	now := r.cfg.Now()
	c := node.Call{Op: node.OpCharge, Key: h.Key, Charge: node.Charge{Tokens: tokens, At: now}}
	o, err := r.decide(ctx, &c, 0)
	if err != nil {
		return err
	}
	if o.fallback { // out of reach: a debt, charged once the owner answers
		r.Owe(h.Key, 0, tokens, now)
	}
	res.Held = o.answer.OK && !o.fallback
	res.Status, res.Owner, res.Fallback = o.answer.Decision.Status, o.answer.Owner, o.fallback
	return nil
}
