package node

import (
	"context"
	"time"
)

// Calls started without a waiting goroutine (Node.Start): an event loop's
// thread forwards a call and goes on serving its other connections; the
// answer comes back through a function, called by the goroutine that
// reads the peer connection. A goroutine waits for the answer, as Do's
// caller would, only for a call still unanswered after ProbeAfter: a slow
// or silent owner, whose liveness is then checked as for any forward.

// started is a call sent by peerClient.start whose answer nobody waits for
// on a channel (yet).
type started struct {
	c       Call       // the call as sent
	l       *link      // the connection it was sent on
	it      item       // its item on l
	seen    uint64     // l.recv when it was sent, for its liveness
	at      time.Time  // when it was sent
	maxWait time.Duration
	done    func(Answer, error)
	timer   *time.Timer // escalates the call at ProbeAfter
}

// answer hands res to the call's done: the answer came, or the connection
// failed.
func (st *started) answer(res result) {
	st.timer.Stop()
	st.done(res.answer, res.err)
}

// start sends c on the live connection, without waiting, unless it cannot
// do so at once (no connection up, or one whose batch lingers): then it
// returns false having sent nothing. done gets the answer, once: from
// the connection's reader, or, unanswered after ProbeAfter, from a
// goroutine that waits for it as call does until maxWait after now.
func (p *peerClient) start(c *Call, maxWait time.Duration, done func(Answer, error)) bool {
	body := AppendCall(nil, c)
	if len(body) > maxItem {
		return false
	}
	p.mu.Lock()
	l := p.cur
	if l == nil || l.snd == nil || p.closed {
		p.mu.Unlock()
		return false
	}
	p.nextID++
	st := &started{c: *c, l: l, it: item{id: p.nextID, body: body}, seen: l.recv.Load(), at: time.Now(), maxWait: maxWait, done: done}
	id := st.it.id
	st.timer = time.AfterFunc(p.fwd.ProbeAfter, func() { p.escalate(id) })
	p.started[id] = st
	p.mu.Unlock()
	if err := l.snd.sendNow(st.it); err != nil {
		p.fail(l, err) // answers st with ErrPeerDown
	}
	return true
}

// escalate gives started call id, unanswered after ProbeAfter, a goroutine
// that waits for its answer as call does (liveness checks, the deadline,
// an abandoned acquire cancelled) and hands it to its done.
func (p *peerClient) escalate(id uint64) {
	p.mu.Lock()
	st, ok := p.started[id]
	if !ok || p.closed {
		p.mu.Unlock()
		return // answered meanwhile, or failed with the connection
	}
	delete(p.started, id)
	ch := make(chan result, 1)
	p.pending[id] = ch
	p.abandoned.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.abandoned.Done()
		ctx, cancel := context.WithDeadline(context.Background(), st.at.Add(st.maxWait))
		defer cancel()
		fired := make(chan time.Time, 1)
		fired <- st.at.Add(p.fwd.ProbeAfter) // the first check is due now
		a, err := p.wait(ctx, &st.c, st.it, ch, nil, liveness{p: p, l: st.l, seen: st.seen}, fired)
		st.done(a, err)
	}()
}

// Slice decides acquire call at once, on the caller's thread, from this
// node's slice of its key's budget (hot keys, allot.go), when the key is
// forwarded from here to its owner and a slice serves it: the answer Do
// would give from the slice. ok is false, and nothing changed, otherwise.
func (n *Node) Slice(call Call) (a Answer, ok bool) {
	h, ok := n.forwarding(&call)
	if !ok || !n.allotting(&call, h.addr) {
		return Answer{}, false
	}
	return n.fromSlice(&call, h.addr, n.cfg.Now())
}

// Start forwards call to its key's owner without waiting for the answer,
// for a caller that must not block (an event loop's thread). It takes only
// an acquire of this node's (no wait_ms, not forwarded to it) that this
// node forwards, over a connection that is up. done is called exactly
// once, with what Do would have returned: by the goroutine that reads the
// owner's answer (done must not block), or, when the answer takes longer
// than ForwardConfig.ProbeAfter, by a goroutine that waits for it as Do
// does, at most maxWait. Start does not look at slices (Slice does).
// It returns false, having done nothing, for any other call: Do decides
// those.
func (n *Node) Start(call Call, maxWait time.Duration, done func(Answer, error)) bool {
	h, ok := n.forwarding(&call)
	if !ok {
		return false
	}
	allot := n.allotting(&call, h.addr)
	now := n.cfg.Now()
	fwd := call
	fwd.Hops, fwd.Handed = 1, h.handed
	return n.peer(h.addr).start(&fwd, maxWait, func(a Answer, err error) {
		if err == nil && allot {
			n.forwardedHot(&call, h.addr, now)
		}
		done(a, err)
	})
}

// forwarding returns the route of acquire c when this node forwards it to
// its owner as Do would, at once: c is this node's own (no wait, no hop),
// and the node is open, unfenced and in a cluster.
func (n *Node) forwarding(c *Call) (*hop, bool) {
	select {
	case <-n.stop:
		return nil, false
	default:
	}
	t := n.tr.Load()
	if n.fenced.Load() || t == nil || c.Op != OpAcquire || c.Hops != 0 || c.Req.Wait > 0 {
		return nil, false
	}
	h := t.gates[n.ring.Load().Partition(c.Key)].hop.Load()
	if h.mode != routeForward || int(c.Hops) >= n.cfg.MaxHops {
		return nil, false
	}
	return h, true
}
