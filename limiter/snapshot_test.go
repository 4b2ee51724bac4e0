package limiter

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

var (
	_ encoding.BinaryAppender  = (*Budget)(nil)
	_ encoding.BinaryMarshaler = (*Budget)(nil)
)

var snapLimits = Limits{Requests: 10, Tokens: 5000, Concurrency: 4, Window: 10 * sec, LeaseTTL: 30 * sec}

// sampleSnapshots returns snapshots of Budgets in various states: new,
// with leases in and out of the window, with history, after a long gap.
func sampleSnapshots(t testing.TB) [][]byte {
	var out [][]byte
	snap := func(b *Budget) {
		data, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	b := NewBudget(snapLimits, pol10, t0)
	snap(b)
	l1 := b.Acquire(at(0), Request{PromptTokens: 100, MaxTokens: 200}).Lease
	b.Acquire(at(500*ms), Request{Reserve: 300})
	snap(b)
	b.Settle(at(2*sec), l1, Usage{PromptTokens: 100, CompletionTokens: 80})
	l3 := b.Acquire(at(3*sec), Request{PromptTokens: 50}).Lease
	b.Renew(at(4*sec), l3)
	snap(b)
	b.Acquire(at(15*sec), Request{PromptTokens: 10}) // earlier buckets left the window
	snap(b)
	b.Status(at(time.Hour))
	snap(b)
	u := NewBudget(Limits{Window: 10 * sec}, pol10, time.Unix(-100, 0)) // before 1970, unlimited
	u.Acquire(time.Unix(-50, 0), Request{Reserve: 1})
	snap(u)
	return out
}

// newerSnapshots returns snapshots of Budgets whose leases need a newer
// format than 1: chosen ids beyond the sequence (format 2), and leases of
// several requests (format 3), one of them with a bucket gone, and the
// last a key with spend (format 4).
func newerSnapshots(t testing.TB) (v2, v3 [][]byte) {
	snap := func(b *Budget) []byte {
		data, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	b := NewBudget(snapLimits, pol10, t0)
	b.Acquire(at(0), Request{PromptTokens: 100, MaxTokens: 200, Lease: 1 << 50})
	b.Acquire(at(500*ms), Request{Reserve: 300})
	v2 = append(v2, snap(b))
	b.Acquire(at(sec), Request{Reserve: 30, Hits: 4})
	v3 = append(v3, snap(b))
	b.Acquire(at(12*sec), Request{Reserve: 1, Hits: 2, Lease: 3})
	v3 = append(v3, snap(b))
	s := NewBudget(spendLimits, pol10, t0) // format 4
	s.Acquire(at(0), Request{PromptTokens: 100, MaxTokens: 10, Price: gpt4o})
	x := s.Acquire(at(0), Request{PromptTokens: 10, MaxTokens: 10, Price: gpt4o, Hits: 3})
	s.Settle(at(sec), x.Lease, Usage{PromptTokens: 10, CachedTokens: 5, CompletionTokens: 2})
	v3 = append(v3, snap(s))
	return v2, v3
}

func TestSnapshotRoundTrip(t *testing.T) {
	v2, v3 := newerSnapshots(t)
	type sample struct {
		data    []byte
		version byte
	}
	var all []sample
	for _, data := range sampleSnapshots(t) {
		all = append(all, sample{data, snapshotV1})
	}
	for _, data := range v2 {
		all = append(all, sample{data, snapshotV2})
	}
	for _, data := range v3 {
		all = append(all, sample{data, min(data[0], snapshotV4)}) // the last: a key with spend
	}
	if v := all[len(all)-1].data[0]; v != snapshotV4 {
		t.Fatalf("the spending key's snapshot is format %d", v)
	}
	for i, s := range all {
		data := s.data
		if data[0] != s.version {
			t.Fatalf("%d: version byte %d, want %d", i, data[0], s.version)
		}
		b, err := RestoreBudget(data, snapLimits, pol10)
		if err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		again, _ := b.AppendBinary([]byte("prefix"))
		if !bytes.Equal(again[6:], data) || string(again[:6]) != "prefix" {
			t.Fatalf("%d: round trip differs:\n%x\n%x", i, data, again[6:])
		}
	}
}

func TestSnapshotBehavesTheSame(t *testing.T) {
	b := NewBudget(snapLimits, pol10, t0)
	l := b.Acquire(at(0), Request{PromptTokens: 100, MaxTokens: 900}).Lease
	b.Acquire(at(sec), Request{Reserve: 3000})
	b.Settle(at(2*sec), l, Usage{PromptTokens: 100, CompletionTokens: 40})
	data, _ := b.MarshalBinary()
	c, err := RestoreBudget(data, snapLimits, pol10)
	if err != nil {
		t.Fatal(err)
	}
	for _, now := range []time.Duration{2 * sec, 5 * sec, 11 * sec, 12 * sec} {
		r := Request{PromptTokens: 500, MaxTokens: 2000}
		if db, dc := b.Acquire(at(now), r), c.Acquire(at(now), r); db != dc {
			t.Fatalf("at %v: %+v vs %+v", now, db, dc)
		}
	}
}

func TestSnapshotRestoreUnderNewLimits(t *testing.T) {
	b := NewBudget(snapLimits, pol10, t0)
	x := b.Acquire(at(0), Request{Reserve: 1000})
	b.Acquire(at(sec), Request{Reserve: 1000})
	data, _ := b.MarshalBinary()
	// Tighter limits apply at once; a 20 s window with the default 60
	// buckets re-buckets what is counted without losing any of it.
	l := Limits{Requests: 1, Tokens: 1500, Window: 20 * sec}
	c, err := RestoreBudget(data, l, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := c.Status(at(2 * sec))
	if st.Requests.Remaining != 0 || st.Tokens.Remaining != 0 || st.Concurrency.Limit != 0 {
		t.Fatalf("status %+v", st)
	}
	if c.Limits() != l.normalize() {
		t.Fatalf("limits %+v", c.Limits())
	}
	// The leases followed their units: cancelling x gives its tokens back.
	if !c.Cancel(at(2*sec), x.Lease) {
		t.Fatal("cancel after restore")
	}
	if st := c.Status(at(2 * sec)); st.Tokens.Remaining != 500 || st.Requests.Remaining != 0 {
		t.Fatalf("after cancel %+v", st)
	}
	// [t0+1s, t0+2s) moved to a 1/3 s bucket ending at t0+2s: it leaves
	// the 20 s window (61 buckets of 1/3 s... 20.33 s later) at 22.33 s.
	if st := c.Status(at(22*sec + 333333334)); st.Tokens.Remaining != 1500 {
		t.Fatalf("after the window %+v", st)
	}
}

func TestSnapshotRejectsGarbage(t *testing.T) {
	good := sampleSnapshots(t)[2]
	if _, err := RestoreBudget(good, snapLimits, pol10); err != nil {
		t.Fatal(err)
	}
	// Every strict prefix is truncated.
	for n := range len(good) {
		if _, err := RestoreBudget(good[:n], snapLimits, pol10); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
	}
	bad := map[string][]byte{
		"trailing byte": append(bytes.Clone(good), 0),
		"version 4":     append([]byte{4}, good[1:]...),
		"version 0":     append([]byte{0}, good[1:]...),
		"zero width":    {1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"no buckets":    {1, 2, 0, 0, 0, 0, 0, 0, 0},
		"huge head":     {1, 2, 2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0},
		"too many":      {1, 2, 0xff, 0xff, 0x03},
	}
	// A lease id beyond the sequence, duplicated ids, a bucket beyond the
	// window, a count above the cap: built from a real snapshot layout.
	b := NewBudget(Limits{Window: 2 * sec}, &Policy{Buckets: 1}, time.Unix(0, 0))
	b.Acquire(time.Unix(0, 0), Request{Reserve: 5})
	one, _ := b.MarshalBinary()
	// one = 1, width(2s), N=1, head=0, offset 0, [0 0] [1 5], no average,
	// seq 1, 1 lease: id 1, age 1, reserved 5, expiry 120 s.
	if !bytes.Equal(one[:14], []byte{1, 0x80, 0xd0, 0xac, 0xf3, 0x0e, 1, 0, 0, 0, 0, 1, 5, 0}) {
		t.Fatalf("layout changed: %x", one)
	}
	mut := func(i int, v ...byte) []byte {
		c := bytes.Clone(one[:i])
		c = append(c, v...)
		return append(c, one[i+len(v):]...)
	}
	bad["offset beyond bucket"] = mut(8, 0x80, 0xd0, 0xac, 0xf3, 0x0e) // = width
	bad["lease beyond sequence"] = mut(14, 0)                          // seq 0 < id 1
	bad["two leases, one present"] = mut(15, 2)                        //
	bad["lease id zero"] = mut(16, 0)                                  //
	bad["lease age beyond window"] = mut(17, 3)                        // N+1 = 2 buckets
	bad["bad average flag"] = mut(13, 2)                               //
	neg := binary.LittleEndian.AppendUint64(append(bytes.Clone(one[:13]), 1), math.Float64bits(-1))
	bad["negative average"] = append(neg, one[14:]...)
	nan := binary.LittleEndian.AppendUint64(append(bytes.Clone(one[:13]), 1), math.Float64bits(math.NaN()))
	bad["NaN average"] = append(nan, one[14:]...)
	bad["count above cap"] = append(append(bytes.Clone(one[:12]), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01), one[13:]...)
	dup := append(bytes.Clone(one[:14]), 2, 2, 1, 1, 5, 0, 1, 1, 5, 0)
	bad["duplicate lease"] = dup
	ok := append(bytes.Clone(one[:14]), 2, 2, 1, 1, 5, 0, 2, 0, 5, 0)
	if _, err := RestoreBudget(ok, snapLimits, nil); err != nil {
		t.Fatalf("two leases: %v", err)
	}
	for name, data := range bad {
		if _, err := RestoreBudget(data, snapLimits, nil); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := RestoreBudget(nil, snapLimits, nil); err == nil {
		t.Error("empty input restored")
	}
}

// FuzzRestoreBudget feeds arbitrary bytes to RestoreBudget: it must return
// an error or a Budget that works, never panic; and whatever it accepts
// must snapshot back to a stable form.
func FuzzRestoreBudget(f *testing.F) {
	v2, v3 := newerSnapshots(f)
	for _, s := range append(sampleSnapshots(f), append(v2, v3...)...) {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := RestoreBudget(data, snapLimits, pol10)
		if err != nil {
			if b != nil {
				t.Fatal("budget and error")
			}
			return
		}
		checkInternals(t, b)
		s1, _ := b.MarshalBinary()
		c, err := RestoreBudget(s1, snapLimits, pol10)
		if err != nil {
			t.Fatalf("own snapshot rejected: %v", err)
		}
		if s2, _ := c.MarshalBinary(); !bytes.Equal(s1, s2) {
			t.Fatalf("unstable snapshot:\n%x\n%x", s1, s2)
		}
		// The restored Budget must work: exercise it near its own time.
		now := time.Unix(0, b.head*b.width)
		d := b.Acquire(now, Request{PromptTokens: 10, MaxTokens: 10, Wait: sec})
		var first uint64
		for id := range b.leases {
			first = id
			break
		}
		// A repeat of a restored lease charges nothing.
		before := b.sumReq
		if e := b.Acquire(now, Request{Reserve: 1, Hits: 3, Lease: first}); first != 0 && (!e.Allowed || e.Lease != first || b.sumReq != before) {
			t.Fatalf("repeat of restored lease %d: %+v", first, e)
		}
		for id := range b.leases {
			if id%2 == 0 {
				b.Cancel(now, id)
				continue
			}
			b.Renew(now, id)
			b.Settle(now, id, Usage{PromptTokens: 1, CompletionTokens: 2})
		}
		checkInternals(t, b)
		b.Acquire(now, Request{Reserve: 1, Hits: 2, Lease: 1 << 63})
		checkInternals(t, b)
		b.Cancel(now, d.Lease)
		b.Wake(now.Add(time.Minute), nil)
		b.Status(now.Add(time.Hour))
		checkInternals(t, b)
		b.SetLimits(Limits{Tokens: 100, Window: 7 * sec})
		checkInternals(t, b)
		b.Idle(now.Add(2 * time.Hour))
		checkInternals(t, b)
		// A different geometry at restore must be accepted as well.
		if _, err := RestoreBudget(data, Limits{Window: time.Hour}, &Policy{Buckets: 7}); err != nil {
			t.Fatalf("rejected under other limits: %v", err)
		}
	})
}

// checkInternals verifies a Budget's internal consistency: sums match the
// rings, counts are in range, lease bounds hold.
func checkInternals(t interface {
	Helper()
	Fatalf(string, ...any)
}, b *Budget) {
	t.Helper()
	var req, tok int64
	m := b.ring()
	if len(b.cnt) != 2*m || b.width <= 0 || b.head != floorDiv(b.last, b.width) {
		t.Fatalf("geometry: %d counters for %d buckets, width %d", len(b.cnt), b.nb, b.width)
	}
	for i := range m {
		if b.cnt[i] < 0 || b.cnt[i] > maxUnits || b.cnt[m+i] < 0 || b.cnt[m+i] > maxUnits {
			t.Fatalf("count out of range: %d %d", b.cnt[i], b.cnt[m+i])
		}
		req += b.cnt[i]
		tok += b.cnt[m+i]
	}
	if req != b.sumReq || tok != b.sumTok {
		t.Fatalf("sums %d %d, rings %d %d", b.sumReq, b.sumTok, req, tok)
	}
	for id, l := range b.leases {
		if id == 0 || l.reserved < 0 || l.reserved > maxUnits || (l.bucket != gone && l.bucket > b.head) {
			t.Fatalf("lease %d: %+v (seq %d head %d)", id, l, b.seq, b.head)
		}
		if l.expiry < b.minExp || l.expiry > b.maxExp {
			t.Fatalf("lease %d expiry %d outside [%d, %d]", id, l.expiry, b.minExp, b.maxExp)
		}
	}
	if sp := b.sp; sp != nil {
		var held int64
		for id, sl := range sp.leases {
			if _, ok := b.leases[id]; !ok || sl.reserved < 0 {
				t.Fatalf("spend of lease %d (live %v): %+v", id, ok, sl)
			}
			held += sl.reserved
		}
		if held != sp.held || sp.spent < 0 || sp.end <= sp.start {
			t.Fatalf("spend: held %d, leases hold %d, spent %d, period [%d, %d)", sp.held, held, sp.spent, sp.start, sp.end)
		}
	}
	for id, n := range b.hits {
		if _, ok := b.leases[id]; !ok || n < 2 || n > maxUnits {
			t.Fatalf("hits %d of lease %d (live %v)", n, id, ok)
		}
	}
}

// SnapshotTime is the latest time the Budget had seen when the snapshot
// was taken: it moves with every change and never back.
func TestSnapshotTime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 123)
	b := NewBudget(Limits{Requests: 10, Window: time.Minute}, nil, t0)
	at := func() time.Time {
		t.Helper()
		s, err := b.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := SnapshotTime(s)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := at(); !got.Equal(t0) {
		t.Fatalf("a new Budget's snapshot time %v, want %v", got, t0)
	}
	t1 := t0.Add(1500 * time.Millisecond)
	b.Acquire(t1, Request{Reserve: 1})
	if got := at(); !got.Equal(t1) {
		t.Fatalf("after an admission at %v: snapshot time %v", t1, got)
	}
	b.Acquire(t0, Request{Reserve: 1}) // a clock behind the state's
	if got := at(); !got.Equal(t1) {
		t.Fatalf("after a call with an earlier clock: snapshot time %v, want %v (it never goes back)", got, t1)
	}
	for _, bad := range [][]byte{nil, {9}, {1, 0}} {
		if _, err := SnapshotTime(bad); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("SnapshotTime(%v): %v, want ErrBadSnapshot", bad, err)
		}
	}
}
