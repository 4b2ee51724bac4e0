package prompt

import (
	"fmt"
	"hash/maphash"
	"math/bits"
)

// rankTable is an encoding's tokens and their ranks, held in two arrays
// without pointers: the garbage collector never marks through it, where a
// map[string]int of 200,000 tokens costs it 200,000 strings at every cycle.
// It is read-only once built, and safe for concurrent use.
//
// Each token is a slot of an open-addressed table (linear probing, at most
// half full): the top tagBits of the token's hash, its rank + 1, its length
// and its offset in text; 0 is an empty slot.
type rankTable struct {
	seed  maphash.Seed
	text  []byte   // every token's bytes, one after the other
	slots []uint64 // len a power of two
}

// The fields of a slot, from the top: tag, rank+1, length, offset.
const (
	offsetBits = 24 // text up to 16 MiB
	lenBits    = 10 // tokens up to 1,023 bytes
	rankBits   = 20 // ranks up to 1,048,574
	tagBits    = 64 - offsetBits - lenBits - rankBits
)

// newRankTable builds the table of ranks, token → rank.
func newRankTable(ranks map[string]int) (*rankTable, error) {
	size := 1 << bits.Len(uint(2*len(ranks)))
	t := &rankTable{seed: maphash.MakeSeed(), slots: make([]uint64, size)}
	for tok, rank := range ranks {
		off := len(t.text)
		if len(tok) == 0 || len(tok) >= 1<<lenBits || rank < 0 || rank+1 >= 1<<rankBits || off+len(tok) > 1<<offsetBits {
			return nil, fmt.Errorf("token %q (rank %d) does not fit the table", tok, rank)
		}
		t.text = append(t.text, tok...)
		h := maphash.String(t.seed, tok)
		slot := h>>(64-tagBits)<<(64-tagBits) | uint64(rank+1)<<(offsetBits+lenBits) | uint64(len(tok))<<offsetBits | uint64(off)
		for i := h & uint64(size-1); ; i = (i + 1) & uint64(size-1) {
			if t.slots[i] == 0 {
				t.slots[i] = slot
				break
			}
		}
	}
	return t, nil
}

// rank returns the rank of the token tok, false when tok is not a token.
func (t *rankTable) rank(tok string) (int, bool) {
	h := maphash.String(t.seed, tok)
	tag := h >> (64 - tagBits)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return 0, false
		}
		n := int(s >> offsetBits & (1<<lenBits - 1))
		if s>>(64-tagBits) == tag && n == len(tok) {
			off := int(s & (1<<offsetBits - 1))
			if string(t.text[off:off+n]) == tok {
				return int(s>>(offsetBits+lenBits)&(1<<rankBits-1)) - 1, true
			}
		}
	}
}
