package jsonwire

import (
	"strconv"
	"testing"
)

// The readers by table (Raw, Int, white space) against the byte-by-byte
// readers they replaced, kept here as the reference: same verdict, same
// value, same bytes consumed when they succeed.

func refSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func refRaw(b []byte) (string, int, bool) {
	i := refSpace(b, 0)
	if i == len(b) || b[i] != '"' {
		return "", 0, false
	}
	i++
	start := i
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return string(b[start:i]), i + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", 0, false
		}
		i++
	}
	return "", 0, false
}

func refInt(b []byte) (int64, int, bool) {
	i := refSpace(b, 0)
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	n := i - digits
	if n == 0 || n > 18 || (n > 1 && b[digits] == '0') {
		return 0, 0, false
	}
	v, err := strconv.ParseInt(string(b[start:i]), 10, 64)
	return v, i, err == nil
}

func FuzzScalars(f *testing.F) {
	for _, s := range []string{
		`"tenant-1"`, ` "a b"`, `"\u0041"`, `"a\"b"`, "\"caf\xc3\xa9\"", "\"\x1f\"", `"open`, `""`,
		`0`, `-0`, `007`, `-`, ` 42,`, `123456789012345678`, `1234567890123456789`, `-999999999999999999`, `1.5`, `1e3`, "\t\r\n 7",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := New(b)
		got, ok := s.Raw()
		want, end, wantOK := refRaw(b)
		if ok != wantOK || (ok && (string(got) != want || s.Pos() != end)) {
			t.Fatalf("Raw(%q) = %q %v at %d, want %q %v at %d", b, got, ok, s.Pos(), want, wantOK, end)
		}
		s = New(b)
		v, ok := s.Int()
		wantV, end, wantOK := refInt(b)
		if ok != wantOK || (ok && (v != wantV || s.Pos() != end)) {
			t.Fatalf("Int(%q) = %d %v at %d, want %d %v at %d", b, v, ok, s.Pos(), wantV, wantOK, end)
		}
		s = New(b)
		s.space()
		if want := refSpace(b, 0); s.Pos() != want {
			t.Fatalf("space(%q) stops at %d, want %d", b, s.Pos(), want)
		}
	})
}

// answer is a decision answer as a node writes it.
var answer = []byte(`{"allowed":true,"lease":"AgHJgK2Kj5i2q9YBAAp5MTIzNDUtNDU2AAJuMXl0_JbCbJlWRfUQnCL0OqnR8SxiEkKCDmiBSj5yVCyMuw","reserved_tokens":200,"limits":{"requests":{"limit":100000000,"remaining":99999123,"reset_ms":60000},"tokens":{"limit":100000000000,"remaining":99999824600,"reset_ms":60000},"concurrency":{"limit":100000,"remaining":99123,"reset_ms":0}},"owner":"node-1"}`)

// BenchmarkSkipAnswer reads a decision answer as a client does: its
// "allowed", every other value skipped.
func BenchmarkSkipAnswer(b *testing.B) {
	for b.Loop() {
		s := New(answer)
		allowed := false
		ok := s.Object(func(key []byte) bool {
			if string(key) == "allowed" {
				var ok bool
				allowed, ok = s.Bool()
				return ok
			}
			_, ok := s.Skip(3)
			return ok
		}) && s.End()
		if !ok || !allowed {
			b.Fatal("not read")
		}
	}
}
