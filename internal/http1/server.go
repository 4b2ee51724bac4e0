package http1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/internal/alarm"
	"github.com/tokenring/tokenring/internal/fdreserve"
	"golang.org/x/time/rate"
)

// Handler answers a plain request into resp (empty on entry) and returns
// true, or returns false having changed nothing: the request then goes, with
// its connection, to the fallback net/http server. req and its slices are
// valid only during the call. Its context is never cancelled (a context
// shared by every call would be a lock every call takes): a Handler bounds
// its own waits, and a Shutdown that gives up closes the connections.
type Handler func(ctx context.Context, req *Request, resp *Response) bool

// Config configures a Server. Zero timeouts are no limit, as in
// http.Server.
type Config struct {
	// Handler answers the plain requests it takes. Required.
	Handler Handler
	// Quick answers, on an event loop's thread, the plain requests it
	// can answer at once, without waiting on anything (the network, a
	// queue, another goroutine); it declines every other (false, having
	// changed nothing), and Handler serves it and what follows on its
	// connection from a goroutine of the connection's own. Nil: no loop.
	Quick Handler
	// Loops is the number of event loops that serve connections while
	// Quick takes their requests, each accepted connection going to the
	// next loop in turn. 0: none, a goroutine a connection. Linux only
	// (elsewhere ignored); a connection that is not a socket (nor a
	// Wrapper of one) gets a goroutine.
	Loops int
	// Fallback serves every connection from the first request Handler
	// does not take. Required; its own timeouts apply from then on.
	Fallback *http.Server
	// ReadHeaderTimeout bounds reading a request's head, from its first
	// byte; ReadTimeout the whole request. As http.Server's.
	ReadHeaderTimeout, ReadTimeout time.Duration
	// WriteTimeout bounds writing each answer.
	WriteTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a kept-alive
	// connection.
	IdleTimeout time.Duration
	// MaxBody is the largest body the fast path reads; a larger request
	// goes to Fallback. Default 64 KiB.
	MaxBody int64
	// Closing, when it returns true, makes each answer carry
	// Connection: close and end its connection (a draining node). Nil:
	// never.
	Closing func() bool
	// Now is the clock of the deadlines and the Date header. Default
	// time.Now.
	Now func() time.Time
	// FDReserve is the file descriptors kept free for the process's own
	// outbound connections (peers, Redis): a connection accepted within
	// FDReserve of the open-file limit is closed at once (see package
	// fdreserve). 0 means fdreserve.DefaultReserve (64); negative, none.
	FDReserve int
	// Log receives the accept loop's warnings (one a second at most).
	// Nil means slog.Default().
	Log *slog.Logger
}

// Bounds of the accept loop's backoff after a failed Accept, as
// net/http's.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// DefaultMaxBody is Config.MaxBody's default.
const DefaultMaxBody = 64 << 10

// readBufferSize is a connection's read buffer: a request whose head and
// body fit is answered from it without a copy.
const readBufferSize = 8 << 10

// Wrapper is a listener's connection that wraps the socket it accepted, as
// tokenringd's counted connections do: an event loop takes the socket out
// (NetConn, which it closes once it holds a duplicate) and serves it
// itself, and when it gives the connection to a goroutine it puts a fresh
// one back (SetNetConn). The Wrapper is closed when the connection ends.
// The server reads and writes the socket itself, on a loop and on a
// goroutine alike (socket_linux.go); the Wrapper's Read and Write serve
// Fallback, which is handed the Wrapper.
type Wrapper interface {
	NetConn() net.Conn
	SetNetConn(net.Conn)
}

// Server serves HTTP/1.1 connections, answering the plain requests its
// Handler takes and handing each connection to Config.Fallback at the
// first request it does not. The zero value is not usable: use NewServer.
type Server struct {
	cfg      Config
	date     dateCache
	handoff  *handoffListener
	shutting atomic.Bool
	// loopStats are counted by the loops, read by LoopStats.
	loopStats loopCounters
	// alarms start the client watches (Request.WatchClient) without a
	// runtime timer a request.
	alarms *alarm.Clock
	// busy counts the connections on goroutines between a request's first
	// byte and its answer written (next).
	busy atomic.Int32
	// reserve is the descriptors kept free (nil: none); reserved counts
	// the connections closed because of it.
	reserve  *fdreserve.Reserve
	reserved atomic.Uint64
	// stopped is closed by Shutdown: the accept loop's backoff ends.
	stopped  chan struct{}
	stopOnce sync.Once
	log      *slog.Logger
	// acceptLog and reserveLog allow a warning a second each.
	acceptLog, reserveLog rate.Sometimes

	mu       sync.Mutex
	ln       net.Listener
	loops    []*loop
	nextLoop int
	conns    map[*conn]struct{} // on the fast path
	wg       sync.WaitGroup     // serveConn calls
	fb       chan struct{}      // closed when Fallback.Serve has returned
}

// NewServer returns a Server of cfg.
func NewServer(cfg Config) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Closing == nil {
		cfg.Closing = func() bool { return false }
	}
	if cfg.FDReserve == 0 {
		cfg.FDReserve = fdreserve.DefaultReserve
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Server{cfg: cfg, handoff: newHandoffListener(), alarms: alarm.New(alarm.Config{}),
		conns: map[*conn]struct{}{}, fb: make(chan struct{}), stopped: make(chan struct{}),
		reserve: fdreserve.New(cfg.FDReserve), log: cfg.Log,
		acceptLog: rate.Sometimes{Interval: time.Second}, reserveLog: rate.Sometimes{Interval: time.Second}}
}

// ReserveRefused is the number of connections closed as soon as accepted
// because the process was within Config.FDReserve of its open-file limit.
func (s *Server) ReserveRefused() uint64 { return s.reserved.Load() }

// Serve accepts connections on ln until Shutdown (then it returns
// http.ErrServerClosed) or ln is closed (net.ErrClosed). Any other Accept
// error (EMFILE, ENFILE, ECONNABORTED...) is retried after a backoff
// doubling from 5 ms to 1 s, warned about once a second at most: a node
// out of descriptors for a moment serves again once some are freed.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shutting.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = ln
	s.handoff.addr = ln.Addr()
	if s.cfg.Quick != nil && s.cfg.Loops > 0 {
		loops, err := startLoops(s, s.cfg.Loops)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		s.loops = loops
	}
	s.mu.Unlock()
	go func() {
		defer close(s.fb)
		_ = s.cfg.Fallback.Serve(s.handoff) // returns at Shutdown
	}()
	return s.accept(ln)
}

// accept is Serve's accept loop.
func (s *Server) accept(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			s.acceptLog.Do(func() {
				s.log.Warn("http listener: accept failed; retrying", "err", err, "retry_in", delay)
			})
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case <-s.stopped:
				timer.Stop()
				return http.ErrServerClosed
			}
			continue
		}
		delay = 0
		if s.reserve.Full(c) {
			n := s.reserved.Add(1) // counted before the client can see the close
			_ = c.Close()
			s.reserveLog.Do(func() {
				s.log.Warn("http connection closed: the node is within its descriptor reserve",
					"reserve", s.cfg.FDReserve, "from_descriptor", s.reserve.Mark(), "refused_total", n)
			})
			continue
		}
		if !s.serveOwn(c, nil, s.loops) {
			return http.ErrServerClosed
		}
	}
}

// serveOwn serves c on the next of loops, or (when there are none, or c
// cannot go on one) on a goroutine of its own that first writes pending.
// It is false, having closed c, once Shutdown has begun.
func (s *Server) serveOwn(c net.Conn, pending []byte, loops []*loop) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() { // accepted as Shutdown closed the listener, or handed over as it stops the loops
		_ = c.Close()
		return false
	}
	if len(loops) > 0 {
		s.nextLoop++
		if loops[s.nextLoop%len(loops)].add(c) == nil {
			return true
		}
	}
	cn := &conn{Conn: c, rw: readWriter(c)}
	s.conns[cn] = struct{}{}
	s.wg.Add(1)
	go s.serveConn(cn, pending)
	return true
}

// Shutdown stops accepting, closes the fast path's idle connections, waits
// for its answers in progress to be written (each then closes its
// connection), and shuts Fallback down; all within ctx. When ctx ends
// first, the remaining connections are closed and ctx's error returned.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutting.Store(true)
	s.stopOnce.Do(func() { close(s.stopped) })
	if s.ln != nil {
		_ = s.ln.Close()
	}
	started := s.ln != nil
	loops := s.loops
	s.mu.Unlock()
	for _, l := range loops {
		l.stop() // closes its connections, idle or part-read: a loop has no answer in progress between events
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		s.closeConns(true)
		select {
		case <-done:
			break wait
		case <-tick.C:
		case <-ctx.Done():
			err = ctx.Err()
			s.closeConns(false)
			<-done
			break wait
		}
	}
	s.alarms.Close() // every watch has ended with its request
	if fbErr := s.cfg.Fallback.Shutdown(ctx); err == nil {
		err = fbErr
	}
	if started {
		<-s.fb
	}
	return err
}

// closeConns closes the fast path's connections: only the idle ones when
// idleOnly.
func (s *Server) closeConns(idleOnly bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if !idleOnly || c.idle.Load() {
			_ = c.Close()
		}
	}
}

// conn is a connection on the fast path.
type conn struct {
	net.Conn
	rw   io.ReadWriter // the socket's bytes (readWriter), after a loop's prefix
	idle atomic.Bool   // waiting for a request's first byte
	// rdl and wdl are the read and write deadlines last set (zero: none).
	rdl, wdl time.Time
}

// Read reads the request bytes a loop had read and handed over with c
// first, then the socket's.
func (c *conn) Read(p []byte) (int, error) {
	if pc, ok := c.Conn.(*prefixConn); ok && len(pc.rest) > 0 {
		return pc.Read(p)
	}
	return c.rw.Read(p)
}

// Write writes p on the socket.
func (c *conn) Write(p []byte) (int, error) { return c.rw.Write(p) }

// lazySlack is how far short of its timeout a deadline set earlier may
// be and still stand: resetting a deadline costs a timer update, so a
// kept-alive connection moves its idle and write deadlines once in every
// eighth of their timeouts, not at every request. A connection idle for
// IdleTimeout·7/8 may thus be closed, and an answer's write may be cut
// after WriteTimeout·7/8.
const lazySlack = 8

// setDeadline sets *cur to now+d (none when d is 0) with set, unless *cur
// is already between now+d·7/8 and now+d.
func setDeadline(set func(time.Time) error, cur *time.Time, now time.Time, d time.Duration) {
	var t time.Time
	if d > 0 {
		t = now.Add(d)
		if !cur.After(t) && cur.After(t.Add(-d/lazySlack)) {
			return
		}
	} else if cur.IsZero() {
		return
	}
	*cur = t
	_ = set(t)
}

// serveConn writes pending to c, then answers c's plain requests until c
// closes, fails, or meets a request for Fallback.
func (s *Server) serveConn(c *conn, pending []byte) {
	defer s.wg.Done()
	handed := false
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		if !handed {
			_ = c.Close()
		}
	}()
	if len(pending) > 0 {
		setDeadline(c.SetWriteDeadline, &c.wdl, s.cfg.Now(), s.cfg.WriteTimeout)
		if _, err := c.Write(pending); err != nil {
			return
		}
	}
	br := bufio.NewReaderSize(c, readBufferSize)
	ex := exchange{last: s.cfg.Now(), watch: watchable{c: c, br: br, alarms: s.alarms}}
	for {
		r, keep, err := s.next(c, br, &ex)
		switch {
		case errors.Is(err, ErrNotPlain):
			handed = true
			s.handoff.push(&replayConn{Conn: c.Conn, r: r})
			return
		case err != nil || !keep:
			return
		}
	}
}

// exchange is one connection's reusable buffers.
type exchange struct {
	req   Request
	resp  Response
	out   []byte
	big   []byte    // a request larger than the read buffer
	last  time.Time // when the last request's first byte was read
	watch watchable // the connection, for Request.WatchClient
}

// next reads, answers and writes one request of c. keep is false when the
// connection is to close after it. err is ErrNotPlain, with r the reader
// that replays the request and what follows, when Fallback is to serve c.
func (s *Server) next(c *conn, br *bufio.Reader, ex *exchange) (r io.Reader, keep bool, err error) {
	c.idle.Store(true)
	if s.shutting.Load() {
		return nil, false, nil
	}
	setDeadline(c.SetReadDeadline, &c.rdl, ex.last, s.cfg.IdleTimeout)
	if br.Buffered() == 0 && s.busy.Load() > 0 {
		// Let the other connections' goroutines run first: by the time
		// this one reads, its client has often sent the next request, and
		// the read finds it rather than failing (EAGAIN), parking and
		// being woken. 5-8% less CPU per decision under load. Only while
		// another connection is answering: with nothing else to run,
		// Gosched still wakes an idle thread to look (the runtime's
		// wakep), a futex and a sleep on another CPU for each request of
		// a sequential client.
		runtime.Gosched()
	}
	if _, err := br.Peek(1); err != nil {
		return nil, false, err
	}
	c.idle.Store(false)
	s.busy.Add(1)
	defer s.busy.Add(-1)
	start := s.cfg.Now()
	ex.last = start
	raw, n, err := s.readRequest(c, br, ex, start)
	if err != nil {
		return br, false, err
	}
	ex.req.Body = raw[n:]
	ex.req.watch = &ex.watch
	ex.resp.reset()
	if !s.cfg.Handler(context.Background(), &ex.req, &ex.resp) {
		if len(ex.big) > 0 && &raw[0] == &ex.big[0] {
			return io.MultiReader(bytes.NewReader(raw), br), false, ErrNotPlain
		}
		return br, false, ErrNotPlain
	}
	if ex.resp.Abort {
		return nil, false, nil
	}
	if len(ex.big) == 0 || &raw[0] != &ex.big[0] {
		_, _ = br.Discard(len(raw))
	}
	closing := ex.req.Close || s.cfg.Closing() || s.shutting.Load()
	ex.out = ex.resp.appendTo(ex.out[:0], s.date.get(start), closing)
	// WriteTimeout bounds the writing, from the answer being ready (a
	// Handler may wait long for it: an upstream's answer).
	setDeadline(c.SetWriteDeadline, &c.wdl, s.cfg.Now(), s.cfg.WriteTimeout)
	if _, err := c.Write(ex.out); err != nil {
		return nil, false, err
	}
	if cap(ex.out) > DefaultMaxBody {
		ex.out = nil
	}
	if cap(ex.resp.Body) > DefaultMaxBody {
		ex.resp.Body = nil
	}
	return nil, !closing, nil
}

// readRequest reads the request whose first byte is in br: its head, then
// its body. It returns the request's bytes (n of them the head) and leaves
// them in br (read, not consumed) when they fit the buffer; a larger
// request is read into ex.big. ErrNotPlain leaves br as it was.
func (s *Server) readRequest(c *conn, br *bufio.Reader, ex *exchange, start time.Time) (raw []byte, n int, err error) {
	headLimit := s.cfg.ReadHeaderTimeout
	if headLimit <= 0 {
		headLimit = s.cfg.ReadTimeout
	}
	for waited := false; ; waited = true {
		buf, _ := br.Peek(br.Buffered())
		if n, err = ParseHead(buf, s.cfg.MaxBody, &ex.req); !errors.Is(err, ErrIncomplete) {
			break
		}
		if br.Buffered() == br.Size() {
			return nil, 0, ErrNotPlain // a head over the buffer: net/http's to answer (431)
		}
		if !waited && headLimit > 0 {
			c.rdl = start.Add(headLimit)
			_ = c.SetReadDeadline(c.rdl)
		}
		if _, err = br.Peek(br.Buffered() + 1); err != nil {
			return nil, 0, err
		}
	}
	if err != nil {
		return nil, 0, err
	}
	total := n + int(ex.req.ContentLength)
	if br.Buffered() < total && s.cfg.ReadTimeout > 0 {
		c.rdl = start.Add(s.cfg.ReadTimeout)
		_ = c.SetReadDeadline(c.rdl)
	}
	if total <= br.Size() {
		raw, err = br.Peek(total)
		return raw, n, err
	}
	if cap(ex.big) < total {
		ex.big = make([]byte, total)
	}
	ex.big = ex.big[:total]
	if _, err = io.ReadFull(br, ex.big); err != nil {
		return nil, 0, err
	}
	if _, err = ParseHead(ex.big, s.cfg.MaxBody, &ex.req); err != nil {
		return nil, 0, err // cannot happen: the same head parsed above
	}
	return ex.big, n, nil
}
