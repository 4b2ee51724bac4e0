package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
)

// Op is the operation a Call asks a key's owner to perform.
type Op uint8

// The operations of the decision protocol. Each acts on one key, except
// OpReplicateMany.
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
	OpTransfer                    // ownership transfer: State carries one encoded transfer message (transfer.go)
	OpCharge                      // charge a debt (Charge): fallback admissions made elsewhere while the owner was unreachable
	OpAllot                       // admit Count requests at once for a forwarder to hand out (allot.go): a hot key's slice
	OpReturn                      // cancel allotted admissions not handed out (State: their lease ids, appendGrant)
	OpReplicateMany               // replication of many keys: State holds their snapshots (appendEntry, after a count); Key is empty
	opMax
)

var opNames = [...]string{"", "acquire", "settle", "release", "cancel", "renew", "status", "take", "put", "replicate", "replica", "ping", "transfer", "charge", "allot", "return", "replicate-many"}

func (o Op) String() string {
	if o < opMax {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Call is one decision for one key, executed by the key's owner. It is the unit
// the router hands to the node and the node forwards to peers.
type Call struct {
	Op    Op
	Key   string          // the limiter key, e.g. "t:acme" or "p:gpt-4o-mini"
	Req   limiter.Request // OpAcquire
	Lease uint64          // OpSettle, OpRelease, OpCancel, OpRenew
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
	State    []byte           // OpReplica: the backup's copy of the key and when it arrived (appendReplica); empty when it had none
}

// Wire format. Every value is self-delimiting: unsigned and signed varints,
// strings as a uvarint length and bytes. Version 1.

var errShort = errors.New("truncated message")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

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
	b = appendString(b, c.Key)
	b = binary.AppendUvarint(b, c.Lease)
	b = binary.AppendVarint(b, c.Req.PromptTokens)
	b = binary.AppendVarint(b, c.Req.MaxTokens)
	b = binary.AppendVarint(b, c.Req.Reserve)
	b = append(b, byte(c.Req.Priority))
	b = binary.AppendVarint(b, int64(c.Req.Wait))
	b = binary.AppendVarint(b, c.Usage.PromptTokens)
	b = binary.AppendVarint(b, c.Usage.CompletionTokens)
	b = appendString(b, c.From)
	b = appendString(b, string(c.State))
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
	return b
}

// AppendAnswer encodes a onto b.
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
	b = appendString(b, a.Owner)
	return appendString(b, string(a.State))
}

// reader decodes the wire format; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errShort
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errShort
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// bytes is string for binary values: nil when empty, a copy otherwise.
func (r *reader) bytes() []byte {
	if s := r.string(); s != "" {
		return []byte(s)
	}
	return nil
}

func (r *reader) dim() limiter.DimStatus {
	return limiter.DimStatus{Limit: r.varint(), Remaining: r.varint(), Reset: time.Duration(r.varint())}
}

func (r *reader) call(c *Call) error {
	c.Op = Op(r.byte())
	hops := r.byte()
	c.Hops, c.Handed = hops&0x7f, hops&0x80 != 0
	c.Key = r.string()
	c.Lease = r.uvarint()
	c.Req.PromptTokens = r.varint()
	c.Req.MaxTokens = r.varint()
	c.Req.Reserve = r.varint()
	c.Req.Priority = limiter.Priority(r.byte())
	c.Req.Wait = time.Duration(r.varint())
	c.Usage.PromptTokens = r.varint()
	c.Usage.CompletionTokens = r.varint()
	c.From = r.string()
	c.State = r.bytes()
	if c.Op == OpCharge {
		c.Charge.Requests = r.varint()
		c.Charge.Tokens = r.varint()
		if at := r.varint(); at != 0 {
			c.Charge.At = time.Unix(0, at)
		}
	}
	if c.Op == OpAllot {
		if n := r.uvarint(); n <= maxAllot {
			c.Count = uint32(n)
		} else if r.err == nil {
			r.err = fmt.Errorf("allot of %d admissions: at most %d", n, maxAllot)
		}
	}
	if r.err == nil && (c.Op == 0 || c.Op >= opMax) {
		r.err = fmt.Errorf("unknown op %d", c.Op)
	}
	return r.err
}

func (r *reader) answer(a *Answer) error {
	d := &a.Decision
	flags := r.byte()
	d.Allowed, d.Queued, a.OK = flags&1 != 0, flags&2 != 0, flags&4 != 0
	d.Reason = limiter.Dimension(r.byte())
	d.Ticket = r.uvarint()
	d.Lease = r.uvarint()
	d.Reserved = r.varint()
	d.RetryAfter = time.Duration(r.varint())
	d.Status.Requests = r.dim()
	d.Status.Tokens = r.dim()
	d.Status.Concurrency = r.dim()
	if exp := r.varint(); exp != 0 {
		a.Expires = time.Unix(0, exp)
	}
	a.Owner = r.string()
	a.State = r.bytes()
	return r.err
}

// DecodeCall decodes one Call encoded by AppendCall; trailing bytes are an error.
func DecodeCall(b []byte) (Call, error) {
	var c Call
	r := reader{b: b}
	if err := r.call(&c); err != nil {
		return Call{}, fmt.Errorf("decode call: %w", err)
	}
	if len(r.b) != 0 {
		return Call{}, fmt.Errorf("decode call: %d trailing bytes", len(r.b))
	}
	return c, nil
}

// DecodeAnswer decodes one Answer encoded by AppendAnswer.
func DecodeAnswer(b []byte) (Answer, error) {
	var a Answer
	r := reader{b: b}
	if err := r.answer(&a); err != nil {
		return Answer{}, fmt.Errorf("decode answer: %w", err)
	}
	if len(r.b) != 0 {
		return Answer{}, fmt.Errorf("decode answer: %d trailing bytes", len(r.b))
	}
	return a, nil
}

// A partition's state, as custody hands it over: a uvarint count, then
// each key as a string followed by its limiter snapshot as a string.

func appendEntry(b []byte, key string, state []byte) []byte {
	b = appendString(b, key)
	return appendString(b, string(state))
}

// decodeEntries calls fn for each key of a partition's state, stopping at
// the first error. Empty data is an empty partition.
func decodeEntries(data []byte, fn func(key string, state []byte) error) error {
	if len(data) == 0 {
		return nil
	}
	r := reader{b: data}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = errShort
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		key, state := r.string(), r.bytes()
		if r.err != nil {
			break
		}
		if err := fn(key, state); err != nil {
			return err
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("decode partition state: %w", r.err)
	}
	return nil
}

// Custody messages travel in OpTransfer calls: a uvarint count, then per
// message its kind, flags (1 held, 2 claiming), from, to, partition,
// epoch, round, state, gave-to and gave epoch.

func appendCustodyMsgs(b []byte, msgs []custody.Msg) []byte {
	b = binary.AppendUvarint(b, uint64(len(msgs)))
	for i := range msgs {
		m := &msgs[i]
		var flags byte
		if m.Held {
			flags |= 1
		}
		if m.Claiming {
			flags |= 2
		}
		b = append(b, byte(m.Kind), flags)
		b = appendString(b, m.From)
		b = appendString(b, m.To)
		b = binary.AppendUvarint(b, uint64(m.Part))
		b = binary.AppendUvarint(b, m.Epoch)
		b = binary.AppendUvarint(b, m.Round)
		b = appendString(b, string(m.State))
		b = appendString(b, m.GaveTo)
		b = binary.AppendUvarint(b, m.Gave)
	}
	return b
}

// maxCustodyMsgs bounds the messages of one OpTransfer call: a few per
// partition.
const maxCustodyMsgs = 1 << 16

func decodeCustodyMsgs(data []byte) ([]custody.Msg, error) {
	r := reader{b: data}
	n := r.uvarint()
	if r.err == nil && (n > maxCustodyMsgs || n > uint64(len(r.b))) {
		return nil, fmt.Errorf("decode custody messages: count %d", n)
	}
	msgs := make([]custody.Msg, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		var m custody.Msg
		m.Kind = custody.MsgKind(r.byte())
		flags := r.byte()
		m.Held, m.Claiming = flags&1 != 0, flags&2 != 0
		m.From, m.To = r.string(), r.string()
		part := r.uvarint()
		m.Epoch, m.Round = r.uvarint(), r.uvarint()
		if m.Kind == custody.MsgOffer {
			m.State = []byte(r.string()) // non-nil: an empty partition is still a snapshot
		} else {
			m.State = r.bytes()
		}
		m.GaveTo, m.Gave = r.string(), r.uvarint()
		if r.err == nil && (m.Kind < custody.MsgOffer || m.Kind > custody.MsgInfo || part > 1<<20) {
			r.err = fmt.Errorf("message %d: kind %d, partition %d", i, m.Kind, part)
		}
		m.Part = int(part)
		msgs = append(msgs, m)
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("decode custody messages: %w", r.err)
	}
	return msgs, nil
}

// appendReplica encodes a backup's copy of a key for OpReplica's answer:
// when it arrived (unix ns), then the key's snapshot.
func appendReplica(b []byte, r replica) []byte {
	b = binary.AppendVarint(b, r.at.UnixNano())
	return append(b, r.state...)
}

// decodeReplica decodes what appendReplica encoded.
func decodeReplica(b []byte) (replica, error) {
	at, n := binary.Varint(b)
	if n <= 0 {
		return replica{}, fmt.Errorf("replica: %w", errShort)
	}
	return replica{state: b[n:], at: time.Unix(0, at)}, nil
}
