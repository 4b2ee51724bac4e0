package prompt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/dlclark/regexp2/syntax"
	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// The split patterns of tiktoken-go v0.1.8 (encoding.go), as it compiles
// them: with regexp2, no options.
const (
	patternCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternO200K  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
		`|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?` +
		`|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitters are the written-out patterns and the patterns themselves.
var splitters = []struct {
	name    string
	split   func(string, int) int
	pattern *regexp2.Regexp
}{
	{Cl100kBase, splitCL100K, regexp2.MustCompile(patternCL100K, regexp2.None)},
	{O200kBase, splitO200K, regexp2.MustCompile(patternO200K, regexp2.None)},
}

// charSet is the rune class regexp2 compiles class, a pattern of one class,
// into: the set its matcher tests each rune against.
func charSet(t *testing.T, class string) *syntax.CharSet {
	t.Helper()
	tree, err := syntax.Parse(class, syntax.RegexOptions(regexp2.None))
	if err != nil {
		t.Fatal(err)
	}
	code, err := syntax.Write(tree)
	if err != nil {
		t.Fatal(err)
	}
	if len(code.Sets) != 1 {
		t.Fatalf("%s compiles to %d sets, want 1", class, len(code.Sets))
	}
	return code.Sets[0]
}

// TestClassesAreThePatterns: each rune class split.go uses holds exactly the
// runes regexp2 puts in the class the patterns name, over every rune; and
// (?i:...) folds only the ASCII letters of the contractions (every rune
// tried; under the race detector, which makes regexp2 ten times slower,
// those below U+3000, where every script with case is).
func TestClassesAreThePatterns(t *testing.T) {
	for _, c := range []struct {
		class string
		is    func(rune) bool
	}{
		{`\s`, unicode.IsSpace},
		{`\p{L}`, unicode.IsLetter},
		{`\p{N}`, unicode.IsNumber},
		{`[^\r\n\p{L}\p{N}]`, prefix},
		{`[^\s\p{L}\p{N}]`, isOther},
		{`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`, isUpper},
		{`[\p{Ll}\p{Lm}\p{Lo}\p{M}]`, isLower},
	} {
		set := charSet(t, c.class)
		for r := rune(0); r <= unicode.MaxRune; r++ {
			if utf8.ValidRune(r) && c.is(r) != set.CharIn(r) {
				t.Errorf("%s: rune %U: split.go says %t, regexp2 %t", c.class, r, c.is(r), set.CharIn(r))
			}
		}
	}
	last := rune(unicode.MaxRune)
	if raceEnabled {
		last = 0x3000
	}
	var b strings.Builder
	for r := rune(0); r <= last; r++ {
		if utf8.ValidRune(r) { // r at each place of a contraction's letters
			fmt.Fprintf(&b, "'%ce'%cl'r%c'l%c", r, r, r, r)
		}
	}
	re := regexp2.MustCompile(`'(?i:s|t|re|ve|m|ll|d)`, regexp2.None)
	folded := map[rune]bool{}
	m, err := re.FindStringMatch(b.String())
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		for _, r := range m.Runes()[1:] {
			folded[r] = true
		}
	}
	var got []rune
	for r := range folded {
		got = append(got, r)
	}
	slices.Sort(got)
	if want := []rune("DELMRSTVdelmrstv"); err != nil || !slices.Equal(got, want) {
		t.Errorf("runes (?i:...) folds after ': %q, want %q (%v)", string(got), string(want), err)
	}
}

// pieces splits s with split.
func pieces(split func(string, int) int, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		e := split(s, i)
		out = append(out, s[i:e])
		i = e
	}
	return out
}

// patternPieces splits s with re as tiktoken-go does: every match in turn.
func patternPieces(t testing.TB, re *regexp2.Regexp, s string) []string {
	var out []string
	runes := []rune(s)
	m, err := re.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// trickyRunes are runes at the edges of the patterns' classes: letters of
// each case class, marks, numbers of each kind, spaces and line breaks of
// several kinds, apostrophes, slashes, symbols, and U+FFFD.
var trickyRunes = []rune("aZsStTrReEvVmMlLdD'’/ \t\r\n\v\f\u0085\u00a0\u2028\u3000éÉǅʰ中ا\u0300\u0301\u0903\u20dd09٣Ⅻ½.,!?-_$😀\ufffd")

// randomText is n runes drawn from trickyRunes, with a fifth of them from
// all of Unicode.
func randomText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		if rng.IntN(5) == 0 {
			r := rune(rng.IntN(unicode.MaxRune + 1))
			if utf8.ValidRune(r) {
				b.WriteRune(r)
				continue
			}
		}
		b.WriteRune(trickyRunes[rng.IntN(len(trickyRunes))])
	}
	return b.String()
}

// TestSplitIsThePattern: the written-out splits cut random text where the
// patterns do.
func TestSplitIsThePattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sp := range splitters {
		for range 3000 {
			s := randomText(rng, 1+rng.IntN(40))
			if got, want := pieces(sp.split, s), patternPieces(t, sp.pattern, s); !slices.Equal(got, want) {
				t.Fatalf("%s: %q splits into %q, the pattern into %q", sp.name, s, got, want)
			}
		}
	}
}

// FuzzSplit: as TestSplitIsThePattern, on any valid UTF-8.
//
//	go test -run '^$' -fuzz FuzzSplit -fuzztime 60s ./prompt/
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "it's", "Hello, World!\n\n", "  x", "\u0300AB", "中A'S", "a\r\n \n\tb", "x//\n/y", "١٢٣٤5", "ǅungla"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, sp := range splitters {
			if got, want := pieces(sp.split, s), patternPieces(t, sp.pattern, s); !slices.Equal(got, want) {
				t.Fatalf("%s: %q splits into %q, the pattern into %q", sp.name, s, got, want)
			}
		}
	})
}

// tiktokenGo is tiktoken-go's encodings, loaded once: the oracle.
var tiktokenGo = sync.OnceValues(func() (map[string]*tiktoken.Tiktoken, error) {
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	out := map[string]*tiktoken.Tiktoken{}
	for _, name := range []string{Cl100kBase, O200kBase} {
		tk, err := tiktoken.GetEncoding(name)
		if err != nil {
			return nil, err
		}
		out[name] = tk
	}
	return out, nil
})

// checkCount fails t unless each encoding of counter counts s as
// tiktoken-go does.
func checkCount(t testing.TB, s string) {
	t.Helper()
	tks, err := tiktokenGo()
	if err != nil {
		t.Fatal(err)
	}
	for name, tk := range tks {
		b, err := counter.encoding(name).get(name)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := b.count(s), len(tk.EncodeOrdinary(s)); got != want {
			t.Fatalf("%s: %q counts %d tokens, tiktoken-go %d", name, s, got, want)
		}
	}
}

// TestCountIsTiktoken: the counts of random text (runs of letters long
// enough to merge, every kind of rune, invalid UTF-8) are tiktoken-go's.
func TestCountIsTiktoken(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{"the", "antidisestablishmentarianism", "tokenring", "Hello", "WORLD", "naïve", "über", "日本語", "ＡＢＣ", "12345678", "...", "!!!", "    ", "\n\n", "'ll", "https://example.com/a/b", "😀😀", "\u0300\u0301", strings.Repeat("x", 40)}
	for range 2000 {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			if rng.IntN(3) == 0 {
				b.WriteString(randomText(rng, 1+rng.IntN(6)))
			} else {
				b.WriteString(words[rng.IntN(len(words))])
			}
			if rng.IntN(2) == 0 {
				b.WriteByte(' ')
			}
		}
		checkCount(t, b.String())
	}
	for _, s := range []string{"", "\xff", "a\xffb", "\xe6\x97", "日\xe6\x97本", "<|endoftext|>", "tiktoken is great!", "お誕生日おめでとう"} {
		checkCount(t, s)
	}
}

// FuzzCount: as TestCountIsTiktoken, on any text.
//
//	go test -run '^$' -fuzz FuzzCount -fuzztime 60s ./prompt/
func FuzzCount(f *testing.F) {
	for _, s := range []string{"", "it's 2 + 2 = 4", "antidisestablishmentarianism", "a\xffb", "日本語のテキスト", "    \n\n\tx", "ǅungla'LL"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > maxRun { // tiktoken-go's merge is quadratic; count only sees chunks
			s = s[:maxRun]
		}
		checkCount(t, s)
	})
}
