package peer

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Strangers: the peer port's connections that have not finished the
// handshake. Anyone who can reach the port can open them, so they get a
// budget of their own, apart from the members' (ServerConfig.MaxConns, which
// a connection joins only once it has proved the cluster secret), and a
// short deadline (strangerTimeout). A newcomer is never refused: when the
// source address's share of the budget is full, that source's stranger
// that has waited longest is closed to make room; when the whole budget
// is, the one of the source holding the most strangers; one that has sent
// nothing before one that has. A member's connection says its hello the
// moment it is accepted and finishes in one round trip, from an address
// of its own: the sources flooding the port churn among their own
// strangers and never close it. Only an attacker with more addresses than
// the budget's slots, each holding as few strangers as the member's, can
// (and the member's dialer then retries).

// Defaults of the stranger budget.
const (
	// DefaultMaxStrangers is the most connections in their handshake at
	// once. A member opens one connection to each peer it forwards to,
	// all of them at once only when the whole cluster restarts; 32
	// handshakes in flight, each one round trip long, is more than a
	// cluster of dozens of nodes ever needs, and costs 32 descriptors
	// and goroutines at most.
	DefaultMaxStrangers = 32
	// DefaultMaxStrangersPerSource is the most of them from one source IP:
	// a quarter of the budget, so one address (an attacker without the
	// secret, or a peer dialing in a loop) churns among its own slots and
	// never evicts another address's.
	DefaultMaxStrangersPerSource = 8
	// DefaultStrangerTimeout bounds the server side of the handshake. A
	// member's handshake is a LAN round trip (well under a millisecond)
	// plus about 50 µs of HMAC and HKDF; on a loaded 2-core host the
	// handshake goroutine may wait for a GC pause and a few of the
	// scheduler's 10 ms time slices before it runs: tens of
	// milliseconds. 500 ms is ten times that, and a tenth of the 5 s a
	// silent connection held a slot before.
	DefaultStrangerTimeout = 500 * time.Millisecond
)

// stranger is one connection in its handshake.
type stranger struct {
	conn  net.Conn
	src   netip.Addr
	spoke atomic.Bool // it sent a byte
	gone  bool        // left the budget (finished, failed or evicted); guarded by strangers.mu
}

// strangers is the budget of connections in their handshake.
type strangers struct {
	max, perSource int // > 0

	evictedBudget, evictedSource atomic.Uint64 // closed to make room, by which limit

	mu     sync.Mutex
	queue  []*stranger // in arrival order; at most max
	bySrc  map[netip.Addr]int
	closed bool
}

func newStrangers(max, perSource int) *strangers {
	return &strangers{max: max, perSource: perSource, bySrc: map[netip.Addr]int{}}
}

// sourceOf is c's remote IP (the zero Addr for a connection without one).
func sourceOf(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// admit enters c into the budget, closing the longest-waiting stranger
// of its source (at its source's limit) or of all (at the budget) to make
// room. It returns c's record, or nil once close has run (c is closed).
func (s *strangers) admit(c net.Conn) *stranger {
	st := &stranger{conn: c, src: sourceOf(c)}
	var evict *stranger
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = c.Close()
		return nil
	}
	switch {
	case s.bySrc[st.src] >= s.perSource:
		evict = s.oldest(func(o *stranger) bool { return o.src == st.src })
		s.evictedSource.Add(1)
	case len(s.queue) >= s.max:
		most := 0
		for _, n := range s.bySrc {
			most = max(most, n)
		}
		evict = s.oldest(func(o *stranger) bool { return s.bySrc[o.src] == most })
		s.evictedBudget.Add(1)
	}
	if evict != nil {
		s.remove(evict)
	}
	s.queue = append(s.queue, st)
	s.bySrc[st.src]++
	s.mu.Unlock()
	if evict != nil {
		_ = evict.conn.Close() // its handshake fails, and its goroutine calls leave
	}
	return st
}

// oldest returns the longest-waiting stranger matching ok that has sent
// nothing (neither read by its handshake nor waiting in its socket: a
// member's hello can arrive before its goroutine first runs), else the
// longest-waiting one matching ok. Called with mu held,
// with at least one matching.
func (s *strangers) oldest(ok func(*stranger) bool) *stranger {
	var first *stranger
	for _, o := range s.queue {
		if !ok(o) {
			continue
		}
		if !o.spoke.Load() && !sentBytes(o.conn) {
			return o
		}
		if first == nil {
			first = o
		}
	}
	return first
}

// remove takes st out of the budget. Called with mu held.
func (s *strangers) remove(st *stranger) {
	if st.gone {
		return
	}
	st.gone = true
	for i, o := range s.queue {
		if o == st {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
	if s.bySrc[st.src]--; s.bySrc[st.src] <= 0 {
		delete(s.bySrc, st.src)
	}
}

// leave takes st out of the budget when its handshake ends, either way.
// It reports whether st was still in it: false when it was evicted.
func (s *strangers) leave(st *stranger) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := !st.gone
	s.remove(st)
	return was
}

// close closes every stranger and admits no more.
func (s *strangers) close() {
	s.mu.Lock()
	q := s.queue
	s.queue, s.closed = nil, true
	s.mu.Unlock()
	for _, st := range q {
		_ = st.conn.Close()
	}
}

// len is the number of strangers in the budget, and of those from src.
func (s *strangers) len(src netip.Addr) (all, fromSrc int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), s.bySrc[src]
}

// speaking is a stranger's connection during its handshake: it notes the
// first byte read.
type speaking struct {
	net.Conn
	st *stranger
}

func (c speaking) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.st.spoke.Store(true)
	}
	return n, err
}
