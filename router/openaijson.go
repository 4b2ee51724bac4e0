package router

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
	s := fastJSON{b: b}
	if s.peek() != '{' || !s.answer(a) {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

// fastJSON reads JSON from b.
type fastJSON struct {
	b []byte
	i int
}

func (s *fastJSON) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// peek returns the next byte after white space, 0 at the end.
func (s *fastJSON) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// literal reads word (true, false or null).
func (s *fastJSON) literal(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// null reads a null, if one is next.
func (s *fastJSON) null() bool { return s.peek() == 'n' && s.literal("null") }

// str reads a string of printable ASCII without escapes, whose bytes are
// its value, and returns them; any other string is not read.
func (s *fastJSON) str() ([]byte, bool) {
	if s.peek() != '"' {
		return nil, false
	}
	s.i++
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < ' ' || c > '~' || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// skipString reads any valid JSON string, escapes and bytes past ASCII
// included (as encoding/json's scanner takes them).
func (s *fastJSON) skipString() bool {
	if s.peek() != '"' {
		return false
	}
	for s.i++; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return true
		case c < ' ':
			return false
		case c == '\\':
			if s.i++; s.i == len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-s.i < 5 || !hex4(s.b[s.i+1:s.i+5]) {
					return false
				}
				s.i += 4
			default:
				return false
			}
		}
	}
	return false
}

func hex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// raw reads any value and returns its bytes, in place.
func (s *fastJSON) raw() ([]byte, bool) {
	s.space()
	start := s.i
	ok := s.skip(maxFastDepth)
	return s.b[start:s.i], ok
}

// number reads a JSON number; integer says it had no fraction or
// exponent.
func (s *fastJSON) number() (integer, ok bool) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false, false
	}
	integer = true
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false, false
		}
		integer = false
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false, false
		}
		integer = false
	}
	return integer, s.i > start
}

func (s *fastJSON) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

// int reads an integer into v as encoding/json decodes one into an int64
// (at most 18 digits: never out of range), or a null, which leaves v.
func (s *fastJSON) int(v *int64) bool {
	if s.null() {
		return true
	}
	start := s.i
	integer, ok := s.number()
	if !ok || !integer {
		return false
	}
	digits, neg := s.b[start:s.i], false
	if digits[0] == '-' {
		digits, neg = digits[1:], true
	}
	if len(digits) > 18 {
		return false
	}
	var n int64
	for _, c := range digits {
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	*v = n
	return true
}

// text reads a string into v, or a null, which leaves v.
func (s *fastJSON) text(v *string) bool {
	if s.null() {
		return true
	}
	b, ok := s.str()
	if ok {
		*v = string(b)
	}
	return ok
}

// skip reads any value, depth levels of nesting at most.
func (s *fastJSON) skip(depth int) bool {
	switch c := s.peek(); {
	case c == '"':
		return s.skipString()
	case c == '{' && depth > 0:
		return s.object(func([]byte) bool { return s.skip(depth - 1) })
	case c == '[' && depth > 0:
		return s.array(func() bool { return s.skip(depth - 1) })
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		_, ok := s.number()
		return ok
	}
	return false
}

// object reads {"key": value, ...}, calling field for each key, which
// reads the value.
func (s *fastJSON) object(field func(key []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.str()
		if !ok || s.peek() != ':' {
			return false
		}
		s.i++
		if !field(key) {
			return false
		}
		switch s.peek() {
		case '}':
			s.i++
			return true
		case ',':
			s.i++
		default:
			return false
		}
	}
}

// array reads [value, ...], calling elem for each value, which reads it.
func (s *fastJSON) array(elem func() bool) bool {
	if s.peek() != '[' {
		return false
	}
	s.i++
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch s.peek() {
		case ']':
			s.i++
			return true
		case ',':
			s.i++
		default:
			return false
		}
	}
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
	return s.object(func(key []byte) bool {
		switch {
		case f.is(key, 0, "choices", &dup):
			return !dup && s.choices(a)
		case f.is(key, 1, "usage", &dup):
			return !dup && s.usage(a)
		}
		return s.skip(maxFastDepth)
	})
}

// arrayOf reads an array of objects into *xs as encoding/json fills a
// slice: null leaves nil, [] an empty slice that is not nil, a null element
// the zero T; elem reads each element that is an object into its slot.
func arrayOf[T any](s *fastJSON, xs *[]T, elem func(x *T) bool) bool {
	if s.null() {
		*xs = nil
		return true
	}
	*xs = []T{}
	return s.array(func() bool {
		*xs = append(*xs, *new(T))
		return s.null() || elem(&(*xs)[len(*xs)-1])
	})
}

func (s *fastJSON) choices(a *openAIAnswer) bool {
	return arrayOf(s, &a.Choices, func(c *openAIChoice) bool {
		var f fields
		dup := false
		return s.object(func(key []byte) bool {
			switch {
			case f.is(key, 0, "message", &dup):
				return !dup && s.delta(&c.Message)
			case f.is(key, 1, "delta", &dup):
				return !dup && s.delta(&c.Delta)
			}
			return s.skip(maxFastDepth)
		})
	})
}

func (s *fastJSON) delta(d *openAIDelta) bool {
	if s.null() {
		return true
	}
	var f fields
	dup := false
	return s.object(func(key []byte) bool {
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
		return s.skip(maxFastDepth)
	})
}

func (s *fastJSON) toolCalls(d *openAIDelta) bool {
	return arrayOf(s, &d.ToolCalls, func(tc *openAIToolCall) bool {
		var f fields
		dup := false
		return s.object(func(key []byte) bool {
			if !f.is(key, 0, "function", &dup) {
				return s.skip(maxFastDepth)
			}
			if dup || s.null() {
				return !dup
			}
			var g fields
			return s.object(func(key []byte) bool {
				switch {
				case g.is(key, 0, "name", &dup):
					return !dup && s.text(&tc.Function.Name)
				case g.is(key, 1, "arguments", &dup):
					return !dup && s.text(&tc.Function.Arguments)
				}
				return s.skip(maxFastDepth)
			})
		})
	})
}

func (s *fastJSON) usage(a *openAIAnswer) bool {
	if s.null() {
		a.Usage = nil
		return true
	}
	a.Usage = &openAIUsage{}
	var f fields
	dup := false
	return s.object(func(key []byte) bool {
		switch {
		case f.is(key, 0, "prompt_tokens", &dup):
			return !dup && s.int(&a.Usage.PromptTokens)
		case f.is(key, 1, "completion_tokens", &dup):
			return !dup && s.int(&a.Usage.CompletionTokens)
		}
		return s.skip(maxFastDepth)
	})
}
