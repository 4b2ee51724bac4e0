package proxy

import "github.com/tokenring/tokenring/internal/jsonwire"

// Decoders of OpenAI answers and stream chunks (openAIAnswer) and of
// requests (openAIRequest, openaireq.go) for the plainest of them, without
// reflection: encoding/json spent a tenth of a streamed completion's CPU
// time in the proxy on the chunks alone, and 6% of a whole one's on the
// request. They take only text that encoding/json decodes without error
// and to the same values (FuzzDecodeOpenAIAnswer,
// FuzzDecodeOpenAIRequest): keys and the strings decoded in printable
// ASCII without escapes (so they need no unescaping and keys fold as
// encoding/json folds them), known keys once per object, values of their
// fields' types, nesting at most about maxFastDepth deep; the values
// skipped or kept raw may be any valid JSON. Anything else is
// encoding/json's.

// maxFastDepth bounds the nesting the decoder reads.
const maxFastDepth = 32

// decodeOpenAIAnswer decodes b into a, a zero openAIAnswer; false means b
// is outside the subset (a is then undefined: decode into a fresh one).
func decodeOpenAIAnswer(b []byte, a *openAIAnswer) bool {
	s := fastJSON{jsonwire.New(b)}
	return s.Peek() == '{' && s.answer(a) && s.End()
}

// fastJSON reads JSON: internal/jsonwire's Scanner (keys and decoded
// strings in its subset; Members takes any keys, Any skips any value) and
// the readers of fields that may be null.
type fastJSON struct {
	jsonwire.Scanner
}

// skip reads any value, maxFastDepth levels of nesting at most.
func (s *fastJSON) skip() bool {
	_, ok := s.Any(maxFastDepth)
	return ok
}

// orNull reads a value with read into v, or a null, which leaves v.
func orNull[T any](s *fastJSON, v *T, read func() (T, bool)) bool {
	if s.Null() {
		return true
	}
	x, ok := read()
	if ok {
		*v = x
	}
	return ok
}

// int reads an integer into v as encoding/json decodes one into an int64
// (at most 18 digits: never out of range), or a null, which leaves v.
func (s *fastJSON) int(v *int64) bool { return orNull(s, v, s.Int) }

// text reads a string into v, or a null, which leaves v.
func (s *fastJSON) text(v *string) bool {
	return orNull(s, v, func() (string, bool) {
		b, ok := s.Raw()
		return string(b), ok
	})
}

// fields matches an object's keys, as encoding/json matches them to a
// struct's fields (ASCII case ignored), each at most once.
type fields struct {
	seen uint8
}

// is reports whether key names the field name, the index-th of its
// object; false for another key. A second key for the same field is
// reported by dup.
func (f *fields) is(key []byte, index int, name string, dup *bool) bool {
	if !foldEqual(key, name) {
		return false
	}
	if f.seen&(1<<index) != 0 {
		*dup = true
	}
	f.seen |= 1 << index
	return true
}

// foldEqual reports whether ASCII key equals the lower-case name,
// ignoring case.
func foldEqual(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := range len(key) {
		c := key[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

func (s *fastJSON) answer(a *openAIAnswer) bool {
	var f fields
	dup := false
	return s.Members(func(key []byte) bool {
		switch {
		case f.is(key, 0, "choices", &dup):
			return !dup && s.choices(a)
		case f.is(key, 1, "usage", &dup):
			return !dup && s.usage(a)
		}
		return s.skip()
	})
}

// arrayOf reads an array of objects into *xs as encoding/json fills a
// slice: null leaves nil, [] an empty slice that is not nil, a null element
// the zero T; elem reads each element that is an object into its slot.
func arrayOf[T any](s *fastJSON, xs *[]T, elem func(x *T) bool) bool {
	if s.Null() {
		*xs = nil
		return true
	}
	*xs = []T{}
	return s.Array(func() bool {
		*xs = append(*xs, *new(T))
		return s.Null() || elem(&(*xs)[len(*xs)-1])
	})
}

func (s *fastJSON) choices(a *openAIAnswer) bool {
	return arrayOf(s, &a.Choices, func(c *openAIChoice) bool {
		var f fields
		dup := false
		return s.Members(func(key []byte) bool {
			switch {
			case f.is(key, 0, "message", &dup):
				return !dup && s.delta(&c.Message)
			case f.is(key, 1, "delta", &dup):
				return !dup && s.delta(&c.Delta)
			}
			return s.skip()
		})
	})
}

func (s *fastJSON) delta(d *openAIDelta) bool {
	if s.Null() {
		return true
	}
	var f fields
	dup := false
	return s.Members(func(key []byte) bool {
		switch {
		case f.is(key, 0, "content", &dup):
			return !dup && s.text(&d.Content)
		case f.is(key, 1, "refusal", &dup):
			return !dup && s.text(&d.Refusal)
		case f.is(key, 2, "reasoning_content", &dup):
			return !dup && s.text(&d.ReasoningContent)
		case f.is(key, 3, "tool_calls", &dup):
			return !dup && s.toolCalls(d)
		}
		return s.skip()
	})
}

func (s *fastJSON) toolCalls(d *openAIDelta) bool {
	return arrayOf(s, &d.ToolCalls, func(tc *openAIToolCall) bool {
		var f fields
		dup := false
		return s.Members(func(key []byte) bool {
			if !f.is(key, 0, "function", &dup) {
				return s.skip()
			}
			if dup || s.Null() {
				return !dup
			}
			var g fields
			return s.Members(func(key []byte) bool {
				switch {
				case g.is(key, 0, "name", &dup):
					return !dup && s.text(&tc.Function.Name)
				case g.is(key, 1, "arguments", &dup):
					return !dup && s.text(&tc.Function.Arguments)
				}
				return s.skip()
			})
		})
	})
}

func (s *fastJSON) usage(a *openAIAnswer) bool {
	if s.Null() {
		a.Usage = nil
		return true
	}
	a.Usage = &openAIUsage{}
	var f fields
	dup := false
	return s.Members(func(key []byte) bool {
		switch {
		case f.is(key, 0, "prompt_tokens", &dup):
			return !dup && s.int(&a.Usage.PromptTokens)
		case f.is(key, 1, "completion_tokens", &dup):
			return !dup && s.int(&a.Usage.CompletionTokens)
		}
		return s.skip()
	})
}
