package descriptors

import (
	"strconv"
	"strings"
)

// keyPrefix starts every limiter key of a descriptor, apart from the
// router's keys (t:, g:, p:).
const keyPrefix = "d:"

// Key returns the limiter key of a descriptor: one key per domain and list of
// entries, and a different key for any other (Key is injective; ParseKey is
// its inverse). Keys, values and the domain may hold any bytes: each is
// written after its length,
//
//	d:<len>:<domain>{/<len>:<key>=<len>:<value>}
//
// with lengths in decimal (no leading zeros), e.g.
// "d:9:messaging/9:to_number=10:2061111111". The caller leaves out the
// request-id entry; MatchKey does that and the share_threshold rule.
func Key(domain string, entries []Entry) string {
	n := len(keyPrefix) + fieldLen(domain)
	for _, e := range entries {
		n += 2 + fieldLen(e.Key) + fieldLen(e.Value)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(keyPrefix)
	writeField(&b, domain)
	for _, e := range entries {
		b.WriteByte('/')
		writeField(&b, e.Key)
		b.WriteByte('=')
		writeField(&b, e.Value)
	}
	return b.String()
}

// fieldLen is the length of s written as a field.
func fieldLen(s string) int {
	digits := 1
	for n := len(s); n >= 10; n /= 10 {
		digits++
	}
	return digits + 1 + len(s)
}

// writeField writes s as a field: its length, ':', s.
func writeField(b *strings.Builder, s string) {
	var num [20]byte
	b.Write(strconv.AppendUint(num[:0], uint64(len(s)), 10))
	b.WriteByte(':')
	b.WriteString(s)
}

// ParseKey returns the domain and entries of a key Key returned; ok is false
// for any string Key does not return. The strings returned share key's
// memory.
func ParseKey(key string) (domain string, entries []Entry, ok bool) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return "", nil, false
	}
	if domain, rest, ok = readField(rest); !ok {
		return "", nil, false
	}
	for rest != "" {
		var e Entry
		if rest[0] != '/' {
			return "", nil, false
		}
		if e.Key, rest, ok = readField(rest[1:]); !ok || rest == "" || rest[0] != '=' {
			return "", nil, false
		}
		if e.Value, rest, ok = readField(rest[1:]); !ok {
			return "", nil, false
		}
		entries = append(entries, e)
	}
	return domain, entries, true
}

// readField reads a field from the start of s: a length in decimal without
// leading zeros, ':', and that many bytes.
func readField(s string) (field, rest string, ok bool) {
	i, n := 0, 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if i > 0 && n == 0 {
			return "", "", false // a leading zero
		}
		n = 10*n + int(s[i]-'0')
		if n > len(s) {
			return "", "", false // longer than the key, and no overflow
		}
	}
	if i == 0 || i == len(s) || s[i] != ':' || len(s)-i-1 < n {
		return "", "", false
	}
	s = s[i+1:]
	return s[:n], s[n:], true
}
