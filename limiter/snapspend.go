package limiter

import (
	"encoding/binary"
	"time"
)

// A snapshot's spend section (format 4; see AppendBinary).

// appendSpend appends b's spend (b.sp not nil); ids are b's live lease
// ids, increasing.
func (b *Budget) appendSpend(dst []byte, ids []uint64) []byte {
	s := b.sp
	dst = binary.AppendVarint(dst, s.start)
	dst = binary.AppendVarint(dst, s.end)
	dst = binary.AppendUvarint(dst, uint64(s.spent))
	dst = binary.AppendUvarint(dst, uint64(len(s.leases)))
	for _, id := range ids {
		sl, ok := s.leases[id]
		if !ok {
			continue
		}
		dst = binary.AppendUvarint(dst, id)
		dst = binary.AppendUvarint(dst, uint64(sl.reserved))
		for _, v := range [4]int64{sl.price.Input, sl.price.CachedInput, sl.price.CacheWrite, sl.price.Output} {
			dst = binary.AppendUvarint(dst, uint64(v))
		}
	}
	return dst
}

// spend reads a spend section into b, whose leases must be read already
// (b.leases nil: CheckSnapshot's check, which only range-checks the ids).
// Every lease holding spend must be one of b's leases, in increasing id
// order; amounts within their caps; the period not empty.
func (r *snapReader) spend(b *Budget) {
	s := &spending{start: r.varint("period start"), end: r.varint("period end")}
	if r.err == nil && s.end <= s.start {
		r.fail("empty spend period [%d, %d)", s.start, s.end)
	}
	s.spent = r.amount("spent", maxSpent)
	n := r.uvarint("spend lease count")
	if r.err != nil {
		return
	}
	if n > uint64(len(r.data)/6) { // a spend lease takes at least 6 bytes
		r.fail("%d spend leases in %d bytes", n, len(r.data))
		return
	}
	var prev uint64
	for range n {
		id := r.uvarint("spend lease id")
		sl := spendLease{reserved: r.amount("reserved cost", MaxSpend)}
		sl.price = Price{r.amount("input price", MaxSpend), r.amount("cached input price", MaxSpend),
			r.amount("cache write price", MaxSpend), r.amount("output price", MaxSpend)}
		if r.err != nil {
			return
		}
		if _, live := b.leases[id]; id <= prev || (b.leases != nil && !live) {
			r.fail("spend lease %d out of order or not a lease", id)
			return
		}
		prev = id
		if s.leases == nil {
			s.leases = make(map[uint64]spendLease)
		}
		s.leases[id] = sl
		if s.held += sl.reserved; s.held > maxSpent {
			r.fail("spend held %d out of range", s.held)
			return
		}
	}
	b.sp = s
}

// amount reads a picodollar amount, at most limit.
func (r *snapReader) amount(what string, limit int64) int64 {
	v := r.uvarint(what)
	if v > uint64(limit) {
		r.fail("%s %d out of range", what, v)
		return 0
	}
	return int64(v)
}

// SnapshotKeepUntil returns until when a copy of a key whose snapshot is
// data must be kept even though its windows and leases have run out: the
// end of its spend period while it has spent or holds something (a
// budget's spend lasts its period, not a window); a Total period's spend
// lasts ~146 years (unix ns 2^62). The zero time for any other snapshot,
// or one that does not restore. Only snapshots of format 4 are read past
// their version byte.
func SnapshotKeepUntil(data []byte) time.Time {
	if len(data) == 0 || data[0] != snapshotV4 {
		return time.Time{}
	}
	b, err := RestoreBudget(data, Limits{}, nil)
	if err != nil || b.sp == nil || b.sp.spent+b.sp.held == 0 {
		return time.Time{}
	}
	return time.Unix(0, b.sp.end)
}
