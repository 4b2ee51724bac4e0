// Package prompt counts the tokens of LLM prompts locally, with OpenAI's
// tiktoken encodings, so that tokenring can reserve T_in before a request is
// forwarded and settle it with the usage reported after (docs/proxy.md).
//
// Counts for OpenAI models are exact for plain text and follow OpenAI's
// published formula for chat messages. Everything else (images, audio, files,
// Anthropic models) is an estimate: the reservation it feeds is settled later
// with the usage the provider reports, so an estimate only has to be close.
//
// The BPE tables come from github.com/pkoukk/tiktoken-go-loader, which embeds
// them in the binary: counting never touches the network or the disk. The
// encodings' split patterns and byte-pair merge are written out here
// (split.go, bpe.go) and count what github.com/pkoukk/tiktoken-go counts,
// token for token (the tests run both), about twenty times as fast:
// tiktoken-go runs the patterns with a backtracking regular expression
// engine (BenchmarkText).
package prompt

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names returned by Encoding.
const (
	O200kBase  = "o200k_base"  // gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4, gpt-oss
	Cl100kBase = "cl100k_base" // gpt-4, gpt-3.5-turbo, embeddings, and every unknown model
)

// o200kPrefixes are the model families that use o200k_base. A model matches
// when its name (see Encoding) starts with one of these.
var o200kPrefixes = [...]string{"gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "gpt-oss", "codex-"}

// o200kSeries are the reasoning families: they match the name alone or
// followed by '-' ("o1", "o3-mini", "o4-mini-2025-04-16"), but not "o100".
var o200kSeries = [...]string{"o1", "o3", "o4"}

// Encoding returns the tiktoken encoding for model: O200kBase for the gpt-4o,
// gpt-4.1, gpt-4.5, gpt-5, gpt-oss, codex and o1/o3/o4 families, Cl100kBase for
// everything else, including unknown models, claude-* and llama-*.
//
// The name is matched case-insensitively after dropping a fine-tune prefix
// ("ft:gpt-4o-mini:org::id") and a provider prefix up to the last '/'
// ("openai/gpt-4o").
func Encoding(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	m = strings.TrimPrefix(m, "ft:")
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range o200kPrefixes {
		if strings.HasPrefix(m, p) {
			return O200kBase
		}
	}
	for _, s := range o200kSeries {
		if m == s || strings.HasPrefix(m, s+"-") {
			return O200kBase
		}
	}
	return Cl100kBase
}

// encoding is one lazily loaded tiktoken encoding, with the counts of the
// prompt texts it counted lately.
type encoding struct {
	once   sync.Once
	loaded atomic.Bool // once has run: bpe or err is set
	bpe    *bpe        // nil when loading failed
	err    error
	counts countCache
}

func (e *encoding) get(name string) (*bpe, error) {
	e.once.Do(func() {
		e.bpe, e.err = loadBPE(name)
		e.loaded.Store(true)
	})
	return e.bpe, e.err
}

// loadBPE loads the encoding named name, O200kBase or Cl100kBase, from the
// tables tiktoken-go-loader embeds.
func loadBPE(name string) (*bpe, error) {
	split := splitCL100K
	if name == O200kBase {
		split = splitO200K
	}
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(bpeURL + name + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	table, err := newRankTable(ranks)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", name, err)
	}
	return &bpe{ranks: table, split: split}, nil
}

// bpeURL is where OpenAI publishes the encodings' tables: the name under
// which tiktoken-go-loader embeds them.
const bpeURL = "https://openaipublic.blob.core.windows.net/encodings/"

// Counter counts tokens. It is safe for concurrent use, and its zero value is
// ready to use.
//
// Each of the two encodings is loaded the first time it is needed, once per
// Counter: about 0.06 s and 2.6 MB of heap for cl100k_base, 0.12 s and 5.3 MB
// for o200k_base (their ranks, parsed from the embedded tables into a
// rankTable). Call Load at startup to pay that before the first request and
// to learn whether loading works.
//
// Long text is encoded in chunks so that counting stays linear in the input
// (tiktoken's merge step is quadratic in the length of one piece: 100 KB of
// spaces takes about 20 s in one go). Chunks are cut before a space that
// follows a non-space, which never changes the count; only a run of more than
// maxRun bytes with no such space (long whitespace runs, base64 blobs, CJK text
// without spaces) is cut elsewhere, which can shift the count by about one
// token per cut.
//
// Messages and AnthropicMessages remember the counts of the texts they
// counted (roles, contents, names), up to about 8 MiB of text per encoding
// (countCache), so that what prompts repeat is encoded once: a count read
// back is the count itself. Text, which counts completions, does not.
type Counter struct {
	cl100k encoding
	o200k  encoding
}

// NewCounter returns a Counter that loads its encodings on first use. It is
// the same as new(Counter).
func NewCounter() *Counter { return new(Counter) }

// Load loads both encodings now, if they are not loaded yet, and reports a
// loading error. The error is permanent for this Counter: after a failed load
// every count falls back to the estimate described at Text.
func (c *Counter) Load() error {
	if _, err := c.cl100k.get(Cl100kBase); err != nil {
		return err
	}
	_, err := c.o200k.get(O200kBase)
	return err
}

// encoding is the encoding named name: O200kBase, else Cl100kBase.
func (c *Counter) encoding(name string) *encoding {
	if name == O200kBase {
		return &c.o200k
	}
	return &c.cl100k
}

// Loaded reports whether the encoding named name (O200kBase or
// Cl100kBase) was loaded, or failed to load: by Load, or by a first count
// in it.
func (c *Counter) Loaded(name string) bool { return c.encoding(name).loaded.Load() }

// enc returns the encoding of model, or nil if it failed to load.
func (c *Counter) enc(model string) *bpe {
	return c.contentCounter(Encoding(model)).bpe
}

// contentCounter returns the counter of prompt content in the encoding
// named name (O200kBase or Cl100kBase).
func (c *Counter) contentCounter(name string) contentCounter {
	e := c.encoding(name)
	b, _ := e.get(name)
	return contentCounter{bpe: b, cache: &e.counts}
}

// Text returns the number of tokens of text, a plain prompt, in the encoding
// of model (see Encoding). Special-token strings such as "<|endoftext|>" are
// counted as ordinary text, as the OpenAI API does with user content.
//
// If the encoding could not be loaded (see Load), Text estimates one token per
// three bytes, rounded up: more than real English text needs, so a broken
// install errs towards reserving too much rather than too little.
func (c *Counter) Text(model, text string) int {
	return count(c.enc(model), text)
}

// maxRun is the longest chunk, in bytes, that is handed to tiktoken at once.
// Tiktoken's cost grows with the square of a piece's length: a 512-byte run of
// one letter costs about 0.25 ms.
const maxRun = 512

// count returns the number of tokens of text in b, or the fallback estimate
// when b is nil.
func count(b *bpe, text string) int {
	if text == "" {
		return 0
	}
	if b == nil {
		return (len(text) + 2) / 3
	}
	n := 0
	for len(text) > 0 {
		k := nextChunk(text, maxRun, maxRun)
		n += b.count(text[:k])
		text = text[k:]
	}
	return n
}

// nextChunk returns the length of the next chunk of s to encode on its own.
// It cuts at the last safe position within the first soft bytes; when there is
// none, it cuts at a rune boundary near hard bytes (hard >= soft), or not at
// all when s is no longer than that.
//
// A position i is safe when s[i] is ' ' and the rune before it is not
// whitespace. Neither cl100k_base's nor o200k_base's split pattern has a piece
// with a space after its first character unless the piece is all whitespace,
// and neither pattern looks behind, so every tiktoken piece of s ends or starts
// at a safe position and the pieces of s[:i] and s[i:] are those of s.
// prompt_test.go checks this on random text.
func nextChunk(s string, soft, hard int) int {
	if len(s) <= soft {
		return len(s)
	}
	for i := soft; i > 0; i-- {
		if s[i] == ' ' {
			r, _ := utf8.DecodeLastRuneInString(s[:i])
			if !unicode.IsSpace(r) {
				return i
			}
		}
	}
	if len(s) <= hard {
		return len(s)
	}
	i := hard
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	if i == 0 { // no rune start in s[1:hard+1]: not UTF-8; any cut will do
		return hard
	}
	return i
}
