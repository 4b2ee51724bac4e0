package prompt

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// counter is shared by the tests: loading o200k_base takes about a second.
var counter = NewCounter()

func TestEncoding(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{"gpt-4o", O200kBase},
		{"gpt-4o-mini", O200kBase},
		{"gpt-4o-2024-08-06", O200kBase},
		{"chatgpt-4o-latest", O200kBase},
		{"gpt-4.1", O200kBase},
		{"gpt-4.1-nano", O200kBase},
		{"gpt-4.5-preview", O200kBase},
		{"gpt-5", O200kBase},
		{"gpt-5-mini", O200kBase},
		{"gpt-oss-120b", O200kBase},
		{"o1", O200kBase},
		{"o1-mini", O200kBase},
		{"o3", O200kBase},
		{"o3-mini-2025-01-31", O200kBase},
		{"o4-mini", O200kBase},
		{"GPT-4O", O200kBase},
		{"openai/gpt-4o-mini", O200kBase},
		{"ft:gpt-4o-mini-2024-07-18:acme::abc123", O200kBase},
		{"gpt-4", Cl100kBase},
		{"gpt-4-turbo", Cl100kBase},
		{"gpt-4-0613", Cl100kBase},
		{"gpt-3.5-turbo", Cl100kBase},
		{"text-embedding-3-small", Cl100kBase},
		{"claude-3-5-sonnet-20241022", Cl100kBase},
		{"llama-3.1-70b", Cl100kBase},
		{"o100", Cl100kBase},
		{"", Cl100kBase},
		{"unknown", Cl100kBase},
	} {
		if got := Encoding(tc.model); got != tc.want {
			t.Errorf("Encoding(%q) = %q, want %q", tc.model, got, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	if err := counter.Load(); err != nil {
		t.Fatal(err)
	}
	// The offline tables are OpenAI's: the cookbook's token ids are the
	// ranks of the pieces "tiktoken is great!" and "2 + 2 = 4" make.
	for _, tc := range []struct {
		name  string
		ranks map[string]int
	}{
		{O200kBase, map[string]int{"t": 83, "ikt": 8251, "oken": 2488, " is": 382, " great": 2212, "!": 0}},
		{Cl100kBase, map[string]int{"2": 17, " +": 489, " ": 220, " =": 284, "4": 19}},
	} {
		b, _ := counter.encoding(tc.name).get(tc.name)
		for piece, want := range tc.ranks {
			if got, ok := b.ranks.rank(piece); !ok || got != want {
				t.Errorf("%s: rank of %q = %d, %t; want %d", tc.name, piece, got, ok, want)
			}
		}
	}
}

// TestText checks counts published by OpenAI (the cookbook "How to count
// tokens with tiktoken") and a few obvious ones.
func TestText(t *testing.T) {
	for _, tc := range []struct {
		text   string
		cl100k int
		o200k  int
		why    string
	}{
		{"", 0, 0, "empty"},
		{"hello world", 2, 2, "brief"},
		{"tiktoken is great!", 6, 6, "cookbook"},
		{"antidisestablishmentarianism", 6, 6, "cookbook"},
		{"2 + 2 = 4", 7, 7, "cookbook"},
		{"お誕生日おめでとう", 9, 8, "cookbook"},
		{"<|endoftext|>", 7, 7, "special tokens are plain text"},
	} {
		if got := counter.Text("gpt-4", tc.text); got != tc.cl100k {
			t.Errorf("%s: Text(gpt-4, %q) = %d, want %d", tc.why, tc.text, got, tc.cl100k)
		}
		if got := counter.Text("gpt-4o", tc.text); got != tc.o200k {
			t.Errorf("%s: Text(gpt-4o, %q) = %d, want %d", tc.why, tc.text, got, tc.o200k)
		}
	}
}

// A Counter loads an encoding at its first count in it, and only that one.
func TestLoadedAtFirstUse(t *testing.T) {
	c := NewCounter()
	if c.Loaded(Cl100kBase) || c.Loaded(O200kBase) {
		t.Fatal("a new Counter has loaded an encoding")
	}
	if got := c.Text("gpt-4", "hello world"); got != 2 {
		t.Fatalf("Text(gpt-4) = %d, want 2", got)
	}
	if !c.Loaded(Cl100kBase) || c.Loaded(O200kBase) {
		t.Fatalf("after a gpt-4 count: cl100k_base loaded %v, o200k_base %v; want true, false", c.Loaded(Cl100kBase), c.Loaded(O200kBase))
	}
	if err := c.Load(); err != nil || !c.Loaded(O200kBase) {
		t.Fatalf("Load: %v, o200k_base loaded %v", err, c.Loaded(O200kBase))
	}
}

func TestZeroCounter(t *testing.T) {
	var c Counter
	if got := c.Text("claude-3-haiku", "hello world"); got != 2 {
		t.Errorf("zero Counter: Text = %d, want 2", got)
	}
}

func TestFallbackEstimate(t *testing.T) {
	for _, tc := range []struct {
		text string
		want int
	}{{"", 0}, {"a", 1}, {"abc", 1}, {"abcd", 2}, {"hello world", 4}} {
		if got := count(nil, tc.text); got != tc.want {
			t.Errorf("count(nil, %q) = %d, want %d", tc.text, got, tc.want)
		}
	}
}

// TestChunkingExact checks the claim in nextChunk: cutting at safe positions
// only (no forced cuts) never changes the count, in either encoding.
func TestChunkingExact(t *testing.T) {
	if err := counter.Load(); err != nil {
		t.Fatal(err)
	}
	alphabet := []rune("aZé9 _-'.,!?/\t\n\r  \u00a0\u3000日本語sdtmlrve😀")
	rapid.Check(t, func(t *rapid.T) {
		runes := rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 200).Draw(t, "runes")
		text := string(runes)
		soft := rapid.IntRange(1, 40).Draw(t, "soft")
		for _, name := range []string{Cl100kBase, O200kBase} {
			e := &counter.cl100k
			if name == O200kBase {
				e = &counter.o200k
			}
			b, _ := e.get(name)
			want := b.count(text)
			got, s := 0, text
			for len(s) > 0 {
				k := nextChunk(s, soft, len(s))
				if k <= 0 || k > len(s) {
					t.Fatalf("nextChunk(%q, %d) = %d", s, soft, k)
				}
				got += b.count(s[:k])
				s = s[k:]
			}
			if got != want {
				t.Fatalf("%s: chunked count %d, whole count %d for %q (soft %d)", name, got, want, text, soft)
			}
		}
	})
}

func TestNextChunk(t *testing.T) {
	for _, tc := range []struct {
		s          string
		soft, hard int
		want       int
	}{
		{"abc", 8, 8, 3},
		{"hello world again", 8, 8, 5},        // last safe cut before "world"
		{"hello world again", 11, 11, 11},     // cut before " again"
		{"aaaaaaaaaaaa", 4, 8, 8},             // no safe cut: forced at hard
		{"aaaa  aaaaaaaa", 6, 8, 4},           // the first space is safe
		{"  aaaaaaaaaaaa", 6, 8, 8},           // a space after a space is not
		{"ééééé", 4, 4, 4},                    // forced cut on a rune boundary
		{"ééééé", 3, 3, 2},                    // ... moved back to one
		{"a\u00a0 bcdefghijkl", 5, 8, 8},      // NBSP is whitespace: not safe
		{"\xff\xfe\xfd\xfc\xfb\xfa", 2, 2, 2}, // not UTF-8
	} {
		if got := nextChunk(tc.s, tc.soft, tc.hard); got != tc.want {
			t.Errorf("nextChunk(%q, %d, %d) = %d, want %d", tc.s, tc.soft, tc.hard, got, tc.want)
		}
	}
}

// TestLongRunsAreLinear guards against tiktoken's quadratic merge: without
// chunking 100 KB of spaces takes about 20 s.
func TestLongRunsAreLinear(t *testing.T) {
	if err := counter.Load(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{strings.Repeat(" ", 100_000), strings.Repeat("a", 100_000), strings.Repeat("日", 50_000)} {
		start := time.Now()
		n := counter.Text("gpt-4o", s)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%d bytes of %q: %v", len(s), s[:1], d)
		}
		if n <= 0 || n > len(s) {
			t.Errorf("%d bytes of %q: %d tokens", len(s), s[:1], n)
		}
	}
	// A forced cut moves the count by about one token per cut.
	s := strings.Repeat("abcdefgh", 1000)
	b, _ := counter.cl100k.get(Cl100kBase)
	whole, chunked := b.count(s), counter.Text("gpt-4", s)
	if d := chunked - whole; d < -len(s)/maxRun-1 || d > len(s)/maxRun+1 {
		t.Errorf("chunked %d vs whole %d", chunked, whole)
	}
}

func TestConcurrent(t *testing.T) {
	c := NewCounter() // a fresh one: the loading itself races
	texts := []string{"hello world", "tiktoken is great!", "お誕生日おめでとう", strings.Repeat("lorem ipsum ", 200)}
	want := make(map[string]int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				model := []string{"gpt-4", "gpt-4o"}[(i+j)%2]
				text := texts[(i*7+j)%len(texts)]
				n := c.Text(model, text)
				m := c.Messages(model, []Message{{Role: "user", Content: json.RawMessage(fmt.Sprintf("%q", text))}})
				key := model + "\x00" + text
				mu.Lock()
				if w, ok := want[key]; ok && w != n {
					t.Errorf("Text(%s, %.20q) = %d, earlier %d", model, text, n, w)
				}
				want[key] = n
				if m != n+7 { // 3 per message + "user" + 3 priming
					t.Errorf("Messages = %d, Text = %d", m, n)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// prompt1K is a 1 KiB English prompt.
var prompt1K = func() string {
	s := strings.Repeat("The quick brown fox jumps over the lazy dog; 42 tokens, give or take. ", 20)
	return s[:1024]
}()

// BenchmarkText counts a new (uncached) 1 KiB English prompt in each
// encoding, here and with tiktoken-go, the same run:
//
//	go test -run '^$' -bench Text -benchtime 2s ./prompt/
func BenchmarkText(b *testing.B) {
	c := NewCounter()
	if err := c.Load(); err != nil {
		b.Fatal(err)
	}
	tks, err := tiktokenGo()
	if err != nil {
		b.Fatal(err)
	}
	for _, model := range []string{"gpt-4", "gpt-4o"} {
		name := Encoding(model)
		b.Run(name+"/tokenring", func(b *testing.B) {
			b.SetBytes(int64(len(prompt1K)))
			for b.Loop() {
				c.Text(model, prompt1K)
			}
		})
		b.Run(name+"/tiktoken-go", func(b *testing.B) {
			b.SetBytes(int64(len(prompt1K)))
			for b.Loop() {
				tks[name].EncodeOrdinary(prompt1K)
			}
		})
	}
}
