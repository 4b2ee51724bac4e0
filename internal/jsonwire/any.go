package jsonwire

// Reading values outside the subset, to skip or keep them raw: text that
// carries, beside the fields a decoder reads, fields of any JSON (an LLM
// answer's other members, a request's other parameters).

// Null reads a null, if one is next.
func (s *Scanner) Null() bool {
	s.space()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// Any reads one valid JSON value of any kind (strings with escapes and
// bytes past ASCII, numbers with fractions and exponents, null), nested at
// most depth deep, and returns its bytes, in place. Object keys must be in
// the subset (Raw); an object with another key is not read.
func (s *Scanner) Any(depth int) ([]byte, bool) {
	s.space()
	start := s.i
	var ok bool
	switch c := s.Peek(); {
	case c == '"':
		ok = s.anyString()
	case c == '{' && depth > 0:
		ok = s.Members(func([]byte) bool { _, ok := s.Any(depth - 1); return ok })
	case c == '[' && depth > 0:
		ok = s.Array(func() bool { _, ok := s.Any(depth - 1); return ok })
	case c == 't' || c == 'f':
		_, ok = s.Bool()
	case c == 'n':
		ok = s.Null()
	case c == '-' || '0' <= c && c <= '9':
		ok = s.number()
	}
	return s.b[start:s.i], ok
}

// anyString reads any valid JSON string, escapes and bytes past ASCII
// included (as encoding/json's scanner takes them).
func (s *Scanner) anyString() bool {
	if !s.Byte('"') {
		return false
	}
	for ; s.i < len(s.b); s.i++ {
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

// number reads a JSON number: an integer part without leading zeros, an
// optional fraction, an optional exponent.
func (s *Scanner) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *Scanner) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}
