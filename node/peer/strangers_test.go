package peer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// addrConn is a connection from a given source address that notes its
// closing.
type addrConn struct {
	net.Conn
	from   *net.TCPAddr
	closed atomic.Bool
}

func (c *addrConn) RemoteAddr() net.Addr { return c.from }
func (c *addrConn) Close() error         { c.closed.Store(true); return nil }

func from(ip string) *addrConn {
	return &addrConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}}
}

// TestStrangerBudgetAndSourceLimit: one source holds at most 8 strangers
// and all sources 32; a newcomer is always admitted, closing the silent
// stranger that waited longest (of its own source at the source's limit),
// a stranger that spoke only when none is silent.
func TestStrangerBudgetAndSourceLimit(t *testing.T) {
	s := newStrangers(32, 8)
	var a []*stranger
	var ac []*addrConn
	for range 8 {
		c := from("10.0.0.1")
		ac = append(ac, c)
		a = append(a, s.admit(c))
	}
	a[0].spoke.Store(true) // the oldest spoke: the oldest silent one goes first
	ninth := from("10.0.0.1")
	s.admit(ninth)
	if all, src := s.len(a[0].src); all != 8 || src != 8 {
		t.Fatalf("after a 9th from one source: %d strangers, %d from it; want 8, 8", all, src)
	}
	if ac[0].closed.Load() || !ac[1].closed.Load() || ninth.closed.Load() {
		t.Fatalf("closed: oldest (spoke) %v, second (silent) %v, newcomer %v; want false, true, false",
			ac[0].closed.Load(), ac[1].closed.Load(), ninth.closed.Load())
	}
	if got := s.evictedSource.Load(); got != 1 {
		t.Fatalf("evictedSource = %d, want 1", got)
	}
	// Three more sources fill the budget (8 each); none of them evicts.
	for i := 2; i <= 4; i++ {
		for range 8 {
			s.admit(from(fmt.Sprintf("10.0.0.%d", i)))
		}
	}
	if all, _ := s.len(a[0].src); all != 32 || s.evictedBudget.Load() != 0 || s.evictedSource.Load() != 1 {
		t.Fatalf("%d strangers, evicted %d (budget) %d (source); want 32, 0, 1", all, s.evictedBudget.Load(), s.evictedSource.Load())
	}
	// A fifth source: the oldest silent stranger of all (10.0.0.1's third) goes.
	fifth := from("10.0.0.5")
	s.admit(fifth)
	if all, src := s.len(a[0].src); all != 32 || src != 7 || !ac[2].closed.Load() || fifth.closed.Load() {
		t.Fatalf("after a 33rd: %d strangers, %d from 10.0.0.1, its third closed %v, newcomer closed %v; want 32, 7, true, false",
			all, src, ac[2].closed.Load(), fifth.closed.Load())
	}
	if got := s.evictedBudget.Load(); got != 1 {
		t.Fatalf("evictedBudget = %d, want 1", got)
	}
	// A sixth source: the source holding the most (10.0.0.2, 8; oldest
	// among those with 8) gives way, never the one-stranger 10.0.0.5.
	s.admit(from("10.0.0.6"))
	if _, src := s.len(netip.MustParseAddr("10.0.0.2")); src != 7 || fifth.closed.Load() {
		t.Fatalf("after a 34th: %d from 10.0.0.2, 10.0.0.5's closed %v; want 7, false", src, fifth.closed.Load())
	}
	// A stranger that finishes leaves; an evicted one finds it was.
	if !s.leave(a[0]) || s.leave(a[1]) {
		t.Fatal("leave: want true for a stranger still in, false for one evicted")
	}
	if all, src := s.len(a[0].src); all != 31 || src != 6 { // 10.0.0.1: 8, one evicted at the 33rd, one leaving
		t.Fatalf("after a leave: %d strangers, %d from 10.0.0.1; want 31, 6", all, src)
	}
}

// strangerFlood keeps n silent connections open to addr, from 127.0.0.2
// to 127.0.0.(1+sources), each re-opened a millisecond after the server
// closes it (the pause keeps the attackers, who share this host's two
// cores with the node, from starving it), until the test ends.
func strangerFlood(t *testing.T, addr string, n, sources int) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	stopped := func(pause time.Duration) bool {
		select {
		case <-stop:
			return true
		case <-time.After(pause):
			return false
		}
	}
	for i := range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%sources))}, Timeout: time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100000 {
				if c, err := d.Dial("tcp", addr); err == nil {
					for { // until the server closes it, or the test ends
						_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
						if _, err := c.Read(make([]byte, 64)); !isTimeout(err) {
							break
						}
						if stopped(0) {
							break
						}
					}
					c.Close()
				}
				if stopped(time.Millisecond) {
					return
				}
			}
		}()
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestStrangersCannotKeepMembersOut: 300 silent connections from 10
// addresses, each re-opened the moment the node closes it (the issue's
// flood, which filled peer.max_conns and pushed a rejoining node into
// fallback), while members connect one after another: every member's
// handshake completes and its call is answered by the owner (0 failures:
// a failure is a fallback answer at the router), and strangers were
// closed to make room.
func TestStrangersCannotKeepMembersOut(t *testing.T) {
	nd := newTestServer(t, withSecrets(secretNew))
	strangerFlood(t, nd.addr(), 300, 10)
	eventually(t, 5*time.Second, "the stranger budget full", func() bool {
		all, _ := nd.strangerBudget().len(netip.MustParseAddr("127.0.0.2"))
		return all == DefaultMaxStrangers
	})
	failed := 0
	for i := range 20 {
		p := clientWith(t, nd.addr(), secretNew)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		a, err := p.Call(ctx, &acquireOne)
		cancel()
		if err != nil || a.Owner != "owner" {
			failed++
			t.Logf("member %d: %+v %v", i, a, err)
		}
		p.Close()
	}
	if failed != 0 {
		t.Fatalf("%d of 20 members' calls failed under the flood, want 0", failed)
	}
	s := nd.strangerBudget()
	if ev := s.evictedBudget.Load() + s.evictedSource.Load(); ev == 0 {
		t.Fatal("no stranger was closed to make room: the flood did not reach the budget")
	}
	if got := nd.memberCapped.Load(); got != 0 {
		t.Fatalf("%d connections refused at the members' cap, want 0", got)
	}
}
