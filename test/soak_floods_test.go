package test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// reopenStats counts what a reopenFlood saw.
type reopenStats struct {
	opened, failed atomic.Int64
	cut            atomic.Int64 // connections the node closed (the rest the flood closed at its end)
	longest        atomic.Int64 // the longest the node left one open, ns
}

func (s *reopenStats) String() string {
	return fmt.Sprintf("%d opened, %d failed to open, %d closed by the node (longest held %v)",
		s.opened.Load(), s.failed.Load(), s.cut.Load(), time.Duration(s.longest.Load()).Round(time.Millisecond))
}

// reopenFlood keeps n idle TCP connections to addr, which never send a
// byte, until ctx ends: each of n slots dials (from srcs[slot%len(srcs)],
// a loopback address, or the default source when srcs is empty), waits for
// the node to close the connection, and dials again, no sooner than every
// after its last dial. The pacing is the node's own deadline for such a
// connection (a connection it refuses at once would otherwise make the
// flood a connect spin, spending the test's CPU, not the node's budget);
// the slots' first dials are spread over the first every, as n clients'
// would be, rather than all made in the same millisecond.
func reopenFlood(ctx context.Context, wg *sync.WaitGroup, addr string, n int, srcs []string, every time.Duration) *reopenStats {
	s := &reopenStats{}
	for slot := range n {
		d := net.Dialer{Timeout: time.Second}
		if len(srcs) > 0 {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(srcs[slot%len(srcs)])}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select { // the slot's turn in the first period
			case <-ctx.Done():
			case <-time.After(every * time.Duration(slot) / time.Duration(n)):
			}
			for ctx.Err() == nil {
				start := time.Now()
				s.hold(ctx, &d, addr, start)
				select {
				case <-ctx.Done():
				case <-time.After(time.Until(start.Add(every))):
				}
			}
		}()
	}
	return s
}

// hold dials addr and holds the connection, reading, until the node
// closes it or ctx ends.
func (s *reopenStats) hold(ctx context.Context, d *net.Dialer, addr string, start time.Time) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if ctx.Err() == nil {
			s.failed.Add(1)
		}
		return
	}
	s.opened.Add(1)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	_, _ = io.Copy(io.Discard, c) // until the node (or the end of ctx) closes it
	if stop() {                   // ctx did not close it: the node did
		s.cut.Add(1)
		held := int64(time.Since(start))
		for old := s.longest.Load(); held > old && !s.longest.CompareAndSwap(old, held); old = s.longest.Load() {
		}
		c.Close()
	}
}

// procFDs is how many descriptors pid has open.
func procFDs(t *testing.T, pid int) int64 {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Error(err)
	}
	return int64(len(ents))
}

// loopbackSources are n loopback addresses other than 127.0.0.1, for
// floods from several sources.
func loopbackSources(n int) []string {
	srcs := make([]string, n)
	for i := range srcs {
		srcs[i] = fmt.Sprintf("127.0.0.%d", i+2)
	}
	return srcs
}
