package gossip

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestMetaRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := Meta{
			HTTP:     rapid.String().Draw(t, "http"),
			Peer:     rapid.String().Draw(t, "peer"),
			BootID:   rapid.String().Draw(t, "boot"),
			Leaving:  rapid.Bool().Draw(t, "leaving"),
			Departed: rapid.Bool().Draw(t, "departed"),
		}
		flags := 0 // bytes after the strings: none, the leaving byte, or it and the departed byte
		switch {
		case m.Departed:
			flags = 2
		case m.Leaving:
			flags = 1
		}
		b := m.encode()
		if want := 1 + 3 + len(m.HTTP) + len(m.Peer) + len(m.BootID) + flags; len(m.HTTP) < 128 && len(m.Peer) < 128 && len(m.BootID) < 128 && len(b) != want {
			t.Fatalf("encoding of %+v is %d bytes, want %d", m, len(b), want)
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", m, got, err)
		}
		// A later version may append fields (after the flags it knows,
		// which it then always writes).
		if flags == 0 {
			b = append(b, 0, 0)
		} else if flags == 1 {
			b = append(b, 0)
		}
		got, err = decodeMeta(append(b, 0xff, 0x01))
		if err != nil || got != m {
			t.Fatalf("with trailing bytes: %+v, %v", got, err)
		}
		// Every truncation of the strings is an error, not a panic or a
		// wrong value.
		for i := range len(b) - 2 {
			if got, err := decodeMeta(b[:i]); err == nil {
				t.Fatalf("decode of %d of %d bytes = %+v, no error", i, len(b), got)
			}
		}
	})
}

func TestMetaGarbage(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")
		// Most random bytes fail the version check: also damage real
		// encodings, so that garbage gets as far as the fields.
		valid := Meta{HTTP: rapid.StringN(0, 4, -1).Draw(t, "http"), Peer: rapid.StringN(0, 4, -1).Draw(t, "peer"),
			BootID: rapid.StringN(0, 4, -1).Draw(t, "boot"), Leaving: rapid.Bool().Draw(t, "leaving"),
			Departed: rapid.Bool().Draw(t, "departed")}.encode()
		switch rapid.IntRange(0, 3).Draw(t, "garbage") {
		case 1: // versioned random bytes
			b = append([]byte{metaVersion}, b...)
		case 2: // a real encoding with one byte changed, then random bytes
			valid[rapid.IntRange(1, len(valid)-1).Draw(t, "at")] = rapid.Byte().Draw(t, "to")
			b = append(valid, b...)
		case 3: // a real encoding cut short, then random bytes
			b = append(valid[:rapid.IntRange(1, len(valid)).Draw(t, "cut")], b...)
		}
		m, err := decodeMeta(b) // must not panic
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gossip: decode meta") {
				t.Fatalf("decodeMeta(%v) = %v, not a decode meta error", b, err)
			}
			return
		}
		// What garbage decodes to re-encodes to an equal Meta.
		if got, err := decodeMeta(m.encode()); err != nil || got != m {
			t.Fatalf("decodeMeta(%v) = %+v, re-encoded and decoded %+v, %v", b, m, got, err)
		}
		// Fields end where their lengths say, not where the input ends: more
		// bytes after it (a later version's fields) change no field, and
		// do not undo Leaving.
		more := append(append([]byte(nil), b...), rapid.SliceOfN(rapid.Byte(), 1, 8).Draw(t, "more")...)
		got, err := decodeMeta(more)
		if err != nil || got.HTTP != m.HTTP || got.Peer != m.Peer || got.BootID != m.BootID {
			t.Fatalf("decodeMeta(%v) = %+v, with bytes appended %+v, %v", b, m, got, err)
		}
		if m.Leaving && !got.Leaving || m.Departed && !got.Departed {
			t.Fatalf("decodeMeta(%v) = %+v, with bytes appended %+v", b, m, got)
		}
	})
	for _, b := range [][]byte{nil, {}, {2, 0, 0, 0}, {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {1, 5, 'a'}} {
		if _, err := decodeMeta(b); err == nil || !strings.HasPrefix(err.Error(), "gossip: decode meta") {
			t.Fatalf("decodeMeta(%v) = %v", b, err)
		}
	}
}

// A departed member is a leaving one to a decoder that knows only
// Leaving: its flag byte is the leaving byte, exactly 1, with the
// departed byte after it, which such a decoder ignores.
func TestMetaDepartedIsLeavingToOlderDecoders(t *testing.T) {
	m := Meta{HTTP: "h:1", Peer: "p:2", BootID: "b", Leaving: true, Departed: true}
	b := m.encode()
	fields := len(Meta{HTTP: m.HTTP, Peer: m.Peer, BootID: m.BootID}.encode())
	if len(b) != fields+2 || b[fields] != 1 || b[fields+1] != 1 {
		t.Fatalf("encode(%+v) = %v: want the strings' %d bytes, then 1 (leaving), then 1 (departed)", m, b, fields)
	}
	// What a decoder that stops after the leaving byte reads.
	got, err := decodeMeta(b[:fields+1])
	if want := (Meta{HTTP: m.HTTP, Peer: m.Peer, BootID: m.BootID, Leaving: true}); err != nil || got != want {
		t.Fatalf("decodeMeta without the departed byte = %+v, %v; want %+v", got, err, want)
	}
	// Departed without Leaving (never set by Cluster) still round-trips.
	only := Meta{Departed: true}
	if got, err := decodeMeta(only.encode()); err != nil || got != only {
		t.Fatalf("decodeMeta(encode(%+v)) = %+v, %v", only, got, err)
	}
}

func TestNewBootID(t *testing.T) {
	a, b := newBootID(), newBootID()
	if len(a) != bootIDLen || a == b {
		t.Fatalf("newBootID() = %q, %q", a, b)
	}
}
