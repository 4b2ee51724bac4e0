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

// The server side of the peer protocol: one goroutine reads each
// connection's frames, answers pings (and calls cheap enough, see inline)
// on the spot, runs the other calls on goroutines of their own. The
// reader writes the answers it made itself when it is about to wait for
// the connection, all those of the frames one read brought in one write;
// a call on its own goroutine writes its answer itself, or has it written
// by whoever is writing (frameSender). Only a lingering batch
// (BatchConfig.Wait) keeps a writer goroutine.

// Server serves forwarded calls on a listener.
type Server struct {
	ln      net.Listener
	handle  func(ctx context.Context, c *Call) (Answer, error)
	inline  func(c *Call) bool       // calls cheap enough to run on the reader goroutine
	heardMu sync.Mutex               // guards heard
	heard   map[string]*atomic.Int64 // peer address → when a frame from it last arrived (unix ns)
	batch   BatchConfig
	log     *slog.Logger
	// auth, if not nil, authenticates every connection before its first
	// frame is read; nil serves the plaintext protocol.
	auth *Auth
	wire Limits
	// maxConns is the most members' connections (those past the
	// handshake, or every connection without auth) served at once; one
	// beyond it is closed. Zero means DefaultMaxConns.
	maxConns int
	// strangers, with auth, is the budget of connections in their
	// handshake (strangers.go); nil means newStrangers with the defaults.
	strangers     *strangers
	strangersOnce sync.Once
	// memberCapped counts connections closed at maxConns.
	memberCapped atomic.Uint64
	// stats, if not nil, counts failed handshakes.
	stats *Stats
	// done, if not nil, is closed by close: the accept loop's backoff
	// ends with it.
	done chan struct{}

	authLog, acceptLog, capLog rate.Sometimes // one warning a second at most, each

	mu      sync.Mutex // guards conns and members
	conns   map[net.Conn]struct{}
	members map[net.Conn]struct{} // those of conns counted against maxConns
	wg      sync.WaitGroup
}

// Defaults of the peer protocol's bounds.
const (
	// DefaultHandshakeTimeout bounds a handshake (NewAuth's timeout).
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultReadTimeout is the time a frame, once started, may take to
	// arrive whole (Limits.ReadTimeout).
	DefaultReadTimeout = 10 * time.Second
	// DefaultMaxConns is the most members' connections a Server serves at
	// once (ServerConfig.MaxConns).
	DefaultMaxConns = 256
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Handle executes a call that arrived, on a goroutine of its own
	// unless Inline says it is cheap enough for the connection's reader.
	Handle func(ctx context.Context, c *Call) (Answer, error)
	// Inline reports whether a call is decided at once, without waiting
	// on anything: it then runs on the connection's reader, and its
	// answer goes out with those of the same read.
	Inline func(c *Call) bool
	Batch  BatchConfig
	Log    *slog.Logger
	// Auth, if not nil, authenticates every connection before its first
	// frame is read; nil serves the plaintext protocol.
	Auth   *Auth
	Limits Limits
	// MaxConns is the most members' connections (those past the
	// handshake, or every connection without Auth) served at once; one
	// beyond it is closed. Zero means DefaultMaxConns.
	MaxConns int
	// Stats, if not nil, counts failed handshakes.
	Stats *Stats
}

// NewServer serves the peer protocol on ln, from a goroutine of its own,
// until Close.
func NewServer(ln net.Listener, cfg ServerConfig) *Server {
	s := &Server{
		ln:       ln,
		handle:   cfg.Handle,
		inline:   cfg.Inline,
		batch:    cfg.Batch,
		log:      cfg.Log,
		conns:    make(map[net.Conn]struct{}),
		auth:     cfg.Auth,
		wire:     cfg.Limits,
		maxConns: cfg.MaxConns,
		stats:    cfg.Stats,
		done:     make(chan struct{}),
	}
	s.wg.Add(1)
	go s.serve()
	return s
}

// HeardFrom is when a frame last arrived from the member at peer address
// addr, on any connection it announced itself on (its first frame, a ping
// naming it: Client does); zero if none has.
func (s *Server) HeardFrom(addr string) time.Time {
	s.heardMu.Lock()
	h := s.heard[addr]
	s.heardMu.Unlock()
	if h == nil {
		return time.Time{}
	}
	return time.Unix(0, h.Load())
}

// heardClock returns the clock HeardFrom reads for addr, made on first use.
func (s *Server) heardClock(addr string) *atomic.Int64 {
	s.heardMu.Lock()
	defer s.heardMu.Unlock()
	if s.heard == nil {
		s.heard = make(map[string]*atomic.Int64)
	}
	h := s.heard[addr]
	if h == nil {
		h = new(atomic.Int64)
		s.heard[addr] = h
	}
	return h
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Rejected counts the connections closed unserved: in their handshake, to
// make room in the strangers' budget (budget) or in their source address's
// share of it (source); past it, at MaxConns (capped).
func (s *Server) Rejected() (budget, source, capped uint64) {
	st := s.strangerBudget()
	return st.evictedBudget.Load(), st.evictedSource.Load(), s.memberCapped.Load()
}

// Bounds of the accept loop's backoff after a failed Accept, as net/http's.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// serve accepts connections until the listener is closed. An Accept that
// fails for any other reason (EMFILE under a connection flood, ECONNABORTED)
// is retried after a backoff doubling from 5 ms to 1 s, warned about at
// most once a second.
func (s *Server) serve() {
	defer s.wg.Done()
	// Set before any connection's goroutine starts, which uses authLog.
	s.authLog.Interval, s.acceptLog.Interval, s.capLog.Interval = time.Second, time.Second, time.Second
	var delay time.Duration
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.closed() {
				return
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			s.acceptLog.Do(func() {
				s.log.Warn("peer listener: accept failed; retrying", "err", err, "retry_in", delay)
			})
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-s.done:
				timer.Stop()
				return
			}
			continue
		}
		delay = 0
		if !s.admit(conn) {
			return
		}
	}
}

// admit starts serving conn: as a stranger in its handshake with auth,
// else as a member (within maxConns). It is false, conn closed, once
// close has begun.
func (s *Server) admit(conn net.Conn) bool {
	var st *stranger
	if s.auth != nil {
		if st = s.strangerBudget().admit(conn); st == nil {
			return false
		}
	}
	s.mu.Lock()
	if s.conns == nil {
		s.mu.Unlock()
		conn.Close()
		return false
	}
	if st == nil && !s.joinMembers(conn) {
		s.mu.Unlock()
		return true
	}
	s.conns[conn] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.serveConn(conn, st)
		s.mu.Lock()
		delete(s.conns, conn)
		delete(s.members, conn)
		s.mu.Unlock()
	}()
	return true
}

// joinMembers counts conn against maxConns, or closes it at the cap.
// Called with mu held.
func (s *Server) joinMembers(conn net.Conn) bool {
	if limit := s.connCap(); len(s.members) >= limit {
		conn.Close()
		s.memberCapped.Add(1)
		s.capLog.Do(func() {
			s.log.Warn("peer listener: connection refused, at the connection cap", "remote", conn.RemoteAddr().String(), "max_peer_conns", limit)
		})
		return false
	}
	if s.members == nil {
		s.members = make(map[net.Conn]struct{})
	}
	s.members[conn] = struct{}{}
	return true
}

// strangerBudget is s.strangers, made with the defaults if nil.
func (s *Server) strangerBudget() *strangers {
	s.strangersOnce.Do(func() {
		if s.strangers == nil {
			s.strangers = newStrangers(DefaultMaxStrangers, DefaultMaxStrangersPerSource)
		}
	})
	return s.strangers
}

// member counts conn, past its handshake, against maxConns; false (conn
// closed) at the cap.
func (s *Server) member(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joinMembers(conn)
}

func (s *Server) closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns == nil
}

func (s *Server) connCap() int {
	if s.maxConns <= 0 {
		return DefaultMaxConns
	}
	return s.maxConns
}

// open authenticates conn, if the server has secrets, and returns its
// frame reader and the cipher its answers are sealed with. A client that
// fails the handshake is counted, warned about (once a second at most) and
// gets nothing.
func (s *Server) open(conn net.Conn, st *stranger) (*frameReader, *aeadStream, error) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if s.auth == nil {
		fr := newFrameReader(conn, frameCalls, s.wire, nil)
		if s.wire.ReadTimeout > 0 {
			// Nobody proved anything yet: a connection that sends no
			// frame is not kept.
			if err := fr.expectBy(time.Now().Add(s.wire.ReadTimeout)); err != nil {
				return nil, nil, err
			}
		}
		return fr, nil, nil
	}
	sess, err := s.auth.accept(speaking{Conn: conn, st: st})
	if !s.strangerBudget().leave(st) {
		return nil, nil, fmt.Errorf("peer handshake %s: closed to make room for newer ones", conn.RemoteAddr())
	}
	if err == nil && !s.member(conn) {
		return nil, nil, fmt.Errorf("peer %s: at the connection cap", conn.RemoteAddr())
	}
	if err != nil {
		if s.stats != nil {
			s.stats.AuthFailures.Add(1)
		}
		s.authLog.Do(func() {
			s.log.Warn("peer handshake failed: connection closed", "remote", conn.RemoteAddr().String(), "err", err)
		})
		return nil, nil, fmt.Errorf("peer handshake %s: %w", conn.RemoteAddr(), err)
	}
	return newFrameReader(conn, frameCalls, s.wire, sess.recv), sess.send, nil
}

func (s *Server) serveConn(conn net.Conn, st *stranger) {
	defer conn.Close()
	fr, seal, err := s.open(conn, st)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := s.answers(conn, seal)
	var calls sync.WaitGroup // calls running on their own goroutines
	defer func() {
		cancel()
		out.end()
		calls.Wait()
		out.close()
	}()
	reply := func(id uint64, a Answer, err error) { out.send(answerItem(id, a, err)) }
	// The reader answers the calls it decides itself into the queue, and
	// writes them whenever it is about to wait for the connection: the
	// answers to all the frames one read brought go out in one write.
	fr.idle = out.flush
	var heard *atomic.Int64 // the caller's, once it said who it is
	for {
		items, err := fr.next()
		if err != nil {
			s.log.Debug("peer connection ended", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		if heard != nil {
			heard.Store(time.Now().UnixNano())
		}
		for _, it := range items {
			cctx, body, err := ctx, it.body, error(nil)
			if it.status&itemTraced != 0 { // the caller's span came along (trace.go)
				cctx, body, err = traceOf(ctx, body)
			}
			var c Call
			if err == nil {
				c, err = DecodeCall(body)
			}
			switch {
			case err != nil:
				out.queue(answerItem(it.id, Answer{}, err))
			case c.Op == OpPing: // a liveness probe: answered at once, whatever else is queued
				if c.From != "" && heard == nil {
					heard = s.heardClock(c.From)
					heard.Store(time.Now().UnixNano())
				}
				out.queue(answerItem(it.id, Answer{State: features}, nil)) // what this server reads (trace.go)
			case s.inline(&c):
				if len(c.State) > 0 {
					// A call carrying state (a replication) may take a
					// while: the answers before it do not wait for it.
					out.flush()
				}
				a, err := s.handle(cctx, &c)
				out.queue(answerItem(it.id, a, err))
			default:
				calls.Add(1)
				go func(id uint64, c Call) {
					defer calls.Done()
					a, err := s.handle(cctx, &c)
					reply(id, a, err)
				}(it.id, c)
			}
		}
	}
}

// traceOf reads the trace context at the start of a traced call item's
// body (itemTraced, trace.go), and returns ctx carrying it, for the call's
// handler, and the call's bytes after it.
func traceOf(ctx context.Context, body []byte) (context.Context, []byte, error) {
	tc, rest, err := splitTrace(body)
	if err != nil {
		return ctx, nil, fmt.Errorf("decode call: %w", err)
	}
	return WithTrace(ctx, tc), rest, nil
}

// answerItem is the item that answers call id with a or err.
func answerItem(id uint64, a Answer, err error) item {
	if err != nil {
		return item{id: id, status: itemError, body: []byte(err.Error())}
	}
	return item{id: id, body: AppendAnswer(nil, &a)}
}

// answerOut is where a connection's answers go: queue holds one back for
// the next flush (the reader answers a frame's calls, then writes them
// together), send writes it as soon as it can.
type answerOut interface {
	queue(item)
	send(item)
	flush()
	end()   // the reader has ended: answers not yet written may be dropped
	close() // every call has answered
}

// answers returns the way conn's answers are written: by the goroutines
// that make them (sendAnswers), or, when the batch lingers for more items
// (BatchConfig.Wait), by a writer goroutine (chanAnswers).
func (s *Server) answers(conn net.Conn, seal *aeadStream) answerOut {
	if s.batch.Wait <= 0 {
		return &sendAnswers{snd: newFrameSender(conn, frameAnswers, s.batch, s.wire, seal, nil), conn: conn}
	}
	a := &chanAnswers{out: make(chan item, 4096), stop: make(chan struct{})}
	a.writer.Add(1)
	go func() {
		defer a.writer.Done()
		w := &frameWriter{conn: conn, kind: frameAnswers, batch: s.batch, wire: s.wire, seal: seal}
		if err := w.run(a.out, a.stop); err != nil {
			conn.Close()
			for { // keep draining so no call blocks in reply
				select {
				case <-a.out:
				case <-a.stop:
					return
				}
			}
		}
	}()
	return a
}

// sendAnswers writes answers through a frameSender; a write that fails
// closes the connection, which ends its reader.
type sendAnswers struct {
	snd  *frameSender
	conn net.Conn
}

func (a *sendAnswers) queue(it item) { a.snd.queue(it) }
func (a *sendAnswers) close()        {}

// end closes the connection, so no call's answer waits on a write to a
// peer that stopped reading: the connection is over.
func (a *sendAnswers) end() { a.conn.Close() }
func (a *sendAnswers) send(it item) {
	if err := a.snd.send(it); err != nil {
		a.conn.Close()
	}
}
func (a *sendAnswers) flush() {
	if err := a.snd.flush(); err != nil {
		a.conn.Close()
	}
}

// chanAnswers hands answers to a writer goroutine.
type chanAnswers struct {
	out    chan item
	stop   chan struct{}
	writer sync.WaitGroup
}

func (a *chanAnswers) queue(it item) { a.send(it) }
func (a *chanAnswers) flush()        {}
func (a *chanAnswers) end()          {}
func (a *chanAnswers) send(it item) {
	select {
	case a.out <- it:
	case <-a.stop:
	}
}
func (a *chanAnswers) close() {
	close(a.stop)
	a.writer.Wait()
}

// Close stops accepting, closes every connection and waits for their goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	s.ln.Close()
	if s.auth != nil {
		s.strangerBudget().close()
	}
	if s.done != nil && conns != nil {
		close(s.done)
	}
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
}
