package replica

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// TestStoresShrink: a backup's replicas and the acknowledged copies are
// rebuilt once they fall below a quarter of their high-water mark.
func TestStoresShrink(t *testing.T) {
	var r Store
	now := time.Now()
	for i := range 1000 {
		if err := r.Put(fmt.Sprint(i), nil, now); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 800 {
		r.Take(fmt.Sprint(i))
	}
	if r.size.Mark() != 249 || len(r.m) != 200 { // rebuilt when it fell to 249 < 1000/4
		t.Fatalf("after taking 800 of 1000: hwm %d, len %d", r.size.Mark(), len(r.m))
	}
	r.Expire(now.Add(time.Hour), time.Minute)
	if len(r.m) != 0 || r.size.Mark() != 0 {
		t.Fatalf("after expiry: map kept (hwm %d)", r.size.Mark())
	}
	var a Acked
	for i := range 1000 {
		a.Put(fmt.Sprint(i), "b", nil)
	}
	a.Keep(func(k string) bool { return k == "7" })
	if a.size.Mark() != 1 || len(a.m) != 1 {
		t.Fatalf("acked: hwm %d, len %d", a.size.Mark(), len(a.m))
	}
	if _, ok := a.Get("7"); !ok {
		t.Fatal("kept key lost")
	}
}

// A backup's copy round-trips through peer.OpReplica's answer, and garbage is
// an error or a copy, never a panic.
func FuzzDecodeReplica(f *testing.F) {
	f.Add(int64(1_700_000_000_123_456_789), []byte("snapshot"))
	f.Add(int64(-1), []byte{})
	f.Fuzz(func(t *testing.T, at int64, state []byte) {
		want := Copy{State: state, At: time.Unix(0, at)}
		got, err := DecodeCopy(AppendCopy(nil, want))
		if err != nil || !got.At.Equal(want.At) || !bytes.Equal(got.State, want.State) {
			t.Fatalf("round trip of %v: %v, %v", want, got, err)
		}
		_, _ = DecodeCopy(state)
	})
}

// snapshotAt is a snapshot of a Budget that admitted n requests, the last
// at at.
func snapshotAt(t *testing.T, n int, at time.Time) []byte {
	t.Helper()
	b := limiter.NewBudget(limiter.Limits{Requests: 100, Window: time.Minute}, nil, at.Add(-time.Second))
	for range n {
		b.Acquire(at, limiter.Request{Reserve: 1})
	}
	s, err := b.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A round's snapshot taken before an admission may reach the backup after
// the synchronous copy that carries the admission: the backup keeps the
// later state, whatever the arrival order.
func TestStoreKeepsTheLaterState(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	round := snapshotAt(t, 5, t0)                      // taken first
	sync := snapshotAt(t, 6, t0.Add(time.Millisecond)) // one admission later
	var s Store
	now := t0.Add(time.Second)
	if err := s.Put("k", sync, now); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("k", round, now.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	c, ok := s.Take("k")
	if !ok || !bytes.Equal(c.State, sync) {
		t.Fatalf("after the sync copy then a late round copy, the backup holds the round's (%d bytes), want the sync copy's (%d bytes)", len(c.State), len(sync))
	}
	// In order, the later one replaces the earlier.
	for _, st := range [][]byte{round, sync} {
		if err := s.Put("k", st, now); err != nil {
			t.Fatal(err)
		}
	}
	if c, _ := s.Take("k"); !bytes.Equal(c.State, sync) {
		t.Fatalf("in order: the backup holds the round's copy (%d bytes), want the later sync copy (%d bytes)", len(c.State), len(sync))
	}
}
