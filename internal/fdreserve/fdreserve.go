// Package fdreserve keeps a reserve of file descriptors for a process's own
// outbound connections: a listener asks Full for every connection it
// accepts and closes the connection at once when the process is within
// the reserve of its open-file limit (RLIMIT_NOFILE).
//
// The mechanism is the descriptor's own number. POSIX (and Linux) hands
// out the lowest free descriptor, so a socket accepted as descriptor n
// proves that descriptors 0 to n-1 are all open: n ≥ limit − reserve means
// at least limit − reserve descriptors are in use, whatever opened them.
// It costs reading the socket's number (no system call) an accept, not a
// scan of /proc/self/fd. It can err only one way: holes left by closed
// descriptors make n smaller than the count, so a process with holes may
// accept past the mark; the next accepts fill the holes first (lowest
// first), so the mark holds again after at most as many accepts as there
// are holes.
package fdreserve

import (
	"net"
	"syscall"
)

// DefaultReserve is the descriptors kept free by default. A node's own
// outbound descriptors are: one peer connection to each member it forwards
// to (a cluster of a few dozen nodes at most), a Redis pool (go-redis
// defaults to 10 a CPU; a few for a small host), the DNS lookups of a
// join, the files it reads (config, the tiktoken tables, /proc for the
// process metrics) and the descriptors the runtime keeps (epoll, the
// event loops' eventfds and duplicates). 64 covers them on the hosts we
// run on (up to 4 CPUs, tens of members) and costs nothing worth having:
// 6% of the smallest limit we support (1,024), well under 1% of a
// production one.
const DefaultReserve = 64

// Reserve tells when the process is within its reserve of descriptors. A
// nil *Reserve never is (Full is false): a disabled reserve.
type Reserve struct {
	mark int // a descriptor numbered mark or above is within the reserve
}

// New returns the Reserve that keeps reserve descriptors free below the
// process's soft RLIMIT_NOFILE as it is now (Go raises the soft limit to
// the hard one at start, so that is the limit the process runs with). It
// returns nil, a disabled reserve, when reserve ≤ 0 or the limit cannot be
// read or is unlimited.
func New(reserve int) *Reserve {
	if reserve <= 0 {
		return nil
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<30 {
		return nil
	}
	return WithLimit(int(rl.Cur), reserve)
}

// WithLimit returns the Reserve that keeps reserve descriptors free below
// limit. Nil when reserve ≤ 0 or limit ≤ reserve (nothing could be
// accepted: a misconfiguration better refused by the caller than turned
// into a listener that takes nothing).
func WithLimit(limit, reserve int) *Reserve {
	if reserve <= 0 || limit <= reserve {
		return nil
	}
	return &Reserve{mark: limit - reserve}
}

// Mark is the lowest descriptor number within the reserve; 0 for a nil
// Reserve.
func (r *Reserve) Mark() int {
	if r == nil {
		return 0
	}
	return r.mark
}

// Full reports whether c, just accepted, lies within the reserve: its
// descriptor's number is Mark or above. A connection that is not a socket
// of this process (nor wraps one, see NetConn) is never within it.
func (r *Reserve) Full(c net.Conn) bool {
	if r == nil {
		return false
	}
	fd, ok := Descriptor(c)
	return ok && fd >= r.mark
}

// Descriptor returns the descriptor number of c, unwrapping connections
// that expose the one they wrap with NetConn() net.Conn (as tokenringd's
// counted connections and tls.Conn do). ok is false when c holds no
// descriptor.
func Descriptor(c net.Conn) (fd int, ok bool) {
	for range 8 { // bounded: a wrapper returning itself must not loop for ever
		w, wraps := c.(interface{ NetConn() net.Conn })
		if !wraps {
			break
		}
		c = w.NetConn()
	}
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return 0, false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd = -1
	if err := raw.Control(func(d uintptr) { fd = int(d) }); err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}
