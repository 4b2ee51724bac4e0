package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/internal/wire"
)

// Op is the operation a Call asks a key's owner to perform.
type Op uint8

// The operations of the decision protocol. Each acts on one key, except
// OpReplicateMany and OpRun.
const (
	OpAcquire       Op = iota + 1 // admit a request (may queue when Req.Wait > 0)
	OpSettle                      // settle a lease with the reported usage and free its slot
	OpRelease                     // free a lease's slot, keeping its tokens charged as reserved
	OpCancel                      // roll an admission back completely
	OpRenew                       // extend a lease's slot
	OpStatus                      // report the key's limits and usage
	OpTake                        // retired (per-key handoff, replaced by OpTransfer); the number stays taken
	OpPut                         // retired, like OpTake
	OpReplicate                   // replication: keep State as the backup copy of the key
	OpReplica                     // crash recovery: give the backup copy of the key to the caller
	OpPing                        // liveness probe, answered at once by the connection's reader
	OpTransfer                    // custody: State carries the custody machine's messages (custody.AppendMsgs)
	OpCharge                      // charge a debt (Charge): fallback admissions made elsewhere while the owner was unreachable
	OpAllot                       // admit Count requests at once for a forwarder to hand out (node/allot): a hot key's slice
	OpReturn                      // cancel allotted admissions not handed out (State: their lease ids, allot.AppendGrant)
	OpReplicateMany               // replication of many keys: State holds their snapshots (AppendEntry, after a count); Key is empty
	OpRun                         // several calls in one (run.go): State holds them (AppendRun); Key is the first one's
	OpCounted                     // the membership the answerer's majority rule counts: its names in the answer's State, one a line (a starting member learns it)
	opMax
)

var opNames = [...]string{"", "acquire", "settle", "release", "cancel", "renew", "status", "take", "put", "replicate", "replica", "ping", "transfer", "charge", "allot", "return", "replicate-many", "run", "counted"}

// String is the op's name, as logs and errors show it.
func (o Op) String() string {
	if o < opMax {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Call is one decision for one key, executed by the key's owner. It is the unit
// the router hands to the node (which names it node.Call) and the node
// forwards to peers.
type Call struct {
	Op    Op
	Key   string          // the limiter key, e.g. "t:acme" or "p:gpt-4o-mini"
	Req   limiter.Request // OpAcquire (Hits and Lease included), OpAllot (Reserve, Priority)
	Lease uint64          // OpSettle, OpRelease, OpCancel, OpRenew (an acquire names the lease it takes in Req.Lease)
	Usage limiter.Usage   // OpSettle
	Hops  uint8           // how many times this call was forwarded already (at most 127)
	// Handed says the forwarder is handing (or handed) the key's
	// partition to the receiver: the receiver waits for it instead of
	// forwarding the call on.
	Handed bool
	From   string // OpTransfer, OpReplicate, OpReplica: the sender's peer address
	State  []byte // OpReplicate: a limiter snapshot; OpTransfer: encoded custody messages
	Charge Charge // OpCharge
	// Count is how many admissions an OpAllot asks for, each reserving
	// Req.Reserve tokens.
	Count uint32
	// Limits, on an OpAcquire, are the requests, tokens and concurrency a
	// request sent for the key (limiter.Budget.SetSentLimits); nil: the
	// owner's own.
	Limits *limiter.Limits
}

// Charge is a debt: units another node admitted for the key by its
// fallback while the owner was unreachable, the latest of them at At. The
// owner counts them in its window (limiter.Budget.Charge) and acknowledges
// with Answer.OK.
type Charge struct {
	Requests int64
	Tokens   int64
	At       time.Time
}

// Answer is the owner's reply to a Call.
type Answer struct {
	Decision limiter.Decision // OpAcquire; Status for every op
	OK       bool             // settle/release/cancel/renew found the lease
	Expires  time.Time        // OpRenew: the slot's new expiry
	Owner    string           // the node that decided
	// State is OpReplica's: the backup's copy of the key and when it
	// arrived (appendReplica), empty when it had none; OpAllot's and
	// OpReturn's grant; OpRun's answers. The other ops' answers have none
	// of their own: on the wire it carries their sections (AppendAnswer).
	State []byte
}

// Wire format (internal/wire): every value is self-delimiting, unsigned
// and signed varints, strings as a uvarint length and bytes. Version 1.

// appendDim encodes d but its Overdraft, which an answer carries apart
// (AppendAnswer): every answer holds three DimStatus, and a key is
// rarely overdrawn.
func appendDim(b []byte, d limiter.DimStatus) []byte {
	b = binary.AppendVarint(b, d.Limit)
	b = binary.AppendVarint(b, d.Remaining)
	return binary.AppendVarint(b, int64(d.Reset))
}

// AppendCall encodes c onto b.
func AppendCall(b []byte, c *Call) []byte {
	hops := c.Hops & 0x7f
	if c.Handed {
		hops |= 0x80
	}
	b = append(b, byte(c.Op), hops)
	b = wire.AppendString(b, c.Key)
	b = binary.AppendUvarint(b, c.Lease)
	b = binary.AppendVarint(b, c.Req.PromptTokens)
	b = binary.AppendVarint(b, c.Req.MaxTokens)
	b = binary.AppendVarint(b, c.Req.Reserve)
	b = append(b, byte(c.Req.Priority))
	b = binary.AppendVarint(b, int64(c.Req.Wait))
	b = binary.AppendVarint(b, c.Usage.PromptTokens)
	b = binary.AppendVarint(b, c.Usage.CompletionTokens)
	b = wire.AppendString(b, c.From)
	b = wire.AppendString(b, string(c.State))
	if c.Op == OpCharge { // only charges carry one: other calls keep their bytes
		b = binary.AppendVarint(b, c.Charge.Requests)
		b = binary.AppendVarint(b, c.Charge.Tokens)
		var at int64
		if !c.Charge.At.IsZero() {
			at = c.Charge.At.UnixNano()
		}
		b = binary.AppendVarint(b, at)
	}
	if c.Op == OpAllot {
		b = binary.AppendUvarint(b, uint64(c.Count))
	}
	// An acquire's optional sections, last, each only when it has
	// something to say, in the order of their marks: an acquire without
	// them keeps its bytes. A member of an older build refuses a call
	// with a section it does not know (an unknown mark, or trailing bytes)
	// rather than decide without it.
	if c.Op == OpAcquire && c.Limits != nil {
		b = append(b, sentLimits)
		b = binary.AppendVarint(b, c.Limits.Requests)
		b = binary.AppendVarint(b, c.Limits.Tokens)
		b = binary.AppendVarint(b, c.Limits.Concurrency)
	}
	if c.Op == OpAcquire && (c.Req.Hits != 0 || c.Req.Lease != 0) {
		b = append(b, hitsLease)
		b = binary.AppendVarint(b, c.Req.Hits)
		b = binary.AppendUvarint(b, c.Req.Lease)
	}
	if c.Op == OpAcquire && c.Req.Price != (limiter.Price{}) {
		b = appendPrice(b, c.Req.Price)
	}
	if c.Op == OpAcquire && c.Req.Flow != "" {
		b = append(b, flow)
		b = wire.AppendString(b, c.Req.Flow)
		b = binary.AppendVarint(b, c.Req.Weight)
	}
	if c.Op == OpSettle && (c.Usage.CachedTokens != 0 || c.Usage.CacheWriteTokens != 0) {
		b = append(b, cacheUsage)
		b = binary.AppendVarint(b, c.Usage.CachedTokens)
		b = binary.AppendVarint(b, c.Usage.CacheWriteTokens)
	}
	return b
}

// The marks of a call's optional sections on the wire (an acquire's, a
// settle's), in the order they come in.
const (
	sentLimits = 1 // Limits: varint requests, tokens, concurrency (≥ 0)
	hitsLease  = 2 // Req.Hits (varint), Req.Lease (uvarint): not both 0
	price      = 3 // Req.Price: uvarint input, cached input, cache write, output (≤ limiter.MaxSpend), not all 0
	cacheUsage = 4 // a settle's Usage.CachedTokens, CacheWriteTokens (varint), not both 0
	flow       = 5 // Req.Flow (a string, not empty), Req.Weight (varint): who asks a fair key
)

// AppendAnswer encodes a onto b.
//
// An answer's optional sections (the Overdraft of its Status) travel in
// its State: the answers of acquires, settles, releases, cancels,
// renewals, statuses and charges have no State of their own
// (stateSections). A section is written only when it has something to
// say, as a mark, the length of its values and its values, in the order
// of the marks. So an answer of a key within its limits keeps its bytes,
// and a member of an older build reads every answer as before, minus the
// sections: it ignores those ops' State, and passes it on whole when it
// relays one. (A section after the State, as an acquire's, would fail the
// answer there instead: a call that fails falls back, and the fallback
// may admit what the owner refused.) For the same reason a reader skips a
// section it does not know: a section may add to what an answer says,
// never change it. An answer whose State holds something else (a slice's
// grant) leaves its sections out.
func AppendAnswer(b []byte, a *Answer) []byte {
	d := &a.Decision
	var flags byte
	if d.Allowed {
		flags |= 1
	}
	if d.Queued {
		flags |= 2
	}
	if a.OK {
		flags |= 4
	}
	b = append(b, flags, byte(d.Reason))
	b = binary.AppendUvarint(b, d.Ticket)
	b = binary.AppendUvarint(b, d.Lease)
	b = binary.AppendVarint(b, d.Reserved)
	b = binary.AppendVarint(b, int64(d.RetryAfter))
	b = appendDim(b, d.Status.Requests)
	b = appendDim(b, d.Status.Tokens)
	b = appendDim(b, d.Status.Concurrency)
	var exp int64
	if !a.Expires.IsZero() {
		exp = a.Expires.UnixNano()
	}
	b = binary.AppendVarint(b, exp)
	b = wire.AppendString(b, a.Owner)
	if len(a.State) == 0 && (overdrawn(&d.Status) || d.Status.Spend.Limit > 0) {
		return appendSections(b, &d.Status)
	}
	return wire.AppendString(b, string(a.State))
}

// The marks of an answer's sections (AppendAnswer), in the order they
// come in.
const (
	answerOverdraft = 1 // Decision.Status's Overdraft of requests, tokens, concurrency: three uvarints ≤ MaxInt64, not all 0
	answerSpend     = 2 // Decision.Status.Spend (spendSection): a key with a spend limit
)

func overdrawn(st *limiter.Status) bool {
	return st.Requests.Overdraft > 0 || st.Tokens.Overdraft > 0 || st.Concurrency.Overdraft > 0
}

// appendSections appends the sections of an answer with status st, as
// its State.
func appendSections(b []byte, st *limiter.Status) []byte {
	var buf [3*binary.MaxVarintLen64 + 2 + spendSectionLen]byte
	state := buf[:0]
	if overdrawn(st) {
		var vb [3 * binary.MaxVarintLen64]byte
		vals := vb[:0]
		for _, d := range [...]int64{st.Requests.Overdraft, st.Tokens.Overdraft, st.Concurrency.Overdraft} {
			vals = binary.AppendUvarint(vals, uint64(max(d, 0)))
		}
		state = append(state, answerOverdraft, byte(len(vals))) // its mark and length (at most 30: one byte)
		state = append(state, vals...)
	}
	if st.Spend.Limit > 0 {
		state = appendSpendSection(state, &st.Spend)
	}
	b = binary.AppendUvarint(b, uint64(len(state)))
	return append(b, state...)
}

// stateSections reports whether the State of op's answers holds their
// sections (AppendAnswer) rather than something of their own.
func stateSections(op Op) bool {
	switch op {
	case OpAcquire, OpSettle, OpRelease, OpCancel, OpRenew, OpStatus, OpCharge:
		return true
	}
	return false
}

// takeSections reads the sections an answer to op carries in its State
// (AppendAnswer) into their fields and empties State; an answer of
// another op keeps its State. A section it does not know is skipped.
// Marks out of order, a section cut short or longer than its values, and
// an overdraft of zeros are errors.
func (a *Answer) takeSections(op Op) error {
	if !stateSections(op) || len(a.State) == 0 {
		return nil
	}
	r := wire.NewReader(a.State)
	a.State = nil
	var last byte
	for r.Err() == nil && r.Len() > 0 {
		m := r.Byte()
		if m <= last {
			return fmt.Errorf("answer: section %d after %d", m, last)
		}
		last = m
		vals := wire.NewReader(r.Next(r.Uvarint()))
		if m == answerSpend {
			if err := readSpendSection(&vals, &a.Decision.Status.Spend); err != nil {
				return fmt.Errorf("answer: section %d: %w", m, err)
			}
			continue
		}
		if m != answerOverdraft {
			continue // a later build's
		}
		st := &a.Decision.Status
		for _, d := range [...]*limiter.DimStatus{&st.Requests, &st.Tokens, &st.Concurrency} {
			if v := vals.Uvarint(); v <= math.MaxInt64 {
				d.Overdraft = int64(v)
			} else {
				vals.Fail(fmt.Errorf("overdraft %d out of range", v))
			}
		}
		switch {
		case vals.Err() == nil && vals.Len() != 0:
			vals.Fail(fmt.Errorf("%d bytes after the overdraft", vals.Len()))
		case vals.Err() == nil && !overdrawn(st):
			vals.Fail(errors.New("an overdraft of zeros"))
		}
		if err := vals.Err(); err != nil {
			return fmt.Errorf("answer: section %d: %w", m, err)
		}
	}
	return r.Err()
}

// MaxAllot bounds the admissions of one OpAllot (Call.Count).
const MaxAllot = 1000

func readDim(r *wire.Reader) limiter.DimStatus {
	return limiter.DimStatus{Limit: r.Varint(), Remaining: r.Varint(), Reset: time.Duration(r.Varint())}
}

// readCall decodes a Call from r.
func readCall(r *wire.Reader, c *Call) error {
	c.Op = Op(r.Byte())
	hops := r.Byte()
	c.Hops, c.Handed = hops&0x7f, hops&0x80 != 0
	c.Key = r.Text()
	c.Lease = r.Uvarint()
	c.Req.PromptTokens = r.Varint()
	c.Req.MaxTokens = r.Varint()
	c.Req.Reserve = r.Varint()
	c.Req.Priority = limiter.Priority(r.Byte())
	c.Req.Wait = time.Duration(r.Varint())
	c.Usage.PromptTokens = r.Varint()
	c.Usage.CompletionTokens = r.Varint()
	c.From = r.Text()
	c.State = r.Bytes()
	if c.Op == OpCharge {
		c.Charge.Requests = r.Varint()
		c.Charge.Tokens = r.Varint()
		if at := r.Varint(); at != 0 {
			c.Charge.At = time.Unix(0, at)
		}
	}
	if c.Op == OpAllot {
		if n := r.Uvarint(); n <= MaxAllot {
			c.Count = uint32(n)
		} else {
			r.Fail(fmt.Errorf("allot of %d admissions: at most %d", n, MaxAllot))
		}
	}
	if c.Op == OpAcquire || c.Op == OpSettle {
		readSections(r, c)
	}
	if r.Err() == nil && (c.Op == 0 || c.Op >= opMax) {
		r.Fail(fmt.Errorf("unknown op %d", c.Op))
	}
	return r.Err()
}

// readSections reads what follows an acquire or a settle: its optional
// sections, each at most once, in the order of their marks (AppendCall
// writes them so), each only of the op it belongs to.
func readSections(r *wire.Reader, c *Call) {
	var last byte
	for r.Err() == nil && r.Len() > 0 {
		m := r.Byte()
		if m <= last {
			r.Fail(fmt.Errorf("acquire: section %d after %d", m, last))
			return
		}
		last = m
		if (m == cacheUsage) != (c.Op == OpSettle) {
			r.Fail(fmt.Errorf("op %d: section %d is not its own", c.Op, m))
			return
		}
		switch m {
		case price:
			readPrice(r, c)
		case flow:
			c.Req.Flow, c.Req.Weight = r.Text(), r.Varint()
			if r.Err() == nil && c.Req.Flow == "" {
				r.Fail(fmt.Errorf("acquire: an empty flow"))
			}
		case cacheUsage:
			c.Usage.CachedTokens, c.Usage.CacheWriteTokens = r.Varint(), r.Varint()
			if r.Err() == nil && c.Usage.CachedTokens == 0 && c.Usage.CacheWriteTokens == 0 {
				r.Fail(fmt.Errorf("settle: empty cache usage section"))
			}
		case sentLimits:
			l := limiter.Limits{Requests: r.Varint(), Tokens: r.Varint(), Concurrency: r.Varint()}
			if l.Requests < 0 || l.Tokens < 0 || l.Concurrency < 0 {
				r.Fail(fmt.Errorf("acquire: negative sent limits %+v", l))
			}
			c.Limits = &l
		case hitsLease:
			c.Req.Hits, c.Req.Lease = r.Varint(), r.Uvarint()
			if r.Err() == nil && c.Req.Hits == 0 && c.Req.Lease == 0 {
				r.Fail(fmt.Errorf("acquire: empty hits and lease section"))
			}
		default:
			r.Fail(fmt.Errorf("acquire: unknown section %d", m))
		}
	}
}

// readAnswer decodes an Answer from r.
func readAnswer(r *wire.Reader, a *Answer) error {
	d := &a.Decision
	flags := r.Byte()
	d.Allowed, d.Queued, a.OK = flags&1 != 0, flags&2 != 0, flags&4 != 0
	d.Reason = limiter.Dimension(r.Byte())
	d.Ticket = r.Uvarint()
	d.Lease = r.Uvarint()
	d.Reserved = r.Varint()
	d.RetryAfter = time.Duration(r.Varint())
	d.Status.Requests = readDim(r)
	d.Status.Tokens = readDim(r)
	d.Status.Concurrency = readDim(r)
	if exp := r.Varint(); exp != 0 {
		a.Expires = time.Unix(0, exp)
	}
	a.Owner = r.Text()
	a.State = r.Bytes()
	return r.Err()
}

// DecodeCall decodes one Call encoded by AppendCall; trailing bytes are an error.
func DecodeCall(b []byte) (Call, error) {
	var c Call
	r := wire.NewReader(b)
	if err := readCall(&r, &c); err != nil {
		return Call{}, fmt.Errorf("decode call: %w", err)
	}
	if r.Len() != 0 {
		return Call{}, fmt.Errorf("decode call: %d trailing bytes", r.Len())
	}
	return c, nil
}

// DecodeAnswer decodes one Answer encoded by AppendAnswer, as the answer
// to a call of op: its sections, which op's answers carry in their State,
// read into their fields (the Overdraft of its Status).
func DecodeAnswer(op Op, b []byte) (Answer, error) {
	var a Answer
	r := wire.NewReader(b)
	if err := readAnswer(&r, &a); err != nil {
		return Answer{}, fmt.Errorf("decode answer: %w", err)
	}
	if r.Len() != 0 {
		return Answer{}, fmt.Errorf("decode answer: %d trailing bytes", r.Len())
	}
	if err := a.takeSections(op); err != nil {
		return Answer{}, fmt.Errorf("decode answer: %w", err)
	}
	return a, nil
}

// Entries: keys and their limiter snapshots, as custody hands a
// partition's state over (an offer's State) and replication copies many
// keys (OpReplicateMany's State): a uvarint count, then each key as a
// string followed by its snapshot as a string.

// AppendEntry appends one key and its snapshot; the caller writes the count
// first.
func AppendEntry(b []byte, key string, state []byte) []byte {
	b = wire.AppendString(b, key)
	return wire.AppendString(b, string(state))
}

// DecodeEntries calls fn for each key of entries (a partition's state), stopping at
// the first error. Empty data is an empty partition.
func DecodeEntries(data []byte, fn func(key string, state []byte) error) error {
	if len(data) == 0 {
		return nil
	}
	r := wire.NewReader(data)
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		r.Fail(wire.ErrShort)
	}
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		key, state := r.Text(), r.Bytes()
		if r.Err() != nil {
			break
		}
		if err := fn(key, state); err != nil {
			return err
		}
	}
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%d trailing bytes", r.Len()))
	}
	if r.Err() != nil {
		return fmt.Errorf("decode partition state: %w", r.Err())
	}
	return nil
}
