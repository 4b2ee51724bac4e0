package prompt

import (
	"strings"
	"testing"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
	"pgregory.net/rapid"
)

// TestRankTableHoldsEveryToken: built from an encoding's ranks, the table
// finds every token with its rank and holds nothing else.
func TestRankTableHoldsEveryToken(t *testing.T) {
	for _, name := range []string{Cl100kBase, O200kBase} {
		ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(bpeURL + name + ".tiktoken")
		if err != nil {
			t.Fatal(err)
		}
		table, err := newRankTable(ranks)
		if err != nil {
			t.Fatal(err)
		}
		for tok, want := range ranks {
			if got, ok := table.rank(tok); !ok || got != want {
				t.Fatalf("%s: rank(%q) = %d, %t; want %d", name, tok, got, ok, want)
			}
		}
		if got := tokens(table); got != len(ranks) {
			t.Errorf("%s: %d tokens in the table, want %d", name, got, len(ranks))
		}
		for _, s := range []string{"", "tokenringtokenring", strings.Repeat("x", 300), "\xff\xfe\xfd"} {
			if _, ok := ranks[s]; !ok {
				if r, found := table.rank(s); found {
					t.Errorf("%s: rank(%q) = %d, but it is not a token", name, s, r)
				}
			}
		}
	}
}

// TestRankTableIsTheMap: for any small map of tokens, the table answers as
// the map does, for its keys and for other strings.
func TestRankTableIsTheMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		m := rapid.MapOf(rapid.StringN(1, 12, -1), rapid.IntRange(0, 1<<rankBits-2)).Draw(rt, "ranks")
		table, err := newRankTable(m)
		if err != nil {
			rt.Fatal(err)
		}
		probes := rapid.SliceOf(rapid.StringN(0, 12, -1)).Draw(rt, "probes")
		for k := range m {
			probes = append(probes, k)
		}
		for _, p := range probes {
			want, wantOK := m[p]
			if got, ok := table.rank(p); got != want || ok != wantOK {
				rt.Fatalf("rank(%q) = %d, %t; the map %d, %t", p, got, ok, want, wantOK)
			}
		}
	})
}

// TestRankTableRefusesWhatDoesNotFit: a token too long or a rank too high
// is an error, not a wrong answer.
func TestRankTableRefusesWhatDoesNotFit(t *testing.T) {
	for _, m := range []map[string]int{
		{strings.Repeat("a", 1<<lenBits): 1},
		{"a": 1<<rankBits - 1},
		{"a": -1},
		{"": 3},
	} {
		if _, err := newRankTable(m); err == nil {
			t.Errorf("newRankTable(%.20v) gave no error", m)
		}
	}
}

// tokens counts the tokens t holds: its slots in use.
func tokens(t *rankTable) int {
	n := 0
	for _, s := range t.slots {
		if s != 0 {
			n++
		}
	}
	return n
}
