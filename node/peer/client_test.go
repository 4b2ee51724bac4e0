package peer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// stepClock is a fake clock for ForwardConfig.After: timers fire only when
// the test advances it, and the test can wait for the code under test to
// arm its next timer before it advances.
type stepClock struct {
	mu     sync.Mutex
	now    time.Duration // since the start
	timers []stepTimer
	armed  int // timers ever armed
}

type stepTimer struct {
	at time.Duration
	ch chan time.Time
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed++
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- time.Unix(0, 0).Add(c.now)
		return ch
	}
	c.timers = append(c.timers, stepTimer{at: c.now + d, ch: ch})
	return ch
}

// Advance moves the clock by d and fires every timer due by then. It
// returns how many it fired: the checks it set off.
func (c *stepClock) Advance(d time.Duration) (fired int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at <= c.now {
			tm.ch <- time.Unix(0, 0).Add(tm.at)
			fired++
		} else {
			kept = append(kept, tm)
		}
	}
	c.timers = kept
	return fired
}

// quiet fails the test unless an Advance (which fired fired timers) set off
// no check: it fired none, the n calls' timers are all still pending, and
// none was armed since armed had been. A call's verdict comes only from a
// check, so then no call can have been given one since its last check,
// however long the test waits to look.
func (c *stepClock) quiet(t *testing.T, fired, n, armed int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if fired != 0 || len(c.timers) != n || c.armed != armed {
		t.Fatalf("at %v: %d timers fired, %d pending, %d armed; want none fired, the %d calls' %d still pending, %d armed",
			c.now, fired, len(c.timers), c.armed, n, n, armed)
	}
}

// armedCount is how many timers were ever armed.
func (c *stepClock) armedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed
}

func (c *stepClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// next waits until n timers are pending and returns when the earliest fires.
func (c *stepClock) next(t *testing.T, n int) time.Duration {
	t.Helper()
	var at time.Duration
	eventually(t, 5*time.Second, "timers armed", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.timers) != n {
			return false
		}
		at = c.timers[0].at
		for _, tm := range c.timers {
			at = min(at, tm.at)
		}
		return true
	})
	return at
}

// eventually waits for cond to hold, polling the state under test every
// millisecond, and fails the test naming what it waited for if cond does not
// hold within timeout. It is how a test waits for an event it has no
// channel for: never a bare sleep.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond) // the poll interval: the deadline bounds the loop
	}
}

const (
	testProbeAfter = 15 * time.Millisecond
	testLiveness   = time.Second
)

func newTestPeerClient(addr string, clk func(time.Duration) <-chan time.Time) *Client {
	var d net.Dialer
	return newClient(addr, d.DialContext, BatchConfig{}, ForwardConfig{ProbeAfter: testProbeAfter, Liveness: testLiveness, After: clk},
		slog.New(slog.DiscardHandler), &Stats{})
}

// hungPeer accepts connections and reads every frame sent to it, and never
// writes a byte: a peer whose process is stopped (SIGSTOP), or whose host
// vanished without resetting the connection.
type hungPeer struct {
	ln    net.Listener
	calls atomic.Int64
	pings atomic.Int64
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startHungPeer(t *testing.T) *hungPeer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungPeer{ln: ln}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, conn)
			h.mu.Unlock()
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				fr := newFrameReader(conn, frameCalls, Limits{}, nil)
				for {
					items, err := fr.next()
					if err != nil {
						return
					}
					for _, it := range items {
						if c, err := DecodeCall(it.body); err == nil && c.Op == OpPing {
							h.pings.Add(1)
						} else {
							h.calls.Add(1)
						}
					}
				}
			}()
		}
	}()
	return h
}

func (h *hungPeer) close() {
	h.ln.Close()
	h.mu.Lock()
	for _, c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// A hung owner (connection up, nothing ever comes back) is unreachable:
// every call waiting on it fails with ErrPeerDown exactly ProbeAfter +
// Liveness after it was sent, not a nanosecond sooner, after one ping.
func TestPeerCallHungPeerFailsAfterProbeAndLiveness(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := startHungPeer(t)
	defer h.close()
	clk := &stepClock{}
	p := newTestPeerClient(h.ln.Addr().String(), clk.After)
	defer p.Close()

	const calls = 2
	type res struct {
		err error
		at  time.Duration
	}
	done := make(chan res, calls)
	for range calls {
		go func() {
			_, err := p.Call(context.Background(), &Call{Op: OpAcquire, Key: "t:acme"})
			done <- res{err, clk.Now()}
		}()
	}
	if at := clk.next(t, calls); at != testProbeAfter {
		t.Fatalf("first check armed for %v, want ProbeAfter %v", at, testProbeAfter)
	}
	eventually(t, 5*time.Second, "both calls at the peer", func() bool { return h.calls.Load() == calls })
	clk.Advance(testProbeAfter) // the probe: silent since the calls were sent
	if at := clk.next(t, calls); at != testProbeAfter+testLiveness {
		t.Fatalf("liveness check armed for %v, want ProbeAfter+Liveness %v", at, testProbeAfter+testLiveness)
	}
	eventually(t, 5*time.Second, "the ping at the peer", func() bool { return h.pings.Load() >= 1 })

	// A verdict comes only from a check, and a check only from a timer that
	// fired: one nanosecond short of ProbeAfter+Liveness, the Advance fires
	// none, and every call still waits on its pending verdict timer. So no
	// call can have ended by a check, whenever we look.
	armed := clk.armedCount()
	clk.quiet(t, clk.Advance(testLiveness-time.Nanosecond), calls, armed)
	select {
	case r := <-done:
		t.Fatalf("a call ended at %v, before ProbeAfter+Liveness: %v", r.at, r.err)
	default:
	}

	clk.Advance(time.Nanosecond)
	for range calls {
		select {
		case r := <-done:
			if !errors.Is(r.err, ErrPeerDown) {
				t.Fatalf("call to a hung peer: %v, want ErrPeerDown", r.err)
			}
			if r.at != testProbeAfter+testLiveness {
				t.Fatalf("failed at %v, want %v", r.at, testProbeAfter+testLiveness)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("call still pending at ProbeAfter+Liveness")
		}
	}
	if n := h.pings.Load(); n != 1 {
		t.Fatalf("%d pings sent for two waiting calls, want one per connection", n)
	}
}

// An owner that answers pings at once but takes 3×Liveness to answer the
// call is alive: the call waits and gets the answer. The owner is a real
// Server whose handler is slow, so this also shows the server answering
// OpPing ahead of the calls it is busy with.
func TestPeerCallSlowLivePeerIsWaitedFor(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, release, pinged, stop := slowPeer(t)
	defer stop()

	clk := &stepClock{}
	p := newTestPeerClient(addr, clk.After)
	defer p.Close()
	type res struct {
		a   Answer
		err error
	}
	done := make(chan res, 1)
	go func() {
		a, err := p.Call(context.Background(), &Call{Op: OpStatus, Key: "t:acme"})
		done <- res{a, err}
	}()
	var l *link
	for clk.Now() < 3*testLiveness {
		at := clk.next(t, 1)
		clk.Advance(at - clk.Now())
		clk.next(t, 1) // the check ran and armed the next one
		p.mu.Lock()
		l = p.cur
		p.mu.Unlock()
		if l == nil {
			t.Fatalf("connection torn down at %v", clk.Now())
		}
		eventually(t, 5*time.Second, "no ping in flight", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return l.ping == 0
		})
		select {
		case r := <-done:
			t.Fatalf("call ended at %v, before the owner answered: %+v %v", clk.Now(), r.a, r.err)
		default:
		}
	}
	// Checks at ProbeAfter (silent: ping), +Liveness (the pong: alive),
	// +Liveness/4 (silent again: ping), +Liveness (alive), +Liveness/4
	// (ping), +Liveness (alive): a live peer is pinged once per 1¼
	// Liveness and never given up on. Until the call's answer, every frame
	// received was a pong.
	if pongs := l.recv.Load(); pongs != 3 {
		t.Fatalf("%d pongs received over %v, want 3", pongs, clk.Now())
	}
	close(release)
	select {
	case r := <-done:
		if r.err != nil || r.a.Owner != "slow" || !r.a.OK {
			t.Fatalf("slow owner's answer: %+v %v", r.a, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer after the owner answered")
	}
	if n := pinged.Load(); n != 0 {
		t.Fatalf("%d pings reached the handler, want none: the reader answers them", n)
	}
}

// A refused connection is unreachable at once: no timer is even armed.
func TestPeerCallRefusedFailsAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connections are refused
	clk := &stepClock{}
	p := newTestPeerClient(addr, clk.After)
	defer p.Close()
	start := time.Now()
	_, err = p.Call(context.Background(), &Call{Op: OpAcquire, Key: "t:acme"})
	if !errors.Is(err, ErrPeerDown) {
		t.Fatalf("call to a refused address: %v, want ErrPeerDown", err)
	}
	clk.mu.Lock()
	armed := clk.armed
	clk.mu.Unlock()
	if armed != 0 {
		t.Fatalf("%d timers armed for a refused connection, want none", armed)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("refused connection took %v", took)
	}
}

// cutProxy relays TCP between a client and addr until cut, then silently
// drops every byte both ways: a network cut that resets nothing.
type cutProxy struct {
	ln  net.Listener
	cut atomic.Bool
	wg  sync.WaitGroup
	mu  sync.Mutex
	cs  []net.Conn
}

func startCutProxy(t *testing.T, addr string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x := &cutProxy{ln: ln}
	relay := func(dst, src net.Conn) {
		defer x.wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			if !x.cut.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
		}
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", addr)
			if err != nil {
				in.Close()
				continue
			}
			x.mu.Lock()
			x.cs = append(x.cs, in, out)
			x.mu.Unlock()
			x.wg.Add(2)
			go relay(out, in)
			go relay(in, out)
		}
	}()
	return x
}

func (x *cutProxy) close() {
	x.ln.Close()
	x.mu.Lock()
	for _, c := range x.cs {
		c.Close()
	}
	x.mu.Unlock()
	x.wg.Wait()
}

// slowPeer is a real peer server whose calls are answered only on release
// (pings are answered at once by its reader: pinged counts those that
// reached the handler instead, which must not happen).
func slowPeer(t *testing.T) (addr string, release chan struct{}, pinged *atomic.Int64, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release = make(chan struct{})
	pinged = new(atomic.Int64)
	srv := &Server{
		ln: ln,
		handle: func(ctx context.Context, c *Call) (Answer, error) {
			if c.Op == OpPing {
				pinged.Add(1)
			}
			select {
			case <-release:
				return Answer{Owner: "slow", OK: true}, nil
			case <-ctx.Done():
				return Answer{}, ctx.Err()
			}
		},
		inline: func(*Call) bool { return false },
		log:    slog.New(slog.DiscardHandler),
		conns:  map[net.Conn]struct{}{},
	}
	srv.wg.Add(1)
	go srv.serve()
	return ln.Addr().String(), release, pinged, srv.Close
}

// A peer that goes silent while a call waits on it, after answering pings
// for a while, is given up on one recheck (a quarter Liveness) plus one
// Liveness after the last check that saw it alive: not the two whole
// Liveness intervals that would outlast a caller's 2 s cap.
func TestPeerCallPeerThatGoesSilentMidCall(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	addr, release, _, stop := slowPeer(t)
	defer stop()
	defer close(release)
	x := startCutProxy(t, addr)
	defer x.close()
	clk := &stepClock{}
	p := newTestPeerClient(x.ln.Addr().String(), clk.After)
	defer p.Close()
	type res struct {
		err error
		at  time.Duration
	}
	done := make(chan res, 1)
	go func() {
		_, err := p.Call(context.Background(), &Call{Op: OpStatus, Key: "t:acme"})
		done <- res{err, clk.Now()}
	}()
	recheck := testLiveness / 4
	steps := []time.Duration{testProbeAfter, testProbeAfter + testLiveness} // ping; its pong: alive
	for _, at := range steps {
		if got := clk.next(t, 1); got != at {
			t.Fatalf("check armed for %v, want %v", got, at)
		}
		clk.Advance(at - clk.Now())
		if at == testProbeAfter {
			eventually(t, 5*time.Second, "the pong", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.cur != nil && p.cur.recv.Load() == 1
			})
		}
	}
	x.cut.Store(true) // silent from here
	cutAt := clk.Now()
	if got := clk.next(t, 1); got != cutAt+recheck {
		t.Fatalf("after a check that found the peer alive, the next is armed for %v, want a recheck later (%v)", got, cutAt+recheck)
	}
	clk.Advance(recheck) // silent since the last check: ping
	if got := clk.next(t, 1); got != cutAt+recheck+testLiveness {
		t.Fatalf("verdict armed for %v, want %v", got, cutAt+recheck+testLiveness)
	}
	// No check is due before the verdict's timer: the Advance fires none,
	// and the call still waits on it (see the hung peer's test).
	armed := clk.armedCount()
	clk.quiet(t, clk.Advance(testLiveness-time.Nanosecond), 1, armed)
	select {
	case r := <-done:
		t.Fatalf("ended at %v, before a whole Liveness of silence after the ping: %v", r.at, r.err)
	default:
	}
	clk.Advance(time.Nanosecond)
	select {
	case r := <-done:
		if !errors.Is(r.err, ErrPeerDown) || r.at != cutAt+recheck+testLiveness {
			t.Fatalf("call to a peer gone silent: %v at %v, want ErrPeerDown at %v", r.err, r.at, cutAt+recheck+testLiveness)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("call still pending after the verdict")
	}
}

// A caller whose deadline comes while the connection is silent after a
// probe learns the peer is unreachable (ErrPeerDown: its caller falls
// back), not merely that it was slow; while the peer answers its pings,
// the same deadline is only the caller's (no ErrPeerDown).
func TestPeerCallDeadlineDuringDoubtIsPeerDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, silent := range []bool{true, false} {
		addr, release, _, stop := slowPeer(t)
		x := startCutProxy(t, addr)
		clk := &stepClock{}
		p := newTestPeerClient(x.ln.Addr().String(), clk.After)
		x.cut.Store(silent)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p.Call(ctx, &Call{Op: OpStatus, Key: "t:acme"})
			done <- err
		}()
		clk.next(t, 1)
		clk.Advance(testProbeAfter) // silent since queued: ping
		clk.next(t, 1)
		if !silent {
			eventually(t, 5*time.Second, "the pong", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.cur != nil && p.cur.recv.Load() == 1
			})
		}
		cancel()
		err := <-done
		if got := errors.Is(err, ErrPeerDown); got != silent || !errors.Is(err, context.Canceled) {
			t.Errorf("silent %v: deadline gave %v; want ErrPeerDown %v, wrapping the context's error", silent, err, silent)
		}
		p.Close()
		x.close()
		close(release)
		stop()
	}
}

// A call waiting for another call's dial to a peer that drops packets (a
// network cut: the dial neither connects nor is refused) and whose
// deadline comes first fails with ErrPeerDown, never a bare deadline: it
// was never sent, so its caller may fall back without counting anything
// twice. (On a loaded machine the dial may not have ended within the
// caller's 2 s cap.)
func TestPeerCallWaitingForADialIsPeerDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dialing := make(chan struct{})
	hang := func(ctx context.Context, _, _ string) (net.Conn, error) {
		close(dialing)
		<-ctx.Done() // the packets go nowhere
		return nil, ctx.Err()
	}
	p := newClient("192.0.2.1:7000", hang, BatchConfig{}, ForwardConfig{ProbeAfter: testProbeAfter, Liveness: time.Hour, After: time.After},
		slog.New(slog.DiscardHandler), &Stats{})
	defer p.Close()
	first, cancelFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() {
		_, err := p.Call(first, &Call{Op: OpAcquire, Key: "t:acme"})
		firstDone <- err
	}()
	<-dialing
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Call(ctx, &Call{Op: OpAcquire, Key: "t:acme"})
	if !errors.Is(err, ErrPeerDown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a call whose deadline came while another dialed: %v, want ErrPeerDown (wrapping the deadline)", err)
	}
	cancelFirst()
	if err := <-firstDone; !errors.Is(err, ErrPeerDown) {
		t.Errorf("the dialing call, cancelled: %v, want ErrPeerDown", err)
	}
}
