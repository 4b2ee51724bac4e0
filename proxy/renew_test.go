package proxy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// renewCluster answers every call OK and counts the renewals; when block
// is set, a renewal waits for its context to end, started receives a value
// as each such renewal begins and returned counts those that returned.
type renewCluster struct {
	mu       sync.Mutex
	renews   int
	returned int
	block    bool
	started  chan struct{}
}

func (c *renewCluster) Do(ctx context.Context, call node.Call) (node.Answer, error) {
	if call.Op != node.OpRenew {
		return node.Answer{OK: true, Owner: "n1"}, nil
	}
	c.mu.Lock()
	c.renews++
	block := c.block
	c.mu.Unlock()
	if block {
		c.started <- struct{}{}
		<-ctx.Done()
		time.Sleep(10 * time.Millisecond) // a stop that does not wait returns first
		c.mu.Lock()
		c.returned++
		c.mu.Unlock()
		return node.Answer{}, ctx.Err()
	}
	return node.Answer{OK: true, Owner: "n1"}, nil
}

func (c *renewCluster) Ring() *ring.Ring { return nil }
func (c *renewCluster) Name() string     { return "n1" }

func (c *renewCluster) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.renews
}

func newRenewServer(t *testing.T, c *renewCluster) *Server {
	t.Helper()
	s, _ := newServer(t, c, router.Config{}, Config{}, nil)
	return s
}

// TestRenewEvery: renewals come every interval while the lease lives, none
// before the first interval and none after stop.
func TestRenewEvery(t *testing.T) {
	c := &renewCluster{}
	s := newRenewServer(t, c)
	stop := s.renewEvery(tenantLease("acme", 1), time.Hour)
	stop()
	if n := c.count(); n != 0 {
		t.Fatalf("%d renewals of a lease stopped before its first interval, want 0", n)
	}
	stop = s.renewEvery(tenantLease("acme", 2), 5*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for c.count() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d renewals in 10 s at an interval of 5 ms, want at least 3", c.count())
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	after := c.count()
	time.Sleep(30 * time.Millisecond) // six intervals
	if n := c.count(); n != after {
		t.Fatalf("%d renewals after stop, want 0", n-after)
	}
}

// TestRenewStopWaits: stop cancels a renewal in flight and returns only
// once it has returned (goleak would see it otherwise).
func TestRenewStopWaits(t *testing.T) {
	c := &renewCluster{block: true, started: make(chan struct{}, 1)}
	s := newRenewServer(t, c)
	stop := s.renewEvery(tenantLease("acme", 1), time.Millisecond)
	<-c.started
	stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.renews != 1 || c.returned != 1 {
		t.Fatalf("%d renewals, %d returned when stop returned; want 1 and 1", c.renews, c.returned)
	}
}
