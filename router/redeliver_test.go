package router

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
)

// crashingOwners owns a tenant's key and its group's: the tenant admits,
// the group refuses, and the tenant's owner is out of reach (a crash being
// restored elsewhere) while down is set, when the chain's rollback comes.
type crashingOwners struct {
	ring *ring.Ring

	mu        sync.Mutex
	down      bool
	cancels   map[uint64]int // lease id → cancels the tenant's owner took
	attempted int            // cancels tried while down
}

func (f *crashingOwners) Do(_ context.Context, c node.Call) (node.Answer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := node.Answer{Owner: "n2"}
	switch {
	case c.Op == node.OpAcquire && c.Key == GroupKey("team"):
		a.Decision.Reason = limiter.Requests
	case c.Op == node.OpAcquire:
		a.Decision.Allowed, a.Decision.Lease = true, 7
	case c.Op == node.OpCancel && f.down:
		f.attempted++
		return node.Answer{}, fmt.Errorf("peer 127.0.0.1:1: %w", node.ErrPeerDown)
	case c.Op == node.OpCancel:
		f.cancels[c.Lease]++
		a.OK = true
	}
	return a, nil
}
func (f *crashingOwners) Ring() *ring.Ring { return f.ring }
func (f *crashingOwners) Name() string     { return "n1" }

// A chain's rollback that finds the tenant's owner out of reach is sent
// again until an owner takes it: the reservation the crashed owner copied
// is not left as a partial charge at whoever restores it.
func TestRollbackIsRedeliveredWhenTheOwnerIsBack(t *testing.T) {
	f := &crashingOwners{ring: newFakeOwner(t, "n1", "n2").ring, down: true, cancels: map[uint64]int{}}
	r, err := New(f, Config{
		Limits:       func(string) limiter.Limits { return limiter.Limits{Requests: 10, Window: time.Minute} },
		Chain:        func(string, string) Chain { return Chain{Groups: [MaxGroups]string{"team"}, NGroups: 1} },
		DebtInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	v, err := r.Admit(context.Background(), Admission{Tenant: "k", Req: limiter.Request{Reserve: 1}})
	if err != nil || v.Allowed || v.RefusedBy.Label() != "group:team" {
		t.Fatalf("Admit: %+v %v, want refused by group:team", v, err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10 s", what)
			}
		}
	}
	waitFor("the rollback tried again while the owner is down", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.attempted >= 3
	})
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	waitFor("the rollback delivered once the owner is back", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.cancels[7] == 1
	})
	// Once nothing is pending, nothing can send it again.
	waitFor("the redelivery ended", func() bool {
		r.redeliveries.mu.Lock()
		defer r.redeliveries.mu.Unlock()
		return r.redeliveries.pending == 0
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancels[7] != 1 {
		t.Fatalf("the owner took %d cancels of the lease, want exactly 1", f.cancels[7])
	}
}
