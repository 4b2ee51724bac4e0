package prompt

import (
	"encoding/json"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestCountCacheExact: counting a prompt again, from the cache, gives the
// count itself, for random texts in both encodings.
func TestCountCacheExact(t *testing.T) {
	c := NewCounter()
	if err := c.Load(); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		name := rapid.SampledFrom([]string{O200kBase, Cl100kBase}).Draw(rt, "encoding")
		text := rapid.StringOf(rapid.SampledFrom([]rune("ab yz.,'\n\t 0123é語🙂"))).Draw(rt, "text")
		ct := c.contentCounter(name)
		want := count(ct.bpe, text)
		for i := range 2 { // counted, then from the cache
			if got := ct.count(text); got != want {
				rt.Fatalf("count %d of %q = %d, want %d", i, text, got, want)
			}
		}
	})
}

// TestCountCacheUsed: a prompt's texts are looked up in the cache of their
// encoding, so a count put there (a wrong one, to see it) is the one used.
func TestCountCacheUsed(t *testing.T) {
	c := NewCounter()
	msgs := []Message{{Role: "user", Content: json.RawMessage(`"hello world"`)}}
	want := c.Messages("gpt-4o", msgs) // 3 + 1 ("user") + 2 + 3
	if want != 9 {
		t.Fatalf("Messages = %d, want 9", want)
	}
	if n, ok := c.o200k.counts.get("hello world"); !ok || n != 2 {
		t.Fatalf("cached count of the content: %d, %t; want 2, true", n, ok)
	}
	c.o200k.counts.put("user", 0) // already there: kept
	c.o200k.counts.cur["hello world"] = 1000
	if got := c.Messages("gpt-4o", msgs); got != want-2+1000 {
		t.Fatalf("Messages with a planted count = %d, want %d", got, want-2+1000)
	}
	if got := c.Messages("gpt-4", msgs); got != want { // cl100k_base has a cache of its own
		t.Fatalf("Messages(gpt-4) = %d, want %d", got, want)
	}
}

// TestCountCacheBounded: a generation holds at most cacheGenBytes of text,
// the previous one is kept (and what is found there moves back), and a
// text over maxCachedText is not kept.
func TestCountCacheBounded(t *testing.T) {
	var c countCache
	c.put(strings.Repeat("x", maxCachedText+1), 1)
	if len(c.cur) != 0 {
		t.Fatalf("a text of %d bytes was kept", maxCachedText+1)
	}
	c.put("hot", 1)
	text := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), maxCachedText-i) }
	for i := range 3 * cacheGenBytes / maxCachedText {
		c.put(text(i), i)
		if c.curBytes > cacheGenBytes {
			t.Fatalf("after %d texts the generation holds %d bytes, over %d", i+1, c.curBytes, cacheGenBytes)
		}
		if _, ok := c.get("hot"); !ok {
			t.Fatalf("after %d texts the hot text, read after each, is gone", i+1)
		}
	}
	if _, ok := c.get(text(0)); ok {
		t.Fatal("the first text, never read, outlived three generations")
	}
	if n, ok := c.get(text(3*cacheGenBytes/maxCachedText - 1)); !ok || n != 3*cacheGenBytes/maxCachedText-1 {
		t.Fatalf("the last text: %d, %t", n, ok)
	}
}

// TestPlainJSONString: when plainJSONString takes a JSON string, its value
// is json.Unmarshal's; it takes every string json.Marshal writes without
// escapes.
func TestPlainJSONString(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var raw []byte
		if rapid.Bool().Draw(rt, "marshalled") {
			b, err := json.Marshal(rapid.String().Draw(rt, "s"))
			if err != nil {
				rt.Fatal(err)
			}
			raw = b
		} else {
			body := rapid.SliceOf(rapid.SampledFrom([]byte("ab\"\\\n\x00\xc3\xa9\xff"))).Draw(rt, "body") // é split, and a byte never UTF-8
			raw = append(append([]byte(`"`), body...), '"')
		}
		got, ok := plainJSONString(raw)
		var want string
		err := json.Unmarshal(raw, &want)
		switch {
		case ok && (err != nil || got != want):
			rt.Fatalf("plainJSONString(%q) = %q, json.Unmarshal %q, %v", raw, got, want, err)
		case !ok && err == nil && strings.Trim(string(raw), `"`) == want && !strings.ContainsAny(want, "\"\\"):
			rt.Fatalf("plainJSONString(%q) refused a string without escapes", raw)
		}
	})
	for _, raw := range []string{``, `"`, `x"`, `"x`, `"a"b"`} {
		if s, ok := plainJSONString([]byte(raw)); ok {
			t.Errorf("plainJSONString(%q) = %q, want refused", raw, s)
		}
	}
}
