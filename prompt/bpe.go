package prompt

import (
	"math"
	"sync"
	"unicode/utf8"
)

// bpe counts tokens in one tiktoken encoding: its split pattern, written
// out (split.go), and its byte-pair merges over the encoding's ranks. It
// counts what tiktoken-go's EncodeOrdinary returns, token for token
// (bpe_test.go), without making the tokens, without a regular expression
// engine and without tiktoken-go's decoder tables.
type bpe struct {
	ranks *rankTable // token bytes → rank: the lower merges first
	split func(s string, i int) int
}

// count returns the number of tokens of s. Invalid UTF-8 counts as
// tiktoken-go counts it: each byte that is not part of a rune is U+FFFD.
func (b *bpe) count(s string) int {
	if !utf8.ValidString(s) {
		s = string([]rune(s))
	}
	n := 0
	for i := 0; i < len(s); {
		e := b.split(s, i)
		n += b.pieceTokens(s[i:e])
		i = e
	}
	return n
}

// pieceTokens returns the number of tokens of one piece of the split.
func (b *bpe) pieceTokens(piece string) int {
	if _, ok := b.ranks.rank(piece); ok || len(piece) == 1 {
		return 1
	}
	return b.merge(piece)
}

// parts holds the merge state of pieces up to maxRun bytes, reused.
var parts = sync.Pool{New: func() any { p := make([]boundary, 0, maxRun+1); return &p }}

// boundary is a merge boundary: where a part starts in the piece, and the rank
// of the part that merging it with the next one would make (math.MaxInt:
// none).
type boundary struct{ start, rank int }

// merge runs tiktoken's byte-pair merge over piece (at least two bytes)
// and returns how many parts remain: merge the adjacent pair of the lowest
// rank (the leftmost of equal ones) until no adjacent pair is a token.
// As in tiktoken the cost grows with the square of len(piece); count is
// handed chunks of at most maxRun bytes.
func (b *bpe) merge(piece string) int {
	pp := parts.Get().(*[]boundary)
	defer parts.Put(pp)
	ps := (*pp)[:0]
	for i := range len(piece) + 1 {
		ps = append(ps, boundary{i, math.MaxInt})
	}
	// rank is the rank of the bytes from part i to part i+skip+2, or
	// math.MaxInt when they are not a token.
	rank := func(i, skip int) int {
		if i+skip+2 < len(ps) {
			if r, ok := b.ranks.rank(piece[ps[i].start:ps[i+skip+2].start]); ok {
				return r
			}
		}
		return math.MaxInt
	}
	for i := 0; i < len(ps)-2; i++ {
		ps[i].rank = rank(i, 0)
	}
	for len(ps) > 1 {
		low, at := math.MaxInt, -1
		for i := 0; i < len(ps)-1; i++ {
			if ps[i].rank < low {
				low, at = ps[i].rank, i
			}
		}
		if low == math.MaxInt {
			break
		}
		ps[at].rank = rank(at, 1)
		if at > 0 {
			ps[at-1].rank = rank(at-1, 1)
		}
		ps = append(ps[:at+1], ps[at+2:]...)
	}
	*pp = ps
	return len(ps) - 1
}
