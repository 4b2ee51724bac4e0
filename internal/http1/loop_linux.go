package http1

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// loop is one event loop: a goroutine locked to its thread that waits on
// one epoll set for its connections and answers, from their bytes, every
// request Config.Quick takes, as Redis serves its clients. A request costs
// it no goroutine wake-up and no scheduling: that is the point (the tail
// of a loaded node is its goroutines waiting for a CPU). A connection
// leaves the loop for a goroutine of its own (serveConn) at the first
// request Quick declines, a request larger than readBufferSize, a head
// ParseHead does not take, or an answer the socket has no room for; it
// never comes back.
type loop struct {
	s    *Server
	ep   int // the epoll set
	wake int // an eventfd: written to end the loop
	done chan struct{}

	stopOnce sync.Once

	mu     sync.Mutex
	conns  map[int32]*loopConn // by descriptor
	closed bool

	// The loop goroutine's own.
	scratch []byte // a read buffer for whole requests
	req     Request
	resp    Response
	out     []byte
}

// loopConn is a connection on a loop.
type loopConn struct {
	fd int
	nc net.Conn // the accepted connection, its socket detached: closing it gives its slot back
	// part is a request not yet whole (nil when none): it has a
	// readBufferSize buffer of its own only while it is being read.
	part []byte
	// since is when the connection fell idle (its last answer or its
	// accept) or, while part is not empty, the request's first byte.
	since time.Time
	head  bool // part holds a whole head
}

// errNoSocket: an accepted connection without a descriptor to serve.
var errNoSocket = errors.New("http1: connection has no socket")

// startLoops starts n loops of s.
func startLoops(s *Server, n int) ([]*loop, error) {
	var loops []*loop
	for range n {
		l, err := newLoop(s)
		if err != nil {
			for _, l := range loops {
				l.stop()
			}
			return nil, err
		}
		loops = append(loops, l)
	}
	return loops, nil
}

func newLoop(s *Server) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("http1 loop: epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("http1 loop: eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, fmt.Errorf("http1 loop: epoll add: %w", err)
	}
	l := &loop{s: s, ep: ep, wake: wake, done: make(chan struct{}),
		conns: map[int32]*loopConn{}, scratch: make([]byte, readBufferSize)}
	go l.run()
	return l, nil
}

// stop ends the loop, which closes its connections, and waits for it.
// Later calls do nothing.
func (l *loop) stop() {
	l.stopOnce.Do(func() {
		_, _ = unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-l.done
		unix.Close(l.wake) // here, not in the loop: a loop that ended first leaves it open to write
	})
}

// add takes c onto the loop: its socket leaves Go's poller for the loop's
// epoll set. nil also when c could not join the set (or the loop has
// stopped) and is closed; an error leaves c as it was, for a goroutine.
func (l *loop) add(c net.Conn) error {
	fd, err := detach(c)
	if err != nil {
		return err
	}
	lc := &loopConn{fd: fd, nc: c, since: l.s.cfg.Now()}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.drop(lc)
		return nil
	}
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
		l.drop(lc)
		return nil
	}
	l.conns[int32(fd)] = lc
	return nil
}

// detach returns a duplicate of c's socket descriptor and closes c's own,
// which takes it off Go's poller. A Wrapper's inner connection is closed,
// not the Wrapper.
func detach(c net.Conn) (int, error) {
	inner := c
	if w, ok := c.(Wrapper); ok {
		inner = w.NetConn()
	}
	sc, ok := inner.(syscall.Conn)
	if !ok {
		return -1, errNoSocket
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("http1 loop: %w", err)
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("http1 loop: %w", err)
	}
	if derr != nil {
		return -1, fmt.Errorf("http1 loop: dup: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("http1 loop: %w", err)
	}
	_ = inner.Close()
	return fd, nil
}

// attach gives the socket fd back to Go's poller as orig's connection
// (put into a Wrapper, or a net.Conn of its own), and closes fd.
func attach(fd int, orig net.Conn) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f) // a duplicate of fd
	_ = f.Close()
	if err != nil {
		_ = orig.Close()
		return nil, fmt.Errorf("http1 loop: hand-off: %w", err)
	}
	if w, ok := orig.(Wrapper); ok {
		w.SetNetConn(nc)
		return orig, nil
	}
	return nc, nil
}

// drop closes c (l.mu held or c not yet in conns).
func (l *loop) drop(c *loopConn) {
	delete(l.conns, int32(c.fd))
	unix.Close(c.fd) // which takes it out of the epoll set
	_ = c.nc.Close()
}

// close closes c, from the loop.
func (l *loop) close(c *loopConn) {
	l.mu.Lock()
	l.drop(c)
	l.mu.Unlock()
}

// sweepEvery is how often a loop looks for connections past their
// timeouts: a timeout is kept to within its tenth, at least 10 ms, at
// most a second.
func (l *loop) sweepEvery() time.Duration {
	every := time.Second
	for _, d := range []time.Duration{l.s.cfg.ReadHeaderTimeout, l.s.cfg.ReadTimeout, l.s.cfg.IdleTimeout} {
		if d > 0 && d/10 < every {
			every = d / 10
		}
	}
	return max(every, 10*time.Millisecond)
}

// run is the loop: it ends when wake is written, closing every connection
// still on it.
func (l *loop) run() {
	runtime.LockOSThread()
	defer func() {
		l.mu.Lock()
		l.closed = true
		for _, c := range l.conns {
			l.drop(c)
		}
		l.mu.Unlock()
		unix.Close(l.ep)
		runtime.UnlockOSThread()
		close(l.done)
	}()
	every := l.sweepEvery()
	events := make([]unix.EpollEvent, 128)
	last := l.s.cfg.Now()
	for {
		n, err := unix.EpollWait(l.ep, events, int(every.Milliseconds()))
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		now := l.s.cfg.Now()
		for _, ev := range events[:max(n, 0)] {
			if int(ev.Fd) == l.wake {
				return
			}
			l.mu.Lock()
			c := l.conns[ev.Fd]
			l.mu.Unlock()
			if c != nil {
				l.readable(c, now)
			}
		}
		if now.Sub(last) >= every {
			l.sweep(now)
			last = now
		}
	}
}

// sweep closes the connections past their idle, head or request timeout.
func (l *loop) sweep(now time.Time) {
	cfg := &l.s.cfg
	headLimit := cfg.ReadHeaderTimeout
	if headLimit <= 0 {
		headLimit = cfg.ReadTimeout
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		limit := cfg.IdleTimeout
		switch {
		case len(c.part) > 0 && !c.head:
			limit = headLimit
		case len(c.part) > 0:
			limit = cfg.ReadTimeout
		}
		if limit > 0 && now.Sub(c.since) >= limit {
			l.drop(c)
		}
	}
}

// readable reads what c's client sent and answers every whole request in
// it.
func (l *loop) readable(c *loopConn, now time.Time) {
	buf, have := l.scratch, 0
	if len(c.part) > 0 {
		buf, have = c.part[:cap(c.part)], len(c.part)
	}
	m, err := unix.Read(c.fd, buf[have:])
	switch {
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
		return
	case err != nil || m <= 0:
		l.close(c)
		return
	}
	if have == 0 {
		c.since = now
	}
	rest, on := l.answer(c, buf[:have+m], now)
	if !on {
		return
	}
	switch {
	case len(rest) == 0:
		c.part, c.head = nil, false
	case len(rest) == readBufferSize: // a head over the buffer: net/http's to answer (431)
		l.handoff(c, nil, rest, &l.s.loopStats.large)
	default:
		if c.part == nil {
			c.part = make([]byte, 0, readBufferSize)
		}
		c.part = append(c.part[:0], rest...) // rest may lie in c.part: append copies as memmove does
	}
}

// answer answers the whole requests at the start of data, writes their
// answers, and returns what is left of data: a request not yet whole. on
// is false when c has left the loop (closed, or handed to a goroutine).
func (l *loop) answer(c *loopConn, data []byte, now time.Time) (rest []byte, on bool) {
	s := l.s
	out, answered := l.out[:0], uint64(0)
	// count counts the answers in out before they are written, so that a
	// client holding its answer finds it counted.
	count := func() {
		if answered > 0 {
			s.loopStats.answered.Add(answered)
			answered = 0
		}
	}
	defer func() {
		if cap(out) <= DefaultMaxBody {
			l.out = out[:0]
		}
		count() // answers handed to a goroutine to write
	}()
	for len(data) > 0 {
		n, err := ParseHead(data, s.cfg.MaxBody, &l.req)
		if errors.Is(err, ErrIncomplete) {
			c.head = false
			break
		}
		if err != nil { // not a plain POST: net/http's to serve
			l.handoff(c, out, data, &s.loopStats.notPlain)
			return nil, false
		}
		total := n + int(l.req.ContentLength)
		if total > readBufferSize {
			l.handoff(c, out, data, &s.loopStats.large) // serveConn reads it
			return nil, false
		}
		if total > len(data) {
			c.head = true
			break
		}
		l.req.Body = data[n:total]
		l.resp.reset()
		if !s.cfg.Quick(context.Background(), &l.req, &l.resp) {
			l.handoff(c, out, data, &s.loopStats.declined)
			return nil, false
		}
		if l.resp.Abort {
			count()
			_, _ = unix.Write(c.fd, out) // the answers before it: best effort
			l.close(c)
			return nil, false
		}
		closing := l.req.Close || s.cfg.Closing() || s.shutting.Load()
		out = l.resp.appendTo(out, s.date.get(now), closing)
		answered++
		data = data[total:]
		if closing {
			count()
			_, _ = unix.Write(c.fd, out)
			l.close(c)
			return nil, false
		}
	}
	if len(out) == 0 { // nothing answered yet
		return data, true
	}
	c.since = now // idle from this answer, or the next request's first byte came with this read
	count()
	if !l.write(c, out, data) {
		return nil, false
	}
	return data, true
}

// write writes out to c. An answer the socket has no room for goes, with
// what follows it in rest, to a goroutine that waits for the room.
func (l *loop) write(c *loopConn, out, rest []byte) bool {
	w, err := unix.Write(c.fd, out)
	for errors.Is(err, unix.EINTR) {
		w, err = unix.Write(c.fd, out)
	}
	switch {
	case errors.Is(err, unix.EAGAIN):
		w = 0
	case err != nil:
		l.close(c)
		return false
	}
	if w < len(out) {
		l.handoff(c, out[w:], rest, &l.s.loopStats.full)
		return false
	}
	return true
}

// handoff takes c off the loop and gives it to a goroutine of its own
// (serveConn), which first writes pending, then serves the requests in
// rest and what follows them on the connection. why counts it.
func (l *loop) handoff(c *loopConn, pending, rest []byte, why *atomic.Uint64) {
	why.Add(1)
	l.mu.Lock()
	delete(l.conns, int32(c.fd))
	l.mu.Unlock()
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	nc, err := attach(c.fd, c.nc)
	if err != nil {
		return
	}
	if len(rest) > 0 {
		nc = &prefixConn{Conn: nc, rest: append([]byte(nil), rest...)}
	}
	l.s.serveOwn(nc, append([]byte(nil), pending...), nil)
}
