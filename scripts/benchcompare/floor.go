package main

// The floor: what this machine gives a decision server written in Go that
// decides nothing. Both floors answer every request with the same bytes,
// an acquire's 200 as a node writes it, so the load generator does the
// same work against them as against a node. The difference between a node
// and the goroutine-a-connection floor (the shape of every Go server,
// tokenringd's included) is what tokenring's own code costs; the
// difference between the two floors is what serving every connection from
// one event loop, as Redis does, would give.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// floorAnswer is the floors' answer to every request: a node's 200 to POST
// /v1/acquire, byte for byte but the date.
var floorAnswer = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Wed, 02 Dec 2026 05:01:53 GMT\r\nContent-Length: 373\r\n\r\n" +
	`{"allowed":true,"lease":"AgCX3pad8pnnkpgBAAdsb2FkLTE3AAh2bS0xODA5MJyuDdgHg2z2xjkAsy9wcbP_G1IMI2u-dqjbpV2P6cB9","reserved_tokens":200,"limits":{"requests":{"limit":100000000,"remaining":99999999,"reset_ms":60695},"tokens":{"limit":100000000000,"remaining":99999999800,"reset_ms":60695},"concurrency":{"limit":100000,"remaining":99999,"reset_ms":120000}},"owner":"vm-18090"}` + "\n")

// floorBuffer is a connection's read buffer: a request that fills it is
// refused (the connection closed).
const floorBuffer = 16 << 10

// answered appends floorAnswer to out for each whole request at the start
// of in, and returns the bytes of in after them (a request not yet whole).
// A request is a head ending in a blank line and the body its
// Content-Length announces; nothing else of it is read.
func answered(in, out []byte) (rest, answers []byte) {
	for {
		head := bytes.Index(in, []byte("\r\n\r\n"))
		if head < 0 {
			return in, out
		}
		n := head + 4 + contentLength(in[:head])
		if len(in) < n {
			return in, out
		}
		in, out = in[n:], append(out, floorAnswer...)
	}
}

// contentLength is the Content-Length of a request head, 0 if it has none
// (or one that is not a length).
func contentLength(head []byte) int {
	for line := range bytes.SplitSeq(head, []byte("\r\n")) {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if ok && bytes.EqualFold(name, []byte("Content-Length")) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err == nil && n >= 0 && n <= floorBuffer {
				return n
			}
		}
	}
	return 0
}

// pending is what a connection has sent of a request not yet whole, in a
// buffer of floorBuffer bytes.
type pending []byte

func newPending() pending { return make(pending, 0, floorBuffer) }

// free is where the next read goes.
func (p pending) free() []byte { return p[len(p):cap(p)] }

// full reports whether a request fills the whole buffer: it is refused.
func (p pending) full() bool { return len(p) == cap(p) }

// take counts n bytes read into free, keeps what they leave of a request
// not yet whole, and returns out (reused) holding the answers to the
// requests they complete.
func (p *pending) take(n int, out []byte) []byte {
	rest, out := answered((*p)[:len(*p)+n], out[:0])
	*p = (*p)[:copy((*p)[:cap(*p)], rest)]
	return out
}

// serveFloor serves floorAnswer on a loopback port of this process, a
// goroutine a connection. stop closes it and its connections, and waits
// for its goroutines.
func serveFloor() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	var mu sync.Mutex
	conns := map[net.Conn]bool{} // nil once stopped
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if conns == nil { // accepted as stop closed the others
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				serveFloorConn(c)
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			})
		}
	})
	return ln.Addr().String(), func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	}, nil
}

// serveFloorConn answers c's requests until it fails or closes.
func serveFloorConn(c net.Conn) {
	defer c.Close()
	p := newPending()
	var out []byte
	for !p.full() {
		n, err := c.Read(p.free())
		if err != nil {
			return
		}
		if out = p.take(n, out); len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
		}
	}
}

// serveFloorLoop serves floorAnswer on a loopback port of this process from
// one goroutine, locked to its thread, that waits on one epoll set for
// every connection and the listener, and reads and answers whichever is
// ready, as Redis serves its clients. stop ends the loop, which closes
// every socket.
func serveFloorLoop() (addr string, stop func(), err error) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("floor loop: %w", err)
	}
	ep, wake := -1, -1
	fail := func(err error) (string, func(), error) {
		for _, fd := range []int{ln, ep, wake} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		return "", nil, fmt.Errorf("floor loop: %w", err)
	}
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail(err)
	}
	if err := unix.Listen(ln, 1024); err != nil {
		return fail(err)
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		return fail(err)
	}
	if ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail(err)
	}
	if wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fail(err)
	}
	for _, fd := range []int{ln, wake} {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			return fail(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		floorLoop(ep, ln, wake)
	}()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port)), func() {
		_, _ = unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
		<-done
		unix.Close(wake) // here, not in the loop: a loop that ended first leaves it open to write
	}, nil
}

// floorLoop is serveFloorLoop's loop; it ends when wake is written, and
// closes ep, ln and every connection.
func floorLoop(ep, ln, wake int) {
	bufs := map[int]pending{} // the connections, by fd
	defer func() {
		for fd := range bufs {
			unix.Close(fd)
		}
		unix.Close(ln)
		unix.Close(ep)
	}()
	drop := func(fd int) {
		unix.Close(fd) // which takes it out of the epoll set
		delete(bufs, fd)
	}
	events := make([]unix.EpollEvent, 128)
	var out []byte
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			switch fd {
			case wake:
				return
			case ln:
				for {
					c, _, err := unix.Accept4(ln, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
					if err != nil {
						break // EAGAIN: none left
					}
					_ = unix.SetsockoptInt(c, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) // as Go sets on its connections
					if unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, c, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c)}) != nil {
						unix.Close(c)
						continue
					}
					bufs[c] = newPending()
				}
				continue
			}
			p := bufs[fd]
			m, err := unix.Read(fd, p.free())
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil || m <= 0 {
				drop(fd)
				continue
			}
			out = p.take(m, out)
			bufs[fd] = p
			// One write of at most a few answers to a socket with room:
			// a short write (a client that does not read) drops it, as
			// does a request that fills the buffer.
			if len(out) > 0 {
				if w, err := unix.Write(fd, out); err != nil || w < len(out) {
					drop(fd)
					continue
				}
			}
			if p.full() {
				drop(fd)
			}
		}
	}
}
