package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// ErrPeerDown is returned (wrapped) when a peer cannot be reached: the
// connection was refused or broke. Callers fall back at once instead of
// waiting for a timeout.
var ErrPeerDown = errors.New("peer down")

// ForwardConfig says when a forwarded call gives up on its owner. A forward
// fails over to the caller's fallback only when the owner is unreachable: the
// connection is refused or reset, or the peer stays silent past Liveness
// after a probe. A slow answer on a live connection is waited for, up to the
// caller's own deadline (the router's hard cap).
type ForwardConfig struct {
	// ProbeAfter is how long a forwarded call waits for its answer before
	// it checks that the owner is still reachable. Zero means 15ms (the
	// forward_timeout of the config).
	ProbeAfter time.Duration
	// Liveness is how long a peer connection may stay silent, once probed,
	// before the peer counts as unreachable and its pending calls fail
	// with ErrPeerDown. Zero means one second.
	Liveness time.Duration
	// After is the timer, injected for tests. Nil means time.After.
	After func(time.Duration) <-chan time.Time
}

// Dialer opens connections to peers; net.Dialer's DialContext satisfies it.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Defaults of ForwardConfig.
const (
	defaultProbeAfter = 15 * time.Millisecond
	defaultLiveness   = time.Second
)

// WithDefaults fills the zero fields of f with their documented defaults.
func (f ForwardConfig) WithDefaults() ForwardConfig {
	if f.ProbeAfter <= 0 {
		f.ProbeAfter = defaultProbeAfter
	}
	if f.Liveness <= 0 {
		f.Liveness = defaultLiveness
	}
	if f.After == nil {
		f.After = time.After
	}
	return f
}

// result is what a pending forwarded call receives.
type result struct {
	answer Answer
	err    error
}

// waiter is a pending call: where its result goes, and its op, which
// says how to read its answer (DecodeAnswer).
type waiter struct {
	ch chan result
	op Op
}

// link is one connection of a Client and what is known of its liveness.
type link struct {
	conn net.Conn
	// snd writes the calls from the goroutines that make them; nil when
	// the batch lingers (BatchConfig.Wait), and a writer goroutine takes
	// them from q instead.
	snd  *frameSender
	q    chan item
	done chan struct{} // closed when the connection is torn down
	recv atomic.Uint64 // frames received on conn: any frame shows the peer alive
	ping uint64        // id of the ping in flight on conn, 0 for none; guarded by Client.mu
	// hello is the id of the ping that opened conn (install), 0 for none;
	// set before the reader starts.
	hello uint64
	// traces is set once the peer, answering a ping on conn, said it
	// reads trace contexts (trace.go): only then do calls carry them.
	traces atomic.Bool
}

// Client is the persistent, multiplexed connection to one peer. Calls
// from many goroutines share it; each caller writes its own call, or has
// it written with others' by the caller writing at the time (frameSender).
type Client struct {
	addr  string
	dial  Dialer
	batch BatchConfig
	fwd   ForwardConfig
	log   *slog.Logger
	stats *Stats
	// auth, if not nil, authenticates every new connection with the first
	// cluster secret before any call is sent on it.
	auth    *Auth
	wire    Limits
	authLog rate.Sometimes // a failed handshake is warned about once a second at most

	mu      sync.Mutex    // guards cur, dialing, pending, nextID, closed, dialFailed and cur.ping
	cur     *link         // the live connection; nil when there is none
	dialing chan struct{} // non-nil while a dial is under way; closed when it ends
	pending map[uint64]waiter
	nextID  uint64
	closed  bool
	// dialFailed is when the last dial failed; zero once one succeeds.
	dialFailed time.Time
	wg         sync.WaitGroup // the connection's reader, and its writer if it has one
	abandoned  sync.WaitGroup // goroutines cancelling abandoned admissions, and heartbeats

	// heard is when a frame last arrived from the peer (unix ns); a new
	// client starts as heard, so a member just met has a mandate's grace.
	heard   atomic.Int64
	beating atomic.Bool // a heartbeat is under way
	self    string      // this node's peer address, announced on every new connection; "" for none
}

func newClient(addr string, dial Dialer, batch BatchConfig, fwd ForwardConfig, log *slog.Logger, stats *Stats) *Client {
	p := &Client{addr: addr, dial: dial, batch: batch, fwd: fwd.WithDefaults(), log: log, stats: stats, pending: make(map[uint64]waiter)}
	p.heard.Store(time.Now().UnixNano())
	p.authLog.Interval = time.Second
	return p
}

// Up reports whether the client has a live connection to the peer.
func (p *Client) Up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur != nil
}

// HeardAt is when a frame last arrived from the peer.
func (p *Client) HeardAt() time.Time { return time.Unix(0, p.heard.Load()) }

// Heartbeat pings the peer in the background, unless a heartbeat is under
// way already; its answer, like any frame, refreshes HeardAt.
func (p *Client) Heartbeat() {
	if !p.beating.CompareAndSwap(false, true) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.beating.Store(false)
		return
	}
	p.abandoned.Add(1)
	go func() {
		defer p.abandoned.Done()
		defer p.beating.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), p.fwd.Liveness)
		defer cancel()
		_, _ = p.Call(ctx, &Call{Op: OpPing})
	}()
}

// Stats counts the peer protocol's traffic, for metrics and benchmarks.
// The zero value is ready; a Pool's clients and a Server share one.
type Stats struct {
	Frames       atomic.Int64 // call frames written
	Calls        atomic.Int64 // calls forwarded
	Downs        atomic.Int64 // forwards failed because the peer was unreachable
	AuthFailures atomic.Int64 // connections to our server that failed the handshake
}

func (s *Stats) frame(items int) {
	s.Frames.Add(1)
	s.Calls.Add(int64(items))
}

// connect returns the live connection, dialing if there is none. It never
// dials while holding p.mu: calls to a peer whose dial hangs wait for that
// dial or their own ctx, whichever ends first. A dial gets at most one
// Liveness: a peer whose address drops packets silently (a network cut)
// never refuses, and must not hold a call until its caller gives up. After
// a failed dial, calls fail at once for one Liveness, and then the next
// one dials again. Every failure to connect, the caller's deadline
// included, is ErrPeerDown: the call was never sent.
func (p *Client) connect(ctx context.Context) (*link, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("peer %s: %w: client closed", p.addr, ErrPeerDown)
		}
		if l := p.cur; l != nil {
			p.mu.Unlock()
			return l, nil
		}
		if since := time.Since(p.dialFailed); !p.dialFailed.IsZero() && since < p.fwd.Liveness {
			p.mu.Unlock()
			return nil, fmt.Errorf("peer %s: %w: the last dial failed %v ago", p.addr, ErrPeerDown, since.Round(time.Millisecond))
		}
		if wait := p.dialing; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				// No connection, so the call never left: the peer cannot
				// have acted on it, and falling back counts nothing twice.
				p.stats.Downs.Add(1)
				return nil, fmt.Errorf("peer %s: %w: no connection before the caller's deadline (a dial under way): %w", p.addr, ErrPeerDown, ctx.Err())
			}
		}
		wait := make(chan struct{})
		p.dialing = wait
		p.mu.Unlock()

		conn, sess, err := p.dialAuthenticated(ctx)

		p.mu.Lock()
		p.dialing = nil
		close(wait)
		if err != nil {
			if ctx.Err() == nil { // the peer's fault, not our caller's deadline
				p.dialFailed = time.Now()
			}
			p.mu.Unlock()
			p.stats.Downs.Add(1)
			return nil, fmt.Errorf("peer %s: %w: %v", p.addr, ErrPeerDown, err)
		}
		if p.closed {
			p.mu.Unlock()
			conn.Close()
			continue
		}
		p.dialFailed = time.Time{}
		p.install(conn, sess)
		p.mu.Unlock()
	}
}

// dialAuthenticated dials the peer and, with secrets, runs the handshake,
// all within one Liveness of ctx.
func (p *Client) dialAuthenticated(ctx context.Context) (net.Conn, *session, error) {
	dctx, cancel := context.WithTimeout(ctx, p.fwd.Liveness)
	defer cancel()
	conn, err := p.dial(dctx, "tcp", p.addr)
	if err != nil || p.auth == nil {
		return conn, nil, err
	}
	by, _ := dctx.Deadline()
	sess, err := p.auth.dial(conn, by)
	if err != nil {
		conn.Close()
		err = fmt.Errorf("peer handshake %s: %w", p.addr, err)
		p.authLog.Do(func() { p.log.Warn("peer handshake failed (a different cluster secret?)", "peer", p.addr, "err", err) })
		return nil, nil, err
	}
	return conn, sess, nil
}

// install makes conn the live connection and starts its reader (and its
// writer, when the batch lingers).
// Callers hold p.mu.
func (p *Client) install(conn net.Conn, sess *session) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	l := &link{conn: conn, done: make(chan struct{})}
	if p.batch.Wait <= 0 {
		l.snd = newFrameSender(conn, frameCalls, p.batch, p.wire, sess.sender(), p.stats.frame)
		l.snd.writeTimeout, l.snd.yield = p.fwd.ProbeAfter+p.fwd.Liveness, true
	} else {
		l.q = make(chan item, 4096)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			w := &frameWriter{conn: conn, kind: frameCalls, batch: p.batch, wire: p.wire, seal: sess.sender(), onFrame: p.stats.frame}
			if err := w.run(l.q, l.done); err != nil {
				p.fail(l, err)
			}
		}()
	}
	p.cur = l
	if p.self != "" {
		// Say who we are: the peer counts every frame on this connection
		// as hearing from us (its mandate, node/fence.go). Nobody waits for the
		// answer; it goes out with the first call.
		p.nextID++
		l.hello = p.nextID
		it := item{id: p.nextID, body: AppendCall(nil, &Call{Op: OpPing, From: p.self})}
		if l.snd != nil {
			l.snd.queue(it)
		} else {
			l.q <- it
		}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.fail(l, p.readAnswers(l, sess.receiver()))
	}()
}

// readAnswers dispatches answers to pending calls until the connection fails.
// Every frame received counts as a sign of life (l.recv), whatever it holds.
func (p *Client) readAnswers(l *link, open *aeadStream) error {
	fr := newFrameReader(l.conn, frameAnswers, p.wire, open)
	for {
		items, err := fr.next()
		if err != nil {
			return err
		}
		l.recv.Add(1)
		p.heard.Store(time.Now().UnixNano())
		for _, it := range items {
			p.mu.Lock()
			if it.id == l.ping || it.id == l.hello { // the answer to our probe or hello: nothing to dispatch
				if it.id == l.ping {
					l.ping = 0
				}
				p.mu.Unlock()
				l.heard(it)
				continue
			}
			w := p.pending[it.id]
			delete(p.pending, it.id)
			p.mu.Unlock()
			if w.ch == nil {
				continue
			}
			var res result
			if it.status == itemError {
				res.err = fmt.Errorf("peer %s: %s", p.addr, it.body)
			} else {
				res.answer, res.err = DecodeAnswer(w.op, it.body)
			}
			if w.op == OpPing && res.err == nil && hasFeature(res.answer.State, featureTrace) {
				l.traces.Store(true)
			}
			w.ch <- res
		}
	}
}

// fail tears l down (if it is still the current connection) and fails every
// pending call with ErrPeerDown. The next call dials again.
func (p *Client) fail(l *link, cause error) {
	p.mu.Lock()
	if p.cur != l {
		p.mu.Unlock()
		return
	}
	p.cur = nil
	close(l.done)
	pending := p.pending
	p.pending = make(map[uint64]waiter)
	closed := p.closed
	p.mu.Unlock()
	l.conn.Close()
	if cause != nil && !closed {
		p.log.Debug("peer connection lost", "peer", p.addr, "err", cause)
	}
	err := fmt.Errorf("peer %s: %w: %v", p.addr, ErrPeerDown, cause)
	for _, w := range pending {
		w.ch <- result{err: err}
	}
}

// errSilent is why a probed connection was torn down.
var errSilent = errors.New("no frame received within the liveness interval after a probe")

// liveness is one waiting call's view of its connection's liveness. The
// call checks it ProbeAfter after it was queued, then every recheck while
// the connection shows life, and one Liveness after a ping. A check that
// finds a frame received on the connection since the previous check (for
// the first check: since the call was queued) finds the peer alive: the
// call keeps waiting, however slow its own answer is. A check that finds
// the connection silent makes sure one ping is in flight; the next check,
// one Liveness later, declares the peer unreachable if the connection is
// still silent: not even the ping was answered. So a peer hung from the
// start costs exactly ProbeAfter+Liveness; one that hangs while frames were
// flowing, at most recheck+Liveness after its last frame (plus ProbeAfter);
// a live one is never given up on.
//
// The first check looks back over ProbeAfter, not a whole Liveness: on a
// quiet connection that can send a ping where a frame from up to a Liveness
// ago would have spared it. A ping is cheap, and the verdict "unreachable"
// is never reached sooner than a full Liveness of silence after a ping.
type liveness struct {
	p      *Client
	l      *link
	seen   uint64 // l.recv at the previous check
	probed bool   // the previous check found the connection silent and pinged
}

// recheck is how long after a check that found the connection alive the
// next one runs: a quarter Liveness, so a peer that goes silent mid-call is
// pinged soon after, not a whole Liveness later.
func (f ForwardConfig) recheck() time.Duration { return max(f.ProbeAfter, f.Liveness/4) }

// check runs one check and reports whether the peer is unreachable, and
// when to check next.
func (v *liveness) check() (dead bool, next time.Duration) {
	if n := v.l.recv.Load(); n != v.seen {
		v.seen, v.probed = n, false
		return false, v.p.fwd.recheck()
	}
	if v.probed {
		return true, 0
	}
	v.probed = true
	v.p.ping(v.l)
	return false, v.p.fwd.Liveness
}

// doubted reports whether the last check found the connection silent and
// pinged, and nothing has arrived since: when the caller's deadline comes
// then, the peer is as good as unreachable, not slow.
func (v *liveness) doubted() bool { return v.probed && v.l.recv.Load() == v.seen }

// ping sends an OpPing on l unless one is in flight already. It never
// blocks (the write runs on a goroutine of its own): a connection too
// stuck to take it is a sign of a hung peer too, and the next check
// judges by what was received.
func (p *Client) ping(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.ping != 0 || p.cur != l {
		return
	}
	p.nextID++
	it := item{id: p.nextID, body: AppendCall(nil, &Call{Op: OpPing})}
	if l.snd != nil {
		// Written by a goroutine of its own: a write the peer does not
		// take must not hold up the check that judges it.
		l.ping = it.id
		p.abandoned.Add(1)
		go func() {
			defer p.abandoned.Done()
			if err := l.snd.send(it); err != nil {
				p.fail(l, err)
			}
		}()
		return
	}
	select {
	case l.q <- it:
		l.ping = it.id
	default:
	}
}

// Call forwards c and waits for its answer or ctx's end. It gives up on the
// owner early only when the connection breaks or the peer stays silent past
// the liveness rule (see liveness): then the error wraps ErrPeerDown. A slow
// answer on a live connection is waited for as long as ctx allows.
//
// An acquire whose caller stops waiting is not forgotten: if the owner admits
// it after all, the admission is cancelled there, so a timed-out forward
// followed by a fallback decision does not count the request twice.
func (p *Client) Call(ctx context.Context, c *Call) (Answer, error) {
	return p.call(ctx, c, nil)
}

// call is Call, with the caller's span when tc is not nil.
func (p *Client) call(ctx context.Context, c *Call, tc *TraceContext) (Answer, error) {
	body := AppendCall(nil, c)
	if len(body) > maxItem {
		return Answer{}, fmt.Errorf("peer %s: call %s %q of %d bytes exceeds the %d-byte frame limit", p.addr, c.Op, c.Key, len(body), maxItem)
	}
	ch := make(chan result, 1)
	var id uint64
	var l *link
	for {
		var err error
		if l, err = p.connect(ctx); err != nil {
			return Answer{}, err
		}
		p.mu.Lock()
		if p.cur != l { // that connection failed meanwhile: use the next one
			p.mu.Unlock()
			continue
		}
		p.nextID++
		id = p.nextID
		p.pending[id] = waiter{ch, c.Op}
		p.mu.Unlock()
		break
	}
	v := liveness{p: p, l: l, seen: l.recv.Load()}
	q := l.q // nil once the call is queued
	it := item{id: id, body: body}
	if tc != nil && l.traces.Load() {
		it = tracedItem(id, tc, body)
	}
	if l.snd != nil {
		// Written by this goroutine, unless another is writing (then
		// that one writes it too). A failed write fails the connection,
		// which answers ch with ErrPeerDown.
		if err := l.snd.send(it); err != nil {
			p.fail(l, err)
		}
	}
	timer := p.fwd.After(p.fwd.ProbeAfter)
	for {
		select {
		case q <- it:
			q = nil
		case res := <-ch: // the answer, or ErrPeerDown from fail
			return res.answer, res.err
		case <-timer:
			dead, next := v.check()
			if dead {
				p.stats.Downs.Add(1)
				p.fail(l, fmt.Errorf("%w (%v)", errSilent, p.fwd.Liveness))
				continue // fail answered ch
			}
			timer = p.fwd.After(next)
		case <-ctx.Done():
			if q == nil && c.Op == OpAcquire {
				p.abandon(c.Key, ch)
			} else {
				p.forget(id)
			}
			if v.doubted() || time.Since(p.HeardAt()) >= 2*p.fwd.Liveness {
				// Silent after a probe, or for two Liveness intervals (on
				// a loaded machine the probe's timer may not have fired;
				// a live peer answers a ping every 1¼ Liveness at most).
				return Answer{}, fmt.Errorf("peer %s: %w: silent since a probe when the caller's deadline came: %w", p.addr, ErrPeerDown, ctx.Err())
			}
			return Answer{}, fmt.Errorf("peer %s: %w", p.addr, ctx.Err())
		}
	}
}

// abandon waits in the background for the answer to an acquire nobody waits
// for any more, and cancels the admission if the owner made one. The answer
// always comes: from the owner, or as ErrPeerDown when the connection fails.
func (p *Client) abandon(key string, ch chan result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.abandoned.Add(1)
	go func() {
		defer p.abandoned.Done()
		res := <-ch
		if res.err != nil || !res.answer.Decision.Allowed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Call(ctx, &Call{Op: OpCancel, Key: key, Lease: res.answer.Decision.Lease}); err != nil {
			p.log.Warn("could not cancel a timed-out admission; its slot expires by its TTL", "peer", p.addr, "key", key, "err", err)
		}
	}()
}

func (p *Client) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// Close tears the connection down and waits for its goroutines.
func (p *Client) Close() {
	p.mu.Lock()
	p.closed = true
	l := p.cur
	p.mu.Unlock()
	if l != nil {
		p.fail(l, errors.New("closed"))
	}
	p.abandoned.Wait()
	p.wg.Wait()
}
