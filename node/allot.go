package node

// A node's side of allotments (node/allot): serving a hot key's acquires
// from its slices, asking the owner for them, refilling them as the owner's
// buckets end, and giving back what was not handed out. The owner's side
// is local.slices (OpAllot, OpReturn).

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tokenring/tokenring/node/allot"
	"github.com/tokenring/tokenring/node/peer"
)

// allotted serves acquire c, which this node forwards to addr, from a
// slice of its key when it can, and otherwise forwards it with forward;
// either way it keeps the key's slices: asks the owner for one when the
// key is hot, gives back the admissions of expired ones. A slice serves
// only while the owner is reachable: once its connection is down (a
// crash), the owner's admissions are left alone and the call is forwarded
// (and falls back) like any other.
func (n *Node) allotted(c *Call, addr string, forward func() (Answer, error)) (Answer, error) {
	al := n.holder
	// An acquire with sent limits goes to the owner, which applies them:
	// a slice was cut under the owner's limits of its moment.
	if al == nil || c.Op != OpAcquire || c.Hops != 0 || c.Req.Wait > 0 || c.Limits != nil || n.leaving.Load() || !n.peers.Up(addr) {
		return forward()
	}
	now := n.cfg.Now()
	key := c.Key // the closures below take the key, not c (Do's, on its stack)
	a, ok, expired, ask := al.Take(c, now, addr)
	if len(expired) > 0 {
		n.background(func() { n.cancelAdmissions(key, expired, time.Time{}) })
	}
	if !ok {
		var err error
		if a, err = forward(); err != nil {
			return a, err
		}
		if al.Forwarded(c, now) {
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
	c := n.holder.Ask(key, sent)
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TransferWait)
	defer cancel()
	a, err := n.Do(ctx, c)
	if err == nil && a.Owner == n.cfg.Name {
		// This node became the owner meanwhile: it decides for the key
		// itself. Give the admissions back.
		if _, ids, derr := allot.DecodeGrant(a.State); derr == nil && len(ids) > 0 {
			n.cancelAdmissions(key, ids, time.Time{})
		}
		err = ErrClosed
	}
	n.holder.Granted(key, addr, sent, n.cfg.Now(), c.Req.Reserve, a, err)
}

// returnSlices gives every slice's admissions not handed out back to
// their owners: this node is leaving (Drain) and takes no new slice.
func (n *Node) returnSlices() {
	if n.holder == nil {
		return
	}
	for key, ids := range n.holder.Sweep(n.cfg.Now().Add(24*time.Hour), 0) {
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
	for key, ids := range n.holder.Sweep(now, allotIdle) {
		n.cancelAdmissions(key, ids, time.Time{})
	}
	for key, o := range n.holder.Due(now) {
		n.cancelAdmissions(key, o.IDs, o.Since)
	}
	n.holder.Forget(now)
}

// refilling asks for hot keys' next slices as their owners' buckets end
// (allot.Holder.Refills), sleeping until the earliest is due.
func (n *Node) refilling() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.holder.Nudge():
		case <-t.C:
		}
		next := n.refillSlices()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(0, next.Sub(n.cfg.Now()))
		}
		t.Reset(wait)
	}
}

// refillSlices gives back the admissions of the slices that ended with
// their bucket and asks for the next of the keys still hot; it returns
// when the next refill is due (zero: none is).
func (n *Node) refillSlices() time.Time {
	now := n.cfg.Now()
	due, next := n.holder.Refills(now)
	for _, r := range due {
		if len(r.Expired) > 0 {
			n.background(func() { n.cancelAdmissions(r.Key, r.Expired, time.Time{}) })
		}
		switch {
		case !r.Ask:
		case n.leaving.Load() || !n.peers.Up(r.Addr):
			n.holder.Granted(r.Key, r.Addr, now, now, 0, Answer{}, ErrClosed) // ends the ask
		default:
			n.background(func() { n.askSlice(r.Key, r.Addr) })
		}
	}
	return next
}

// cancelAdmissions gives admissions of key that were allotted but not
// handed out back to its owner, in peer.OpReturns of at most peer.MaxAllot. Those
// that cannot be given back now (the owner crashed, and the ring still
// names it) are owed (since: when they first could not be; zero: now):
// the sweep gives them back later to whoever owns the key then (their
// leases moved there with its state, if replication had copied them), until
// allot.ReturnHorizon has passed.
func (n *Node) cancelAdmissions(key string, ids []uint64, since time.Time) {
	for chunk := range slices.Chunk(ids, peer.MaxAllot) {
		ctx, cancel := context.WithTimeout(context.Background(), n.cfg.TransferWait)
		a, err := n.Do(ctx, Call{Op: peer.OpReturn, Key: key, State: allot.AppendGrant(nil, 0, chunk)})
		cancel()
		if err != nil {
			now := n.cfg.Now()
			if since.IsZero() {
				since = now
			}
			if errors.Is(err, ErrClosed) || now.Sub(since) >= allot.ReturnHorizon {
				n.log.Warn("allotted admissions not given back: charged until their bucket leaves the window", "key", key, "admissions", len(chunk), "err", err)
				continue
			}
			n.holder.Owe(key, chunk, since, now.Add(allot.ReturnRetry))
			continue
		}
		if _, cancelled, err := allot.DecodeGrant(a.State); err == nil && len(cancelled) > 0 {
			n.counts.allotReturned.Add(int64(len(cancelled)))
			n.holder.GaveBack(key, cancelled, n.cfg.Now())
		}
	}
}
