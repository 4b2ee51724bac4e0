// Package jsonwire reads and writes the decision API's JSON without
// reflection. Scanner reads the subset the API's bodies and answers use on
// the wire (objects of known keys, printable ASCII strings without escapes,
// integers, booleans); every method reports false for anything outside it,
// and the caller hands the whole text to encoding/json instead: the subset
// is chosen so that whatever it reads, encoding/json reads to the same
// values. Beside its fields a text may carry others of any JSON, which
// Any skips or keeps raw and Members lets through (any keys, repeats
// included), for decoders of other parties' JSON (an LLM's answers, a
// client's request to the proxy). Decoder, above the Scanner, reads an
// object into a struct by a table of its fields (fields.go): the one JSON
// decoder of the decision API, the proxy and the client, fuzzed here
// against encoding/json (FuzzDecoder). AppendString writes a string
// exactly as encoding/json does.
package jsonwire

import "encoding/json"

// AppendString appends s as a JSON string, byte for byte as encoding/json
// writes it (which escapes <, > and & too).
func AppendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// MaxKeys bounds the keys of one object: a repeated key must be found
// (encoding/json merges repeated keys; the scanner refuses them).
const MaxKeys = 16

// Scanner reads JSON from a byte slice. The zero value reads nothing; use
// New.
type Scanner struct {
	b []byte
	i int
}

// New returns a Scanner of b.
func New(b []byte) Scanner { return Scanner{b: b} }

// Pos is the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.i }

func (s *Scanner) space() {
	b, i := s.b, s.i // locals: the loop keeps them in registers
	for i < len(b) && class[b[i]]&blank != 0 {
		i++
	}
	s.i = i
}

// The classes of a byte, by table: one load a byte in the loops that read
// white space and strings. A space is both.
const (
	blank = 1 << iota // JSON white space: ' ', '\t', '\n', '\r'
	plain             // taken as it is inside a string: printable ASCII but '"' and '\\'
)

var class = func() (t [256]uint8) {
	for c := 0x20; c < 0x7f; c++ {
		if c != '"' && c != '\\' {
			t[c] = plain
		}
	}
	for _, c := range []byte(" \t\n\r") {
		t[c] |= blank
	}
	return t
}()

// Byte consumes c, after white space.
func (s *Scanner) Byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// Peek returns the next byte after white space, 0 at the end.
func (s *Scanner) Peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Raw reads a string of printable ASCII without escapes (which
// encoding/json decodes to the same bytes) and returns its bytes, in place.
func (s *Scanner) Raw() ([]byte, bool) {
	if !s.Byte('"') {
		return nil, false
	}
	b, start := s.b, s.i
	i := start + PlainLen(b[start:])
	if i == len(b) || b[i] != '"' {
		s.i = i
		return nil, false // an escape, a control or non-ASCII byte, or the end
	}
	s.i = i + 1
	return b[start:i], true
}

// PlainLen is the length of b's longest prefix of bytes that a string
// carries as they are (printable ASCII but '"' and '\\'): where a string
// of the subset ends, at its closing quote.
func PlainLen(b []byte) int {
	for i, c := range b {
		if class[c]&plain == 0 {
			return i
		}
	}
	return len(b)
}

// String reads a string as Raw does, as a string.
func (s *Scanner) String() (string, bool) {
	b, ok := s.Raw()
	return string(b), ok
}

// Int reads an integer as encoding/json decodes it into an int64: no
// leading zero, at most 18 digits (so never out of range). A fraction or
// an exponent after it is not a ',', '}' or ']': the caller fails there.
func (s *Scanner) Int() (int64, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	b, digits := s.b, s.i
	i := digits
	var v int64 // 18 digits at most fit: a longer run is refused below
	for i < len(b) && b[i]-'0' <= 9 {
		v = v*10 + int64(b[i]-'0')
		i++
	}
	s.i = i
	n := i - digits
	if n == 0 || n > 18 || (n > 1 && b[digits] == '0') {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// Bool reads true or false.
func (s *Scanner) Bool() (v, ok bool) {
	s.space()
	rest := s.b[s.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		s.i += 4
		return true, true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		s.i += 5
		return false, true
	}
	return false, false
}

// Object reads {"key": value, ...}, calling field for each key, which
// reads the value. A repeated key, or more than MaxKeys, is refused.
func (s *Scanner) Object(field func(key []byte) bool) bool {
	var seen [MaxKeys][]byte
	n := 0
	return s.Members(func(key []byte) bool {
		if n == MaxKeys {
			return false
		}
		for _, k := range seen[:n] {
			if string(k) == string(key) {
				return false
			}
		}
		seen[n] = key
		n++
		return field(key)
	})
}

// Members reads {"key": value, ...} as Object does, but takes any number of
// keys and repeats: the caller judges them (encoding/json merges a repeated
// key, the last value winning).
func (s *Scanner) Members(field func(key []byte) bool) bool {
	if !s.Byte('{') {
		return false
	}
	if s.Byte('}') {
		return true
	}
	for {
		key, ok := s.Raw()
		if !ok || !s.Byte(':') || !field(key) {
			return false
		}
		if s.Byte('}') {
			return true
		}
		if !s.Byte(',') {
			return false
		}
	}
}

// Array reads [value, ...], calling elem for each value, which reads it.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Byte('[') {
		return false
	}
	if s.Byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Byte(']') {
			return true
		}
		if !s.Byte(',') {
			return false
		}
	}
}

// Skip reads one value of the subset (objects nested at most depth deep)
// and returns its bytes, in place.
func (s *Scanner) Skip(depth int) ([]byte, bool) {
	s.space()
	start := s.i
	var ok bool
	switch c := s.Peek(); {
	case c == '"':
		_, ok = s.Raw()
	case c == '{' && depth > 0:
		ok = s.Object(func([]byte) bool { _, ok := s.Skip(depth - 1); return ok })
	case c == 't' || c == 'f':
		_, ok = s.Bool()
	default:
		_, ok = s.Int()
	}
	return s.b[start:s.i], ok
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.space()
	return s.i == len(s.b)
}
