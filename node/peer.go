package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
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

// result is what a pending forwarded call receives.
type result struct {
	answer Answer
	err    error
}

// peerClient is the persistent, multiplexed connection to one peer. Calls
// from many goroutines share it; the writer batches them into frames.
type peerClient struct {
	addr  string
	dial  Dialer
	batch BatchConfig
	log   *slog.Logger
	stats *peerStats

	mu        sync.Mutex // guards conn, q, done, dialing, pending, nextID, closed
	conn      net.Conn
	q         chan item
	done      chan struct{} // closed when the current connection is torn down
	dialing   chan struct{} // non-nil while a dial is under way; closed when it ends
	pending   map[uint64]chan result
	nextID    uint64
	closed    bool
	wg        sync.WaitGroup // the connection's reader and writer
	abandoned sync.WaitGroup // goroutines cancelling abandoned admissions
}

func newPeerClient(addr string, dial Dialer, batch BatchConfig, log *slog.Logger, stats *peerStats) *peerClient {
	return &peerClient{addr: addr, dial: dial, batch: batch, log: log, stats: stats, pending: make(map[uint64]chan result)}
}

// peerStats counts the peer protocol's traffic, for metrics and benchmarks.
type peerStats struct {
	frames atomic.Int64 // call frames written
	calls  atomic.Int64 // calls forwarded
	downs  atomic.Int64 // forwards failed because the peer was unreachable
	pulled atomic.Int64 // keys received by handoff (pulled or pushed)
	given  atomic.Int64 // keys given away by handoff
	// replicated counts key snapshots sent to backups; restored counts keys
	// recovered from a backup's replica after their owner crashed.
	replicated, restored atomic.Int64
	checkpointed         atomic.Int64 // key snapshots written to the checkpoint store
	fromCheckpoint       atomic.Int64 // keys recovered from the checkpoint store
}

func (s *peerStats) frame(items int) {
	s.frames.Add(1)
	s.calls.Add(int64(items))
}

// connect returns the live connection's queue and its done channel,
// dialing if there is none. It never dials while holding p.mu: calls to a
// peer whose dial hangs wait for that dial or their own ctx, whichever ends
// first.
func (p *peerClient) connect(ctx context.Context) (chan item, chan struct{}, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, nil, fmt.Errorf("peer %s: %w: client closed", p.addr, ErrPeerDown)
		}
		if p.conn != nil {
			q, done := p.q, p.done
			p.mu.Unlock()
			return q, done, nil
		}
		if wait := p.dialing; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("peer %s: %w", p.addr, ctx.Err())
			}
		}
		wait := make(chan struct{})
		p.dialing = wait
		p.mu.Unlock()

		conn, err := p.dial(ctx, "tcp", p.addr)

		p.mu.Lock()
		p.dialing = nil
		close(wait)
		if err != nil {
			p.mu.Unlock()
			p.stats.downs.Add(1)
			return nil, nil, fmt.Errorf("peer %s: %w: %v", p.addr, ErrPeerDown, err)
		}
		if p.closed {
			p.mu.Unlock()
			conn.Close()
			continue
		}
		p.install(conn)
		p.mu.Unlock()
	}
}

// install makes conn the live connection and starts its writer and reader.
// Callers hold p.mu.
func (p *peerClient) install(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	p.conn = conn
	p.q = make(chan item, 4096)
	p.done = make(chan struct{})
	q, done := p.q, p.done
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		err := writeFrames(conn, frameCalls, q, p.batch, done, p.stats.frame)
		if err != nil {
			p.fail(conn, err)
		}
	}()
	go func() {
		defer p.wg.Done()
		p.fail(conn, p.readAnswers(conn))
	}()
}

// readAnswers dispatches answers to pending calls until the connection fails.
func (p *peerClient) readAnswers(conn net.Conn) error {
	fr := newFrameReader(conn, frameAnswers)
	for {
		items, err := fr.next()
		if err != nil {
			return err
		}
		for _, it := range items {
			var res result
			if it.status == itemError {
				res.err = fmt.Errorf("peer %s: %s", p.addr, it.body)
			} else {
				res.answer, res.err = DecodeAnswer(it.body)
			}
			p.mu.Lock()
			ch := p.pending[it.id]
			delete(p.pending, it.id)
			p.mu.Unlock()
			if ch != nil {
				ch <- res
			}
		}
	}
}

// fail tears conn down (if it is still the current one) and fails every
// pending call with ErrPeerDown. The next call dials again.
func (p *peerClient) fail(conn net.Conn, cause error) {
	p.mu.Lock()
	if p.conn != conn {
		p.mu.Unlock()
		return
	}
	p.conn = nil
	close(p.done)
	pending := p.pending
	p.pending = make(map[uint64]chan result)
	closed := p.closed
	p.mu.Unlock()
	conn.Close()
	if cause != nil && !closed {
		p.log.Debug("peer connection lost", "peer", p.addr, "err", cause)
	}
	err := fmt.Errorf("peer %s: %w: %v", p.addr, ErrPeerDown, cause)
	for _, ch := range pending {
		ch <- result{err: err}
	}
}

// call forwards c and waits for its answer or ctx's end. An acquire whose
// caller stops waiting is not forgotten: if the owner admits it after all,
// the admission is cancelled there, so a timed-out forward followed by a
// fallback decision does not count the request twice.
func (p *peerClient) call(ctx context.Context, c *Call) (Answer, error) {
	body := AppendCall(nil, c)
	ch := make(chan result, 1)
	var id uint64
	var q chan item
	var done chan struct{}
	for {
		var err error
		if q, done, err = p.connect(ctx); err != nil {
			return Answer{}, err
		}
		p.mu.Lock()
		if p.done != done { // that connection failed meanwhile: use the next one
			p.mu.Unlock()
			continue
		}
		p.nextID++
		id = p.nextID
		p.pending[id] = ch
		p.mu.Unlock()
		break
	}
	select {
	case q <- item{id: id, body: body}:
	case <-done: // fail() answers ch with ErrPeerDown
	case <-ctx.Done():
		p.forget(id)
		return Answer{}, fmt.Errorf("peer %s: %w", p.addr, ctx.Err())
	}
	select {
	case res := <-ch:
		return res.answer, res.err
	case <-ctx.Done():
		if c.Op == OpAcquire {
			p.abandon(c.Key, ch)
		} else {
			p.forget(id)
		}
		return Answer{}, fmt.Errorf("peer %s: %w", p.addr, ctx.Err())
	}
}

// abandon waits in the background for the answer to an acquire nobody waits
// for any more, and cancels the admission if the owner made one. The answer
// always comes: from the owner, or as ErrPeerDown when the connection fails.
func (p *peerClient) abandon(key string, ch chan result) {
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
		if _, err := p.call(ctx, &Call{Op: OpCancel, Key: key, Lease: res.answer.Decision.Lease}); err != nil {
			p.log.Warn("could not cancel a timed-out admission; its slot expires by its TTL", "peer", p.addr, "key", key, "err", err)
		}
	}()
}

func (p *peerClient) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// close tears the connection down and waits for its goroutines.
func (p *peerClient) close() {
	p.mu.Lock()
	p.closed = true
	conn := p.conn
	p.mu.Unlock()
	if conn != nil {
		p.fail(conn, errors.New("closed"))
	}
	p.abandoned.Wait()
	p.wg.Wait()
}

// peerServer serves forwarded calls on a listener.
type peerServer struct {
	ln     net.Listener
	handle func(ctx context.Context, c *Call) (Answer, error)
	inline func(c *Call) bool // calls cheap enough to run on the reader goroutine
	batch  BatchConfig
	log    *slog.Logger

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func (s *peerServer) serve() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(conn)
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		}()
	}
}

func (s *peerServer) serveConn(conn net.Conn) {
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan item, 4096)
	stop := make(chan struct{})
	var calls sync.WaitGroup // calls running on their own goroutines
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		if err := writeFrames(conn, frameAnswers, out, s.batch, stop, nil); err != nil {
			conn.Close()
			for { // keep draining so no call blocks in reply
				select {
				case <-out:
				case <-stop:
					return
				}
			}
		}
	}()
	defer func() {
		cancel()
		calls.Wait()
		close(stop)
		writer.Wait()
	}()
	reply := func(id uint64, a Answer, err error) {
		it := item{id: id}
		if err != nil {
			it.status, it.body = itemError, []byte(err.Error())
		} else {
			it.body = AppendAnswer(nil, &a)
		}
		select {
		case out <- it:
		case <-stop:
		}
	}
	fr := newFrameReader(conn, frameCalls)
	for {
		items, err := fr.next()
		if err != nil {
			s.log.Debug("peer connection ended", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		for _, it := range items {
			c, err := DecodeCall(it.body)
			if err != nil {
				reply(it.id, Answer{}, err)
				continue
			}
			if s.inline(&c) {
				a, err := s.handle(ctx, &c)
				reply(it.id, a, err)
				continue
			}
			calls.Add(1)
			go func(id uint64, c Call) {
				defer calls.Done()
				a, err := s.handle(ctx, &c)
				reply(id, a, err)
			}(it.id, c)
		}
	}
}

// close stops accepting, closes every connection and waits for their goroutines.
func (s *peerServer) close() {
	s.ln.Close()
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
}
