package gossip

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestMetaRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := Meta{
			HTTP:   rapid.String().Draw(t, "http"),
			Peer:   rapid.String().Draw(t, "peer"),
			BootID: rapid.String().Draw(t, "boot"),
		}
		b := m.encode()
		if want := 1 + 3 + len(m.HTTP) + len(m.Peer) + len(m.BootID); len(m.HTTP) < 128 && len(m.Peer) < 128 && len(m.BootID) < 128 && len(b) != want {
			t.Fatalf("encoding of %+v is %d bytes, want %d", m, len(b), want)
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", m, got, err)
		}
		// A later version may append fields.
		got, err = decodeMeta(append(b, 0xff, 0x01))
		if err != nil || got != m {
			t.Fatalf("with trailing bytes: %+v, %v", got, err)
		}
		// Every truncation is an error, not a panic or a wrong value.
		for i := range len(b) {
			if got, err := decodeMeta(b[:i]); err == nil {
				t.Fatalf("decode of %d of %d bytes = %+v, no error", i, len(b), got)
			}
		}
	})
}

func TestMetaGarbage(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")
		_, _ = decodeMeta(b) // must not panic
	})
	for _, b := range [][]byte{nil, {}, {2, 0, 0, 0}, {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {1, 5, 'a'}} {
		if _, err := decodeMeta(b); err == nil || !strings.HasPrefix(err.Error(), "gossip: decode meta") {
			t.Fatalf("decodeMeta(%v) = %v", b, err)
		}
	}
}

func TestNewBootID(t *testing.T) {
	a, b := newBootID(), newBootID()
	if len(a) != bootIDLen || a == b {
		t.Fatalf("newBootID() = %q, %q", a, b)
	}
}
