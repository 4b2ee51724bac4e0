package peer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCallRoundTrip(t *testing.T) {
	c := Call{Op: OpSettle, Key: "t:acme", Lease: 1 << 40, Hops: 1,
		Req:   limiter.Request{PromptTokens: 1200, MaxTokens: 512, Reserve: 7, Priority: limiter.Batch, Wait: 3 * time.Second},
		Usage: limiter.Usage{PromptTokens: 1100, CompletionTokens: 20}, From: "127.0.0.1:7001", State: []byte{1, 2, 3}}
	got, err := DecodeCall(AppendCall(nil, &c))
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("call round trip: %+v %v", got, err)
	}
	a := Answer{OK: true, Owner: "n2", State: []byte("snapshot"), Expires: time.Unix(0, 1_700_000_000_123_456_789),
		Decision: limiter.Decision{Allowed: true, Ticket: 3, Lease: 9, Reserved: 1712, Reason: limiter.Tokens, RetryAfter: 1500 * time.Millisecond,
			Status: limiter.Status{Requests: limiter.DimStatus{Limit: 60, Remaining: 59, Reset: time.Minute}}}}
	gotA, err := DecodeAnswer(OpReplica, AppendAnswer(nil, &a))
	if err != nil || !gotA.Expires.Equal(a.Expires) {
		t.Fatalf("answer round trip: %+v %v", gotA, err)
	}
	gotA.Expires = a.Expires
	if !reflect.DeepEqual(gotA, a) {
		t.Fatalf("answer round trip: %+v, want %+v", gotA, a)
	}
	// An acquire carries the limits its request sent, and only then.
	acq := Call{Op: OpAcquire, Key: "t:acme", Req: limiter.Request{PromptTokens: 10}, Limits: &limiter.Limits{Requests: 100, Tokens: 50_000, Concurrency: 4}}
	gotL, err := DecodeCall(AppendCall(nil, &acq))
	if err != nil || !reflect.DeepEqual(gotL, acq) {
		t.Fatalf("acquire with sent limits: %+v %v, want %+v", gotL, err, acq)
	}
	plain := acq
	plain.Limits = nil
	if b := AppendCall(nil, &plain); len(b) >= len(AppendCall(nil, &acq)) {
		t.Fatalf("an acquire without sent limits is %d bytes, not shorter than one with", len(b))
	}
	if b := AppendCall(nil, &Call{Op: OpSettle, Key: "k", Limits: acq.Limits}); !bytes.Equal(b, AppendCall(nil, &Call{Op: OpSettle, Key: "k"})) {
		t.Fatal("a settle encoded sent limits")
	}
	for _, bad := range [][]byte{
		append(AppendCall(nil, &plain), 9, 1, 1, 1), // an unknown section
		append(AppendCall(nil, &plain), 1, 1, 3, 1), // a negative limit (zigzag 3 = -2)
		append(AppendCall(nil, &plain), 1, 2),       // cut short
	} {
		if c, err := DecodeCall(bad); err == nil {
			t.Errorf("DecodeCall(%x) = %+v, want an error", bad, c)
		}
	}
	// A charge carries its debt; other ops do not encode one.
	ch := Call{Op: OpCharge, Key: "t:acme", Charge: Charge{Requests: 3, Tokens: 1 << 41, At: time.Unix(0, 1_700_000_000_987_654_321)}}
	gotC, err := DecodeCall(AppendCall(nil, &ch))
	if err != nil || !reflect.DeepEqual(gotC, ch) || gotC.Op.String() != "charge" {
		t.Fatalf("charge round trip: %+v %v, want %+v", gotC, err, ch)
	}
	if b := AppendCall(nil, &Call{Op: OpAcquire, Key: "k", Charge: ch.Charge}); !bytes.Equal(b, AppendCall(nil, &Call{Op: OpAcquire, Key: "k"})) {
		t.Fatal("a non-charge call encodes a charge")
	}
	if full := AppendCall(nil, &ch); func() bool { _, err := DecodeCall(full[:len(full)-1]); return err == nil }() {
		t.Fatal("truncated charge decoded")
	}
	al := Call{Op: OpAllot, Key: "p:pool", Count: MaxAllot, Req: limiter.Request{Reserve: 4096}}
	if gotAl, err := DecodeCall(AppendCall(nil, &al)); err != nil || !reflect.DeepEqual(gotAl, al) || gotAl.Op.String() != "allot" {
		t.Fatalf("allot round trip: %+v %v, want %+v", gotAl, err, al)
	}
	al.Count = MaxAllot + 1
	if _, err := DecodeCall(AppendCall(nil, &al)); err == nil {
		t.Fatalf("an allot of %d admissions decoded; at most %d", al.Count, MaxAllot)
	}
	if _, err := DecodeCall([]byte{byte(OpAcquire)}); err == nil {
		t.Fatal("truncated call decoded")
	}
	if _, err := DecodeCall(append(AppendCall(nil, &c), 0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
}

// An acquire carries Req.Hits and Req.Lease only when one is not 0, after
// the sent limits if any: without them its bytes are what they were before
// the section existed, and with them they start with those bytes, so a
// member of an older build refuses the call (an unknown section, or
// trailing bytes) rather than decide it as one request under an id of its
// own. Other calls never carry them.
func TestCallHitsLease(t *testing.T) {
	base := Call{Op: OpAcquire, Key: "t:acme", Hops: 1, Req: limiter.Request{PromptTokens: 1200, MaxTokens: 512, Reserve: 7, Priority: limiter.Batch, Wait: 3 * time.Second}}
	withLimits := base
	withLimits.Limits = &limiter.Limits{Requests: 100, Tokens: 50_000, Concurrency: 4}
	// The bytes of these two acquires as the build before the section wrote them.
	for c, want := range map[*Call]string{
		&base:       "010106743a61636d6500e01280080e0180f882ad1600000000",
		&withLimits: "010106743a61636d6500e01280080e0180f882ad160000000001c801a08d0608",
	} {
		if got := fmt.Sprintf("%x", AppendCall(nil, c)); got != want {
			t.Errorf("%+v encodes to %s, want %s as before", c, got, want)
		}
	}
	for _, c := range []Call{base, withLimits} {
		for _, hl := range []struct {
			hits  int64
			lease uint64
		}{{3, 0}, {0, 1 << 63}, {-1, 1}, {1, 0x9e3779b97f4a7c15}, {1 << 62, math.MaxUint64}} {
			with := c
			with.Req.Hits, with.Req.Lease = hl.hits, hl.lease
			b := AppendCall(nil, &with)
			got, err := DecodeCall(b)
			if err != nil || !reflect.DeepEqual(got, with) {
				t.Fatalf("round trip of %+v: %+v %v", with, got, err)
			}
			old := AppendCall(nil, &c)
			if !bytes.HasPrefix(b, old) || b[len(old)] != hitsLease {
				t.Fatalf("%x does not extend %x with the section", b, old)
			}
		}
	}
	// Only acquires: a settle names its lease in Call.Lease.
	st := Call{Op: OpSettle, Key: "t:acme", Lease: 77}
	stHits := st
	stHits.Req.Hits, stHits.Req.Lease = 5, 9
	if !bytes.Equal(AppendCall(nil, &st), AppendCall(nil, &stHits)) {
		t.Fatal("a settle encoded Req.Hits or Req.Lease")
	}
	plain := AppendCall(nil, &base)
	lim := AppendCall(nil, &withLimits)
	sec := lim[len(plain):] // the sent limits' section
	for name, bad := range map[string][]byte{
		"empty section":       append(bytes.Clone(plain), hitsLease, 0, 0),
		"cut short":           append(bytes.Clone(plain), hitsLease, 2),
		"twice":               append(bytes.Clone(plain), hitsLease, 2, 0, hitsLease, 2, 0),
		"limits after it":     append(append(bytes.Clone(plain), hitsLease, 2, 0), sec...),
		"unknown after it":    append(bytes.Clone(plain), hitsLease, 2, 0, 3),
		"limits twice":        append(bytes.Clone(lim), sec...),
		"lease overflow":      append(bytes.Clone(plain), hitsLease, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02),
		"on a settle instead": append(AppendCall(nil, &st), hitsLease, 2, 0),
	} {
		if c, err := DecodeCall(bad); err == nil {
			t.Errorf("%s: DecodeCall(%x) = %+v, want an error", name, bad, c)
		}
	}
}

// FuzzCallRoundTrip: any Call AppendCall encodes decodes to itself, less
// the fields its op does not carry; an acquire's hits and lease add bytes
// only when set.
func FuzzCallRoundTrip(f *testing.F) {
	f.Add(uint8(OpAcquire), "t:a", uint64(0), int64(5), int64(0), int64(0), uint8(0), int64(0), int64(0), uint64(0), false, int64(0), int64(0), int64(0))
	f.Add(uint8(OpAcquire), "t:a", uint64(0), int64(5), int64(100), int64(0), uint8(1), int64(1e9), int64(3), uint64(1<<60), true, int64(10), int64(0), int64(2))
	f.Add(uint8(OpSettle), "p:b", uint64(42), int64(0), int64(0), int64(0), uint8(0), int64(0), int64(7), uint64(8), false, int64(0), int64(0), int64(0))
	f.Add(uint8(OpAllot), "p:b", uint64(0), int64(0), int64(0), int64(20), uint8(0), int64(0), int64(0), uint64(0), false, int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, op uint8, key string, lease uint64, prompt, maxTokens, reserve int64, prio uint8, wait, hits int64, reqLease uint64, sent bool, lr, lt, lc int64) {
		c := Call{Op: Op(op), Key: key, Lease: lease, Req: limiter.Request{PromptTokens: prompt, MaxTokens: maxTokens, Reserve: reserve,
			Priority: limiter.Priority(prio), Wait: time.Duration(wait), Hits: hits, Lease: reqLease}}
		if sent {
			c.Limits = &limiter.Limits{Requests: lr, Tokens: lt, Concurrency: lc}
		}
		if c.Op == OpAllot {
			c.Count = uint32(uint64(lease) % (MaxAllot + 1))
		}
		b := AppendCall(nil, &c)
		got, err := DecodeCall(b)
		valid := c.Op != 0 && c.Op < opMax && !(c.Op == OpAcquire && sent && (lr < 0 || lt < 0 || lc < 0))
		if !valid {
			if err == nil {
				t.Fatalf("%+v decoded from %x", got, b)
			}
			return
		}
		want := c
		if c.Op != OpAcquire {
			want.Limits, want.Req.Hits, want.Req.Lease = nil, 0, 0
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %+v: %+v %v", want, got, err)
		}
		without := c
		without.Req.Hits, without.Req.Lease = 0, 0
		short := AppendCall(nil, &without)
		if (c.Op == OpAcquire && (hits != 0 || reqLease != 0)) != (len(b) > len(short)) || !bytes.HasPrefix(b, short) {
			t.Fatalf("%x against %x without hits and lease", b, short)
		}
	})
}

func FuzzDecodeCall(f *testing.F) {
	f.Add(AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a", Req: limiter.Request{PromptTokens: 5}}))
	f.Add(AppendCall(nil, &Call{Op: OpAllot, Key: "p:a", Count: 7, Req: limiter.Request{Reserve: 20}}))
	f.Add(AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a", Limits: &limiter.Limits{Requests: 5, Tokens: 7, Concurrency: 1}}))
	f.Add(AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a", Req: limiter.Request{Hits: 3, Lease: 1 << 63}}))
	f.Add(AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a", Req: limiter.Request{Lease: 9}, Limits: &limiter.Limits{Requests: 5}}))
	f.Add(AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a", Req: limiter.Request{Hits: 2, Price: limiter.Price{Input: 1, Output: 3}}}))
	f.Add(AppendCall(nil, &Call{Op: OpSettle, Key: "t:a", Lease: 3, Usage: limiter.Usage{PromptTokens: 9, CachedTokens: 4}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCall(b)
		if err != nil {
			return
		}
		again, err := DecodeCall(AppendCall(nil, &c))
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("re-encode of %+v: %+v %v", c, again, err)
		}
	})
}

func FuzzDecodeItems(f *testing.F) {
	f.Add(encodeFrame(nil, frameCalls, []item{{id: 1, body: []byte("x")}})[5:])
	f.Add(encodeFrame(nil, frameCalls, []item{{id: 1 << 40, status: 3, body: []byte("abc")}, {id: 7}, {id: 0, status: 255, body: []byte{0, 1}}})[5:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		// Whatever decodes re-encodes to a frame that decodes to the same items.
		if items, err := decodeItems(b, nil); err == nil {
			checkItemsRoundTrip(t, items)
		}
		// Items built from the input (ids, statuses and bodies of every
		// length, empty ones included) survive encodeFrame and decodeItems.
		var items []item
		for i, rest := 0, b; len(rest) > 0; i++ {
			n := int(rest[0]) % 8
			if n > len(rest)-1 {
				n = len(rest) - 1
			}
			items = append(items, item{id: uint64(rest[0]) << (i % 57), status: rest[0] ^ byte(i), body: rest[1 : 1+n]})
			rest = rest[1+n:]
		}
		checkItemsRoundTrip(t, items)
	})
}

// checkItemsRoundTrip encodes items in a frame and checks that the frame's
// header is right and that decodeItems gives back the same ids, statuses and
// bodies, in order.
func checkItemsRoundTrip(t *testing.T, items []item) {
	t.Helper()
	frame := encodeFrame(nil, frameCalls, items)
	if n := binary.BigEndian.Uint32(frame[:4]); int(n) != len(frame)-4 || frame[4] != frameCalls {
		t.Fatalf("frame header: length %d kind %d, want %d %d", n, frame[4], len(frame)-4, frameCalls)
	}
	got, err := decodeItems(frame[5:], nil)
	if err != nil {
		t.Fatalf("decode of re-encoded %d items: %v", len(items), err)
	}
	if len(got) != len(items) {
		t.Fatalf("%d items after the round trip, want %d", len(got), len(items))
	}
	for i := range items {
		if got[i].id != items[i].id || got[i].status != items[i].status || !bytes.Equal(got[i].body, items[i].body) {
			t.Fatalf("item %d: %+v after the round trip, want %+v", i, got[i], items[i])
		}
	}
}

// FuzzDecodeEntries: a partition's state never panics the decoder, and the
// keys it yields re-encode to the same state.
func FuzzDecodeEntries(f *testing.F) {
	f.Add(append([]byte{2}, AppendEntry(AppendEntry(nil, "t:a", []byte{1}), "t:b", []byte{2, 3})...))
	f.Add([]byte{0x80, 0x80, 0x80, 0x80, 0x10})
	f.Fuzz(func(t *testing.T, b []byte) {
		var again []byte
		n := 0
		err := DecodeEntries(b, func(k string, s []byte) error {
			again = AppendEntry(again, k, s)
			n++
			return nil
		})
		if err != nil || len(b) == 0 {
			return
		}
		back := 0
		if DecodeEntries(append(binary.AppendUvarint(nil, uint64(n)), again...), func(string, []byte) error { back++; return nil }) != nil || back != n {
			t.Fatalf("%d entries of %x do not survive re-encoding", n, b)
		}
	})
}

// The Overdraft of an answer's Status travels in its State, as a section,
// only when a dimension is overdrawn, and only in the answers of ops that
// have no State of their own: an answer within its limits keeps the bytes
// it had before the section existed, and an answer with it is one that a
// member of an older build reads whole (its State is a string that build
// ignores for these ops), minus the overdraft.
func TestAnswerOverdraft(t *testing.T) {
	within := Answer{Owner: "n2", Decision: limiter.Decision{Reason: limiter.Tokens, RetryAfter: time.Second,
		Status: limiter.Status{Requests: limiter.DimStatus{Limit: 60, Remaining: 59, Reset: time.Minute},
			Tokens: limiter.DimStatus{Limit: 1000, Remaining: 0, Reset: time.Minute}}}}
	// The bytes of that answer as the build before the section wrote them.
	const before = "000200000080a8d6b907787680e0ba84bf03d00f0080e0ba84bf0300000000026e3200"
	if got := fmt.Sprintf("%x", AppendAnswer(nil, &within)); got != before {
		t.Fatalf("an answer within its limits encodes to %s, want %s as before", got, before)
	}
	over := within
	over.Decision.Status.Tokens.Overdraft = 1_234_567
	over.Decision.Status.Concurrency = limiter.DimStatus{Limit: 2, Overdraft: 1, Reset: time.Second}
	b := AppendAnswer(nil, &over)
	for _, op := range []Op{OpAcquire, OpSettle, OpRelease, OpCancel, OpRenew, OpStatus, OpCharge} {
		got, err := DecodeAnswer(op, b)
		if err != nil || !reflect.DeepEqual(got, over) {
			t.Fatalf("%s: %+v %v, want %+v", op, got, err, over)
		}
	}
	// What an older build reads: the same answer, the section as a State
	// it ignores; its other fields byte for byte those of the answer
	// without an overdraft.
	var old Answer
	r := wire.NewReader(b)
	if err := readAnswer(&r, &old); err != nil || r.Len() != 0 || len(old.State) == 0 {
		t.Fatalf("read as before: %+v %v, %d left", old, err, r.Len())
	}
	old.State, old.Decision.Status.Concurrency = nil, over.Decision.Status.Concurrency
	old.Decision.Status.Tokens.Overdraft, old.Decision.Status.Concurrency.Overdraft = 1_234_567, 1
	if !reflect.DeepEqual(old, over) {
		t.Fatalf("an older build reads %+v", old)
	}
	// The cost: the section's mark, its length and three uvarints (0,
	// 1_234_567 in 3 bytes, 1), the State's length being written anyway.
	noOver := over
	noOver.Decision.Status.Tokens.Overdraft, noOver.Decision.Status.Concurrency.Overdraft = 0, 0
	if n := len(AppendAnswer(nil, &noOver)); len(b) != n+1+1+1+3+1 {
		t.Errorf("with an overdraft: %d bytes, against %d without", len(b), n)
	}
	// Ops whose answers have a State of their own keep it, and leave the
	// overdraft out.
	grant := over
	grant.State = []byte{7, 1, 9}
	for _, op := range []Op{OpAllot, OpReturn, OpReplica, OpRun} {
		got, err := DecodeAnswer(op, AppendAnswer(nil, &grant))
		if err != nil || !bytes.Equal(got.State, grant.State) || got.Decision.Status.Tokens.Overdraft != 0 {
			t.Fatalf("%s: %+v %v", op, got, err)
		}
	}
	// A section of a later build is skipped, before or after the
	// overdraft; a malformed one is an error, never a panic.
	head := AppendAnswer(nil, &within)
	head = head[:len(head)-1] // without its empty State
	withState := func(state []byte) []byte { return wire.AppendString(slices.Clone(head), string(state)) }
	for _, state := range [][]byte{
		{answerOverdraft, 3, 0, 1, 0, 9, 1, 7},
		{answerOverdraft, 3, 0, 1, 0, 9, 0, 10, 2, 5, 5},
	} {
		if a, err := DecodeAnswer(OpStatus, withState(state)); err != nil || a.Decision.Status.Tokens.Overdraft != 1 || a.State != nil {
			t.Errorf("state %x: %+v %v, want a tokens overdraft of 1, the rest skipped", state, a, err)
		}
	}
	if a, err := DecodeAnswer(OpStatus, withState([]byte{7, 2, 1, 1})); err != nil || overdrawn(&a.Decision.Status) {
		t.Errorf("a later build's section alone: %+v %v", a, err)
	}
	for _, state := range [][]byte{
		{answerOverdraft, 3, 0, 0, 0},                              // nothing to say
		{answerOverdraft, 2, 1, 2},                                 // cut short
		{answerOverdraft, 5, 1, 2, 3},                              // longer than the State
		{answerOverdraft, 4, 0, 1, 0, 9},                           // a byte after the values
		{answerOverdraft, 3, 0, 1, 0, answerOverdraft, 3, 0, 1, 0}, // twice
		{2, 1, 0, answerOverdraft, 3, 0, 1, 0},                     // out of order
		{2, 9, 0},                                                  // an unknown one cut short
		append([]byte{answerOverdraft, 12, 0}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0), // past MaxInt64
	} {
		if a, err := DecodeAnswer(OpStatus, withState(state)); err == nil {
			t.Errorf("state %x decoded: %+v", state, a)
		}
	}
	for op := range opMax {
		if runOp(op) && !stateSections(op) {
			t.Errorf("%s may be part of a run but its answers carry no sections: DecodeRunAnswers reads them as a status's", op)
		}
	}
}

// FuzzAnswerRoundTrip: any bytes decode as the answer to any op without a
// panic, and an answer decoded re-encodes to one that decodes to itself.
func FuzzAnswerRoundTrip(f *testing.F) {
	over := Answer{Owner: "n", Decision: limiter.Decision{Status: limiter.Status{Tokens: limiter.DimStatus{Limit: 5, Overdraft: 7}}}}
	f.Add(uint8(OpSettle), AppendAnswer(nil, &over))
	f.Add(uint8(OpAllot), AppendAnswer(nil, &Answer{State: []byte{1, 2}}))
	f.Add(uint8(OpAcquire), AppendAnswer(nil, &Answer{Decision: limiter.Decision{Allowed: true, Lease: 3}}))
	f.Fuzz(func(t *testing.T, op uint8, b []byte) {
		a, err := DecodeAnswer(Op(op), b)
		if err != nil {
			return
		}
		again, err := DecodeAnswer(Op(op), AppendAnswer(nil, &a))
		if err != nil || !reflect.DeepEqual(again, a) {
			t.Fatalf("re-encode of %+v: %+v %v", a, again, err)
		}
	})
}
