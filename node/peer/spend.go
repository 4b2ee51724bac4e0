package peer

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/internal/wire"
)

// The wire of a key's spend (limiter.Limits.Spend): an acquire's price
// section, an answer's spend section.

// appendPrice appends an acquire's price section: its mark and the four
// prices, picodollars per token.
func appendPrice(b []byte, p limiter.Price) []byte {
	b = append(b, price)
	for _, v := range [...]int64{p.Input, p.CachedInput, p.CacheWrite, p.Output} {
		b = binary.AppendUvarint(b, uint64(max(v, 0)))
	}
	return b
}

// readPrice reads a price section into c.Req.Price.
func readPrice(r *wire.Reader, c *Call) {
	var v [4]int64
	for i := range v {
		u := r.Uvarint()
		if u > limiter.MaxSpend {
			r.Fail(fmt.Errorf("acquire: price %d out of range", u))
			return
		}
		v[i] = int64(u)
	}
	c.Req.Price = limiter.Price{Input: v[0], CachedInput: v[1], CacheWrite: v[2], Output: v[3]}
	if r.Err() == nil && c.Req.Price == (limiter.Price{}) {
		r.Fail(fmt.Errorf("acquire: a price section of zeros"))
	}
}

// spendSectionLen bounds an answer's spend section: its mark, its
// length and seven varints.
const spendSectionLen = 2 + 7*binary.MaxVarintLen64

// appendSpendSection appends the answer section of a key's spend: its
// mark, the length of its values, and limit, remaining, overdraft, reset
// (ns), spent and held as uvarints, the period's start as a varint
// (unix ns; 0 for none).
func appendSpendSection(b []byte, s *limiter.SpendStatus) []byte {
	var start int64
	if !s.Start.IsZero() {
		start = s.Start.UnixNano()
	}
	var vb [7 * binary.MaxVarintLen64]byte
	vals := vb[:0]
	for _, v := range [...]int64{s.Limit, s.Remaining, s.Overdraft, int64(s.Reset), s.Spent, s.Held} {
		vals = binary.AppendUvarint(vals, uint64(max(v, 0)))
	}
	vals = binary.AppendVarint(vals, start)
	b = append(b, answerSpend, byte(len(vals)))
	return append(b, vals...)
}

// readSpendSection reads a spend section's values into s.
func readSpendSection(r *wire.Reader, s *limiter.SpendStatus) error {
	var v [6]int64
	for i := range v {
		u := r.Uvarint()
		if u > 1<<62 {
			return fmt.Errorf("spend value %d out of range", u)
		}
		v[i] = int64(u)
	}
	start := r.Varint()
	if err := r.Err(); err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%d bytes after the spend", r.Len())
	}
	if v[0] <= 0 {
		return fmt.Errorf("a spend section without a limit")
	}
	*s = limiter.SpendStatus{DimStatus: limiter.DimStatus{Limit: v[0], Remaining: v[1], Overdraft: v[2], Reset: time.Duration(v[3])},
		Spent: v[4], Held: v[5]}
	if start != 0 {
		s.Start = time.Unix(0, start)
	}
	return nil
}
