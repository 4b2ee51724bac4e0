package limiter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// The first byte of a snapshot is its format version; see AppendBinary.
const (
	snapshotV1 = 1 // lease ids ≤ the sequence (counted ids)
	snapshotV2 = 2 // lease ids any non-zero uint64 (drawn from Policy.IDs, or chosen)
	snapshotV3 = 3 // as 2, and each lease's hits (Request.Hits)
	snapshotV4 = 4 // as 3, and the spend (Limits.Spend) after the leases
)

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
//	uvarint  last ticket (or counted lease id) handed out
//	uvarint  number of leases, then for each, by increasing id:
//	           uvarint id (1 … last id)
//	           uvarint age: 0 if its bucket has left the window, else
//	                   head − bucket + 1 (1 … N+1)
//	           uvarint reserved tokens
//	           varint  slot expiry, unix ns
//
// Format 2 is format 1 with version byte 2 and lease ids that are any
// non-zero uint64, still increasing, not bounded by the sequence: random
// ids drawn from Policy.IDs, or ids callers chose (Request.Lease).
//
// Format 3 is format 2 with version byte 3 and each lease closed by one
// more field, after its expiry:
//
//	uvarint  hits: the requests it counts (1 … 2^48)
//
// Format 4 is format 3 with version byte 4 and the key's spend after the
// leases (spend.go; amounts in picodollars):
//
//	varint   the period's start, unix ns
//	varint   the period's end, unix ns (> start)
//	uvarint  spent in the period (≤ 4 × MaxSpend)
//	uvarint  number of leases holding spend, then for each, by increasing
//	         id (each one of the leases above):
//	           uvarint id
//	           uvarint reserved cost (≤ MaxSpend)
//	           4 × uvarint its Price: Input, CachedInput, CacheWrite, Output
//
// Compatibility: AppendBinary writes the oldest format that holds the
// state: format 4 when the key has spent or holds spend (a key under a
// spend limit once admitted), else format 3 when some lease counts more
// than one request (an
// admission with Request.Hits > 1), else format 1 when every lease id is
// at most the sequence (always so with counted ids and no chosen ones, and
// for a key without leases), else format 2. So a node of an older build,
// which reads only formats 1 (or 1 and 2), still takes every state it
// could represent, and refuses (with ErrBadSnapshot, as any unknown
// version) only those it cannot: random or chosen ids beyond the
// sequence, leases of several requests (whose Cancel it would get wrong).
// RestoreBudget reads all four. A future format gets the next version
// byte; readers reject versions they do not know rather than guess.
//
// Limits and Policy are not part of a snapshot: RestoreBudget takes the
// current ones, so a key restored under new limits obeys them at once.
// Waiters are not either: they are connections at the node.
func (b *Budget) AppendBinary(dst []byte) ([]byte, error) {
	ids := make([]uint64, 0, len(b.leases))
	for id := range b.leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	version := byte(snapshotV1)
	switch {
	case b.sp != nil:
		version = snapshotV4
	case len(b.hits) > 0:
		version = snapshotV3
	case len(ids) > 0 && ids[len(ids)-1] > b.seq:
		version = snapshotV2
	}
	dst = append(dst, version)
	dst = binary.AppendVarint(dst, b.width)
	dst = binary.AppendUvarint(dst, uint64(b.nb))
	dst = binary.AppendVarint(dst, b.head)
	dst = binary.AppendUvarint(dst, uint64(b.last-b.head*b.width))
	m := b.ring()
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
		if version >= snapshotV3 {
			dst = binary.AppendUvarint(dst, uint64(b.leaseHits(id)))
		}
	}
	if version == snapshotV4 {
		dst = b.appendSpend(dst, ids)
	}
	return dst, nil
}

// MarshalBinary returns a snapshot of the Budget; see AppendBinary.
func (b *Budget) MarshalBinary() ([]byte, error) {
	return b.AppendBinary(make([]byte, 0, 64+4*(b.ring())+24*len(b.leases)))
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
	h, version, err := r.header()
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = &defaultPolicy
	}
	b := h.emptyBudget(l, p)
	r.windows(b)
	b.ewma = r.average()
	b.seq = r.uvarint("lease sequence")
	if err := r.leases(b, version); err != nil {
		return nil, err
	}
	if version == snapshotV4 {
		r.spend(b)
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

// snapHeader is the bucket geometry and clock a snapshot starts with, after
// its version byte. Once checkHeader accepts it, width > 0,
// 1 ≤ nb ≤ maxBuckets, every bucket boundary (k × width for k within nb+2
// of head) fits in an int64, and offset < width.
type snapHeader struct {
	width  int64  // bucket width, ns
	nb     uint64 // buckets per window
	head   int64  // absolute index of the newest bucket
	offset uint64 // the latest time seen, ns since head × width
}

// header reads the version byte and the snapHeader, and returns an error
// wrapping ErrBadSnapshot if either is truncated, unknown or out of range.
func (r *snapReader) header() (snapHeader, byte, error) {
	v := r.byte("version")
	if r.err == nil && (v < snapshotV1 || v > snapshotV4) {
		return snapHeader{}, v, fmt.Errorf("%w: unknown format version %d", ErrBadSnapshot, v)
	}
	h := snapHeader{
		width:  r.varint("bucket width"),
		nb:     r.uvarint("bucket count"),
		head:   r.varint("head bucket"),
		offset: r.uvarint("time in the head bucket"),
	}
	if r.err != nil {
		return snapHeader{}, v, r.err
	}
	return h, v, h.check()
}

// check returns an error wrapping ErrBadSnapshot if h breaks one of the
// invariants stated on snapHeader.
func (h snapHeader) check() error {
	if h.width <= 0 {
		return fmt.Errorf("%w: bucket width %d", ErrBadSnapshot, h.width)
	}
	if h.nb < 1 || h.nb > maxBuckets {
		return fmt.Errorf("%w: bucket count %d", ErrBadSnapshot, h.nb)
	}
	// Every bucket boundary computed from head must fit in an int64.
	if bound := math.MaxInt64/h.width - int64(h.nb) - 2; h.head > bound || h.head < -bound {
		return fmt.Errorf("%w: head bucket %d out of range", ErrBadSnapshot, h.head)
	}
	if h.offset >= uint64(h.width) {
		return fmt.Errorf("%w: time %d beyond the head bucket", ErrBadSnapshot, h.offset)
	}
	return nil
}

// emptyBudget returns a Budget with h's geometry and clock, limits l and
// policy p (not nil), and nothing counted, averaged or leased. h must have
// passed check.
func (h snapHeader) emptyBudget(l Limits, p *Policy) *Budget {
	return &Budget{
		pol:   p,
		lim:   l.normalize(),
		width: h.width,
		nb:    uint16(h.nb),
		head:  h.head,
		last:  h.head*h.width + int64(h.offset),
		cnt:   make([]int64, 2*(h.nb+1)),
		ewma:  -1,
	}
}

// windows reads the requests and tokens of b's nb+1 buckets, oldest first,
// into b's windows.
func (r *snapReader) windows(b *Budget) {
	for k := b.head - int64(b.nb); k <= b.head; k++ {
		b.addReq(k, r.units("requests"))
		b.addTok(k, r.units("tokens"))
	}
}

// average reads the completion average: -1 if the snapshot has none, else a
// value in [0, maxUnits] (anything else, NaN included, is an error).
func (r *snapReader) average() float64 {
	switch r.byte("average flag") {
	case 0:
		return -1
	case 1:
		if len(r.data) < 8 {
			r.fail("truncated average")
			return -1
		}
		e := math.Float64frombits(binary.LittleEndian.Uint64(r.data))
		r.data = r.data[8:]
		if !(e >= 0 && e <= maxUnits) { // also rejects NaN
			r.fail("completion average %v out of range", e)
		}
		return e
	default:
		r.fail("bad average flag")
		return -1
	}
}

// leases reads the lease count and the leases of a snapshot of format
// version, and puts them in b, whose windows and sequence must already be
// read. The ids must increase, be non-zero and, if counted (format 1), not
// exceed b.seq; every age must lie within b's window; hits (format 3) lie
// in 1 … maxUnits. It returns r's error if there is one once the count is
// read, or an error if the count is more than the remaining bytes could
// hold (so a forged count allocates nothing); an error in a lease stops
// the reading and sticks in r.
func (r *snapReader) leases(b *Budget, version byte) error {
	n := r.uvarint("lease count")
	if r.err != nil {
		return r.err
	}
	if n > uint64(len(r.data)/4) { // a lease takes at least 4 bytes
		return fmt.Errorf("%w: %d leases in %d bytes", ErrBadSnapshot, n, len(r.data))
	}
	var prev uint64
	for i := uint64(0); i < n; i++ {
		id, l, hits, ok := r.lease(b, prev, version)
		if !ok {
			break
		}
		prev = id
		b.putLease(id, l)
		if hits != 1 {
			if b.hits == nil {
				b.hits = make(map[uint64]int64)
			}
			b.hits[id] = hits
		}
	}
	return nil
}

// lease reads one lease of b, in a snapshot of format version, whose id
// must follow prev (and, counted in format 1, not exceed b.seq), and the
// requests it counts (1 before format 3). ok is false if the lease could
// not be read or is inconsistent with b; the error is in r.
func (r *snapReader) lease(b *Budget, prev uint64, version byte) (id uint64, l lease, hits int64, ok bool) {
	id = r.uvarint("lease id")
	age := r.uvarint("lease bucket")
	reserved := r.units("lease reservation")
	expiry := r.varint("lease expiry")
	hits = 1
	if version >= snapshotV3 {
		hits = r.units("lease hits")
		if r.err == nil && hits < 1 {
			r.fail("lease %d counts no request", id)
		}
	}
	if r.err != nil {
		return 0, lease{}, 0, false
	}
	if id <= prev || (version == snapshotV1 && id > b.seq) {
		r.fail("lease id %d out of order or beyond the sequence %d", id, b.seq)
		return 0, lease{}, 0, false
	}
	if age > uint64(b.ring()) {
		r.fail("lease bucket age %d beyond the window", age)
		return 0, lease{}, 0, false
	}
	bucket := int64(gone)
	if age > 0 {
		bucket = b.head - int64(age-1)
	}
	return id, lease{bucket: bucket, reserved: reserved, expiry: expiry}, hits, true
}
