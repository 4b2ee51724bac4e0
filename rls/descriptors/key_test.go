package descriptors

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		domain  string
		entries []Entry
		key     string
	}{
		{"messaging", es("to_number", "2061111111"), "d:9:messaging/9:to_number=10:2061111111"},
		{"d", nil, "d:1:d"},
		{"", es("", ""), "d:0:/0:=0:"},
		{"a/b", es("k=1", "v/2", "x", ""), "d:3:a/b/3:k=1=3:v/2/1:x=0:"},
		{"d", es(strings.Repeat("k", 12), "\x00\xff"), "d:1:d/12:kkkkkkkkkkkk=2:\x00\xff"},
	} {
		key := Key(tc.domain, tc.entries)
		if key != tc.key {
			t.Errorf("Key(%q, %v) = %q, want %q", tc.domain, tc.entries, key, tc.key)
		}
		domain, entries, ok := ParseKey(key)
		if !ok || domain != tc.domain || !slices.Equal(entries, tc.entries) {
			t.Errorf("ParseKey(%q) = %q %v %v", key, domain, entries, ok)
		}
	}
	// Descriptors that differ only in how their bytes split into fields.
	pairs := [][2][]Entry{
		{es("a", "b"), es("a=1:b", "")},
		{es("a", "b", "c", "d"), es("a", "b/1:c=1:d")},
		{es("a_b", "c"), es("a", "b_c")},
		{nil, es("", "")},
	}
	for _, p := range pairs {
		if Key("d", p[0]) == Key("d", p[1]) {
			t.Errorf("%v and %v share key %q", p[0], p[1], Key("d", p[0]))
		}
	}
	for _, bad := range []string{
		"", "d:", "d:1", "d:1:", "d:2:a", "t:1:a", "d:01:a", "d:1:a/", "d:1:a/1:k", "d:1:a/1:k=", "d:1:a/1:k=1:",
		"d:1:a/1:k=1:vv", "d:1:a/1:k:1:v", "d:1:a1:k=1:v", "d:-1:a", "d:+1:a", "d:1a:a", "d:00:",
		"d:99999999999999999999999:a", "d:1:a/0:=00:",
	} {
		if d, e, ok := ParseKey(bad); ok {
			t.Errorf("ParseKey(%q) = %q %v, want refused", bad, d, e)
		}
	}
}

// entriesFrom splits fuzz bytes into entries at 0xff bytes, key and value
// alternating, so that any list of strings can come out.
func entriesFrom(data []byte) []Entry {
	parts := bytes.Split(data, []byte{0xff})
	var out []Entry
	for i := 0; i+1 < len(parts); i += 2 {
		out = append(out, Entry{Key: string(parts[i]), Value: string(parts[i+1])})
	}
	return out
}

// FuzzKey checks Key is injective: two descriptors with the same key are
// the same descriptor, and ParseKey gives it back. It also checks ParseKey
// refuses every string Key does not return.
func FuzzKey(f *testing.F) {
	f.Add("d", []byte("a\xffb"), "d", []byte("a\xffb"))
	f.Add("d", []byte("a\xffb"), "d", []byte("a=1:b\xff"))
	f.Add("", []byte("\xff"), "", []byte(""))
	f.Add("a/b", []byte("k=1\xffv/2\xffx\xff"), "a", []byte("b/3:k=1\xffv/2"))
	f.Fuzz(func(t *testing.T, d1 string, b1 []byte, d2 string, b2 []byte) {
		e1, e2 := entriesFrom(b1), entriesFrom(b2)
		k1, k2 := Key(d1, e1), Key(d2, e2)
		same := d1 == d2 && slices.Equal(e1, e2)
		if (k1 == k2) != same {
			t.Fatalf("Key(%q, %q) = %q, Key(%q, %q) = %q", d1, e1, k1, d2, e2, k2)
		}
		d, e, ok := ParseKey(k1)
		if !ok || d != d1 || !slices.Equal(e, e1) && len(e)+len(e1) > 0 {
			t.Fatalf("ParseKey(%q) = %q %q %v, want %q %q", k1, d, e, ok, d1, e1)
		}
		// Any string: ParseKey accepts only Key's output.
		for _, s := range []string{string(b1), d2, "d:" + string(b2)} {
			if d, e, ok := ParseKey(s); ok && Key(d, e) != s {
				t.Fatalf("ParseKey(%q) accepted %q %q, whose key is %q", s, d, e, Key(d, e))
			}
		}
	})
}
