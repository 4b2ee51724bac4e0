package prompt

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizers of the two encodings: what tiktoken's split patterns
// (regular expressions run by a backtracking engine) match, written out.
// Each function takes valid UTF-8 s and a rune boundary i < len(s) and
// returns the end of the piece the pattern matches at i: always past i,
// since every rune starts some alternative. bpe_test.go checks them
// against tiktoken-go's patterns, rune class by rune class and on random
// and fuzzed text.
//
// The classes, as the patterns name them: \s is unicode.IsSpace, \p{L} a
// letter, \p{N} a number, \p{M} a mark.

// splitCL100K is cl100k_base's pattern:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitCL100K(s string, i int) int {
	if e := contraction(s, i); e > i {
		return e
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if e := run(s, i, unicode.IsLetter); e > i { // \p{L}+
		return e
	}
	if prefix(r) && i+w < len(s) { // [^\r\n\p{L}\p{N}]\p{L}+
		if e := run(s, i+w, unicode.IsLetter); e > i+w {
			return e
		}
	}
	if e := other(s, i, r, w, false); e > i {
		return e
	}
	return spaces(s, i)
}

// splitO200K is o200k_base's pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Its first two alternatives are tried with the optional first rune taken,
// then without it (which differs only when that rune is a mark).
func splitO200K(s string, i int) int {
	r, w := utf8.DecodeRuneInString(s[i:])
	for _, alt := range [...]func(string, int) int{upperLower, upperFirst} {
		if prefix(r) && i+w < len(s) {
			if e := alt(s, i+w); e > i+w {
				return e
			}
		}
		if e := alt(s, i); e > i {
			return e
		}
	}
	if e := other(s, i, r, w, true); e > i {
		return e
	}
	return spaces(s, i)
}

// upperLower matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+
// and an optional contraction at i; i when it does not. The greedy upper run
// gives back runes until a lower one can follow it: the lower run starts at
// the run's end if a lower rune is there, else at the last lower rune inside
// the run (the runes after it are not lower, so the lower run is that rune).
func upperLower(s string, i int) int {
	u := run(s, i, isUpper)
	if e := run(s, u, isLower); e > u {
		return contraction(s, e)
	}
	for k := u; k > i; {
		r, w := utf8.DecodeLastRuneInString(s[:k])
		if isLower(r) {
			return contraction(s, k)
		}
		k -= w
	}
	return i
}

// upperFirst matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*
// and an optional contraction at i; i when it does not.
func upperFirst(s string, i int) int {
	u := run(s, i, isUpper)
	if u == i {
		return i
	}
	return contraction(s, run(s, u, isLower))
}

// other matches \p{N}{1,3}, then ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with slash,
// [\r\n/]*) at i, whose rune r is w bytes long; i when neither does.
func other(s string, i int, r rune, w int, slash bool) int {
	if unicode.IsNumber(r) {
		e := i + w
		for range 2 {
			r, w := utf8.DecodeRuneInString(s[e:])
			if e == len(s) || !unicode.IsNumber(r) {
				break
			}
			e += w
		}
		return e
	}
	start := i
	if r == ' ' {
		start = i + 1
	}
	e := run(s, start, isOther)
	if e == start {
		return i
	}
	for e < len(s) && (s[e] == '\r' || s[e] == '\n' || (slash && s[e] == '/')) {
		e++
	}
	return e
}

// spaces matches \s*[\r\n]+, then \s+(?!\S), then \s+ at i, a space: the
// space run up to its last line break, else the run but its last rune when
// a non-space follows the run, else the whole run.
func spaces(s string, i int) int {
	e := run(s, i, unicode.IsSpace)
	for k := e; k > i; k-- { // line breaks are one byte
		if s[k-1] == '\r' || s[k-1] == '\n' {
			return k
		}
	}
	if e < len(s) {
		if _, w := utf8.DecodeLastRuneInString(s[:e]); e-w > i {
			return e - w
		}
	}
	return e
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	switch s[i+1] | 0x20 { // ASCII lower case; no other rune folds to these
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && s[i+2]|0x20 == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && s[i+2]|0x20 == 'l' {
			return i + 3
		}
	}
	return i
}

// run returns the end of the run of runes in class from i.
func run(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !class(r) {
			break
		}
		i += w
	}
	return i
}

// prefix is [^\r\n\p{L}\p{N}]: the optional rune before a word.
func prefix(r rune) bool {
	return r != '\r' && r != '\n' && !unicode.IsLetter(r) && !unicode.IsNumber(r)
}

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }

// isUpper is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}].
func isUpper(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

// isLower is [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isLower(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}
