package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tokenring/tokenring/prompt"
)

// TestEmbeddingsCountsInput: text is counted with the model's encoding,
// token ids by their number; no completion is reserved.
func TestEmbeddingsCountsInput(t *testing.T) {
	k := prompt.NewCounter()
	const model = "text-embedding-3-small"
	text := func(s ...string) int {
		n := 0
		for _, t := range s {
			n += k.Text(model, t)
		}
		return n
	}
	for _, tc := range []struct {
		input string
		want  int
		bytes int
	}{
		{`"The quick brown fox"`, text("The quick brown fox"), 19},
		{`["The quick brown fox","jumped over\nthe lazy dog"]`, text("The quick brown fox", "jumped over\nthe lazy dog"), 43},
		{`[1734, 4062, 14198, 39935]`, 4, 0},
		{`[[1734, 4062], [14198], [39935, 927, 279]]`, 6, 0},
		{`[[]]`, 0, 0},
	} {
		c := proxyCall{p: openAIEmbeddings{}}
		body := `{"model":"` + model + `","input":` + tc.input + `,"encoding_format":"base64"}`
		if err := c.p.parse(&c, []byte(body)); err != nil {
			t.Fatalf("%s: %v", tc.input, err)
		}
		if got := c.count(k); got != tc.want || c.promptBytes != tc.bytes {
			t.Errorf("%s: counted %d reading %d bytes, want %d reading %d", tc.input, got, c.promptBytes, tc.want, tc.bytes)
		}
		if got := c.count(k); got != tc.want {
			t.Errorf("%s: counted %d the second time", tc.input, got)
		}
		if !c.noCompletion || c.maxTokens != 0 || c.stream || c.model != model || string(c.body) != body {
			t.Errorf("%s: call %+v", tc.input, c)
		}
	}
}

// TestEmbeddingsRefusesMalformed: an input of no shape embeddings take is
// the client's error.
func TestEmbeddingsRefusesMalformed(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":`:                                    "invalid JSON body",
		`{"input":"x"}`:                                "model",
		`{"model":"m"}`:                                "input is required",
		`{"model":"m","input":null}`:                   "input is required",
		`{"model":"m","input":[]}`:                     "input must not be empty",
		`{"model":"m","input":5}`:                      "input must be a string, an array",
		`{"model":"m","input":{"text":"x"}}`:           "input must be a string, an array",
		`{"model":"m","input":["a",1]}`:                "input must be a string, an array",
		`{"model":"m","input":[1,"a"]}`:                "input must be a string, an array",
		`{"model":"m","input":[1.5]}`:                  "input must be a string, an array",
		`{"model":"m","input":[[1],["a"]]}`:            "input must be a string, an array",
		`{"model":"m","input":[true]}`:                 "input must be a string, an array",
		`{"model":"m","input":[[1,2],3]}`:              "input must be a string, an array",
		`{"model":"m","input":[99999999999999999999]}`: "input must be a string, an array",
	} {
		c := proxyCall{p: openAIEmbeddings{}}
		if err := c.p.parse(&c, []byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", body, err, want)
		}
	}
}

// TestEmbeddingsUsage: an answer settles with usage.prompt_tokens and no
// completion; one without usage with the counted input.
func TestEmbeddingsUsage(t *testing.T) {
	k := prompt.NewCounter()
	for _, tc := range []struct {
		body   string
		prompt int64
	}{
		{`{"object":"list","data":[{"object":"embedding","index":0,"embedding":"AACAPgAAAL8AAIA/"}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`, 8},
		{`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.25,-0.5,1]}]}`, 30},
	} {
		s := usageSeen{countText: textCounter(k, "text-embedding-3-small")}
		if !(openAIEmbeddings{}).readAnswer(&s, []byte(tc.body)) {
			t.Fatalf("not read: %s", tc.body)
		}
		if u := s.usage(30); u.PromptTokens != tc.prompt || u.CompletionTokens != 0 {
			t.Errorf("%s: settles %+v, want prompt %d and no completion", tc.body, u, tc.prompt)
		}
	}
	s := usageSeen{countText: textCounter(k, "m")}
	if (openAIEmbeddings{}).readAnswer(&s, []byte(`{"usage":{"prompt_tokens":"8"}}`)) {
		t.Error("a usage of the wrong type was read")
	}
}

// FuzzParseEmbeddings: parsing any body never panics; a body it takes is
// one encoding/json reads, and its input counts to at least the ids it
// holds, without panicking.
func FuzzParseEmbeddings(f *testing.F) {
	for _, b := range []string{`{"model":"m","input":"hi"}`, `{"model":"m","input":["a","b"]}`, `{"model":"m","input":[1,2]}`,
		`{"model":"m","input":[[1],[2,3]]}`, `{"model":"m","input":[null,"a"]}`, `{"model":"m","input":[[null]]}`} {
		f.Add([]byte(b))
	}
	k := prompt.NewCounter()
	f.Fuzz(func(t *testing.T, b []byte) {
		c := proxyCall{p: openAIEmbeddings{}}
		if c.p.parse(&c, b) != nil {
			return
		}
		var in embeddingsRequest
		if err := json.Unmarshal(b, &in); err != nil || in.Model != c.model {
			t.Fatalf("%q taken: encoding/json %v, model %q", b, err, in.Model)
		}
		if n := c.count(k); n < 0 {
			t.Fatalf("%q counted %d", b, n)
		}
	})
}
