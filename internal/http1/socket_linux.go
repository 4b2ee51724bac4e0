package http1

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// socket reads and writes a connection's socket with raw system calls,
// waiting in Go's poller as net.Conn does. A socket's reads and writes
// never block (the poller waits instead), so they need not tell the
// runtime they might, as net.Conn's do (entersyscall): after an idle
// moment that telling wakes the runtime's monitor thread, a futex call on
// the request's path, twice a proxied call (BENCHMARKS.md, "What each
// piece of complexity buys": raw socket system calls). Deadlines, Close
// and everything else stay net.Conn's. One goroutine reads at a time, and
// one writes.
type socket struct {
	rc syscall.RawConn

	rp   []byte // the read's buffer, and what it got
	rn   int
	rerr error
	read func(fd uintptr) bool

	wp    []byte // the write's bytes, and how far it got
	wn    int
	werr  error
	write func(fd uintptr) bool
}

// readWriter is what reads and writes c's bytes: its socket (socketOf)
// when it has one, else c.
func readWriter(c net.Conn) io.ReadWriter {
	if s := socketOf(c); s != nil {
		return s
	}
	return c
}

// socketOf returns the socket under c (through Wrappers and a loop's
// hand-over), or nil when c has none to read raw (then c's own Read and
// Write serve).
func socketOf(c net.Conn) *socket {
	for {
		switch x := c.(type) {
		case *prefixConn:
			c = x.Conn
		case Wrapper:
			c = x.NetConn()
		case syscall.Conn:
			rc, err := x.SyscallConn()
			if err != nil {
				return nil
			}
			s := &socket{rc: rc}
			s.read, s.write = s.readOnce, s.writeAll // made once: a call allocates nothing
			return s
		default:
			return nil
		}
	}
}

// Read reads into p what the socket has, waiting until it has something.
func (s *socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rp, s.rn, s.rerr = p, 0, nil
	err := s.rc.Read(s.read)
	s.rp = nil
	if err != nil {
		return 0, err
	}
	return s.rn, s.rerr
}

// readOnce is one read(2) into rp: false (wait, then again) on EAGAIN.
func (s *socket) readOnce(fd uintptr) bool {
	for {
		n, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rp[0])), uintptr(len(s.rp)))
		switch errno {
		case 0:
			s.rn = int(n)
			if n == 0 {
				s.rerr = io.EOF
			}
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			s.rerr = errno
			return true
		}
	}
}

// Write writes all of p, waiting whenever the socket has no room.
func (s *socket) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.wp, s.wn, s.werr = p, 0, nil
	err := s.rc.Write(s.write)
	n := s.wn
	s.wp = nil
	if err != nil {
		return n, err
	}
	return n, s.werr
}

// writeAll writes what is left of wp: false (wait, then again) on EAGAIN.
func (s *socket) writeAll(fd uintptr) bool {
	for s.wn < len(s.wp) {
		rest := s.wp[s.wn:]
		n, _, errno := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch errno {
		case 0:
			s.wn += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			s.werr = errno
			return true
		}
	}
	return true
}
