package limiter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// snapshotV1 is the first byte of the current snapshot format; see
// AppendBinary.
const snapshotV1 = 1

// AppendBinary appends a snapshot of the Budget's complete state except
// its waiters (windows with their absolute bucket indices, completion
// average, lease sequence, leases) to dst and returns the extended slice.
// The encoding of a given state is deterministic. It never fails; the error
// is there to implement encoding.BinaryAppender.
//
// Format 1 (integers as encoding/binary varints):
//
//	byte     1, the format version
//	varint   bucket width, ns (> 0)
//	uvarint  N, buckets per window (1 … 4096)
//	varint   head: absolute index (unix ns / width) of the newest bucket
//	uvarint  the latest time seen, as an offset into the head bucket
//	         (< width): ns since head × width
//	N+1 ×    uvarint requests, uvarint tokens   oldest bucket (head−N) first
//	byte     0, or 1 followed by 8 bytes: the completion average as
//	         little-endian IEEE 754 bits
//	uvarint  last lease id or ticket handed out
//	uvarint  number of leases, then for each, by increasing id:
//	           uvarint id (1 … last id)
//	           uvarint age: 0 if its bucket has left the window, else
//	                   head − bucket + 1 (1 … N+1)
//	           uvarint reserved tokens
//	           varint  slot expiry, unix ns
//
// Limits and Policy are not part of a snapshot: RestoreBudget takes the
// current ones, so a key restored under new limits obeys them at once.
// Waiters are not either: they are connections at the node.
func (b *Budget) AppendBinary(dst []byte) ([]byte, error) {
	dst = append(dst, snapshotV1)
	dst = binary.AppendVarint(dst, b.width)
	dst = binary.AppendUvarint(dst, uint64(b.nb))
	dst = binary.AppendVarint(dst, b.head)
	dst = binary.AppendUvarint(dst, uint64(b.last-b.head*b.width))
	m := b.nb + 1
	for k := b.head - int64(b.nb); k <= b.head; k++ {
		i := ringIndex(k, m)
		dst = binary.AppendUvarint(dst, uint64(b.cnt[i]))
		dst = binary.AppendUvarint(dst, uint64(b.cnt[m+i]))
	}
	if b.ewma < 0 {
		dst = append(dst, 0)
	} else {
		dst = append(dst, 1)
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(b.ewma))
	}
	dst = binary.AppendUvarint(dst, b.seq)
	dst = binary.AppendUvarint(dst, uint64(len(b.leases)))
	ids := make([]uint64, 0, len(b.leases))
	for id := range b.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l := b.leases[id]
		var age uint64
		if b.live(l.bucket) {
			age = uint64(b.head-l.bucket) + 1
		}
		dst = binary.AppendUvarint(dst, id)
		dst = binary.AppendUvarint(dst, age)
		dst = binary.AppendUvarint(dst, uint64(l.reserved))
		dst = binary.AppendVarint(dst, l.expiry)
	}
	return dst, nil
}

// MarshalBinary returns a snapshot of the Budget; see AppendBinary.
func (b *Budget) MarshalBinary() ([]byte, error) {
	return b.AppendBinary(make([]byte, 0, 64+4*(b.nb+1)+24*len(b.leases)))
}

// ErrBadSnapshot is wrapped by every error RestoreBudget (and Table.Put)
// returns for input it rejects.
var ErrBadSnapshot = errors.New("limiter: invalid budget snapshot")

// snapReader decodes a snapshot; the first error sticks.
type snapReader struct {
	data []byte
	err  error
}

func (r *snapReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
}

func (r *snapReader) byte(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.data) == 0 {
		r.fail("truncated at %s", what)
		return 0
	}
	c := r.data[0]
	r.data = r.data[1:]
	return c
}

func (r *snapReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.data)
	if n <= 0 {
		r.fail("bad or truncated %s", what)
		return 0
	}
	r.data = r.data[n:]
	return v
}

func (r *snapReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.data)
	if n <= 0 {
		r.fail("bad or truncated %s", what)
		return 0
	}
	r.data = r.data[n:]
	return v
}

// units reads a count of tokens or requests, at most maxUnits.
func (r *snapReader) units(what string) int64 {
	v := r.uvarint(what)
	if v > maxUnits {
		r.fail("%s %d out of range", what, v)
		return 0
	}
	return int64(v)
}

// RestoreBudget rebuilds a Budget from a snapshot made by AppendBinary or
// MarshalBinary, with limits l and policy p (as for NewBudget). If the bucket
// width or count implied by l and p differ from the snapshot's, the windows
// are re-bucketed as by SetLimits. The Budget has no waiters.
//
// Malformed input (unknown version, truncation, values out of range,
// inconsistent leases, trailing bytes) is rejected with an error; RestoreBudget
// never panics.
func RestoreBudget(data []byte, l Limits, p *Policy) (*Budget, error) {
	r := &snapReader{data: data}
	if v := r.byte("version"); r.err == nil && v != snapshotV1 {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrBadSnapshot, v)
	}
	width := r.varint("bucket width")
	nb := r.uvarint("bucket count")
	head := r.varint("head bucket")
	offset := r.uvarint("time in the head bucket")
	if r.err != nil {
		return nil, r.err
	}
	if width <= 0 {
		return nil, fmt.Errorf("%w: bucket width %d", ErrBadSnapshot, width)
	}
	if nb < 1 || nb > maxBuckets {
		return nil, fmt.Errorf("%w: bucket count %d", ErrBadSnapshot, nb)
	}
	// Every bucket boundary computed from head must fit in an int64.
	if bound := math.MaxInt64/width - int64(nb) - 2; head > bound || head < -bound {
		return nil, fmt.Errorf("%w: head bucket %d out of range", ErrBadSnapshot, head)
	}
	if offset >= uint64(width) {
		return nil, fmt.Errorf("%w: time %d beyond the head bucket", ErrBadSnapshot, offset)
	}
	if p == nil {
		p = &defaultPolicy
	}
	b := &Budget{
		pol:   p,
		lim:   l.normalize(),
		width: width,
		nb:    int(nb),
		head:  head,
		last:  head*width + int64(offset),
		cnt:   make([]int64, 2*(nb+1)),
		ewma:  -1,
	}
	m := b.nb + 1
	for k := head - int64(b.nb); k <= head; k++ {
		b.addReq(k, r.units("requests"))
		b.addTok(k, r.units("tokens"))
	}
	switch r.byte("average flag") {
	case 0:
	case 1:
		if len(r.data) < 8 {
			r.fail("truncated average")
			break
		}
		e := math.Float64frombits(binary.LittleEndian.Uint64(r.data))
		r.data = r.data[8:]
		if !(e >= 0 && e <= maxUnits) { // also rejects NaN
			r.fail("completion average %v out of range", e)
		}
		b.ewma = e
	default:
		r.fail("bad average flag")
	}
	b.seq = r.uvarint("lease sequence")
	n := r.uvarint("lease count")
	if r.err != nil {
		return nil, r.err
	}
	if n > uint64(len(r.data)/4) { // a lease takes at least 4 bytes
		return nil, fmt.Errorf("%w: %d leases in %d bytes", ErrBadSnapshot, n, len(r.data))
	}
	var prev uint64
	for i := uint64(0); i < n && r.err == nil; i++ {
		id := r.uvarint("lease id")
		age := r.uvarint("lease bucket")
		reserved := r.units("lease reservation")
		expiry := r.varint("lease expiry")
		if r.err != nil {
			break
		}
		if id <= prev || id > b.seq {
			r.fail("lease id %d out of order or beyond the sequence %d", id, b.seq)
			break
		}
		if age > uint64(m) {
			r.fail("lease bucket age %d beyond the window", age)
			break
		}
		prev = id
		bucket := int64(gone)
		if age > 0 {
			bucket = head - int64(age-1)
		}
		b.putLease(id, lease{bucket: bucket, reserved: reserved, expiry: expiry})
	}
	if r.err == nil && len(r.data) > 0 {
		r.fail("%d trailing bytes", len(r.data))
	}
	if r.err != nil {
		return nil, r.err
	}
	nbNew := p.buckets()
	b.rebucket(bucketWidth(int64(b.lim.Window), nbNew), nbNew)
	return b, nil
}
