package gossip

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestMetaRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := Meta{
			HTTP:       rapid.String().Draw(t, "http"),
			Peer:       rapid.String().Draw(t, "peer"),
			BootID:     rapid.String().Draw(t, "boot"),
			Leaving:    rapid.Bool().Draw(t, "leaving"),
			Departed:   rapid.Bool().Draw(t, "departed"),
			LimitsHash: rapid.StringN(0, 20, -1).Draw(t, "limits"),
		}
		flags := 0 // bytes after the strings: none, the leaving byte, or it and the departed byte (and the hash)
		switch {
		case m.LimitsHash != "":
			flags = 2 + 1 + len(m.LimitsHash)
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
		// A later version may append fields (after the flags and the
		// hash it knows, which it then always writes).
		b = complete(m)
		got, err = decodeMeta(append(b, 0xff, 0x01))
		if err != nil || got != m {
			t.Fatalf("with trailing bytes: %+v, %v", got, err)
		}
		// Every truncation of the strings, or of the hash, is an error, not
		// a panic or a wrong value.
		fields := len(Meta{HTTP: m.HTTP, Peer: m.Peer, BootID: m.BootID}.encode())
		for i := range len(b) {
			if i >= fields && i <= fields+3 {
				continue // cut at the end of the strings, the flags or the hash's length
			}
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
			Departed: rapid.Bool().Draw(t, "departed"), LimitsHash: rapid.StringN(0, 4, -1).Draw(t, "limits")}.encode()
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
		// bytes after the complete encoding (a later version's fields)
		// change no field.
		more := append(complete(m), rapid.SliceOfN(rapid.Byte(), 1, 8).Draw(t, "more")...)
		got, err := decodeMeta(more)
		if err != nil || got != m {
			t.Fatalf("decodeMeta(%v) = %+v, with bytes appended %+v, %v", b, m, got, err)
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

// complete returns m's encoding with every field this version knows
// written: the two flag bytes and the hash, even when empty.
func complete(m Meta) []byte {
	b := Meta{HTTP: m.HTTP, Peer: m.Peer, BootID: m.BootID}.encode()
	b = append(b, flagByte(m.Leaving), flagByte(m.Departed))
	return append(binary.AppendUvarint(b, uint64(len(m.LimitsHash))), m.LimitsHash...)
}

// decodeMetaBeforeHash is decodeMeta as it was before LimitsHash: it reads
// the strings and the two flag bytes and ignores what follows.
func decodeMetaBeforeHash(b []byte) (Meta, error) {
	if len(b) == 0 || b[0] != metaVersion {
		return Meta{}, errors.New("bad version")
	}
	b = b[1:]
	var fields [3]string
	for i := range fields {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return Meta{}, errShortMeta
		}
		fields[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	return Meta{HTTP: fields[0], Peer: fields[1], BootID: fields[2],
		Leaving: len(b) > 0 && b[0] == 1, Departed: len(b) > 1 && b[1] == 1}, nil
}

// TestMetaLimitsHashOlderDecoders: a Meta with a LimitsHash decodes, with
// its flags intact, in a decoder that predates the hash, and round-trips in
// this one; a Meta without one encodes exactly as before.
func TestMetaLimitsHashOlderDecoders(t *testing.T) {
	for _, m := range []Meta{
		{HTTP: "h:1", Peer: "p:2", BootID: "b", LimitsHash: "0123456789abcdef"},
		{HTTP: "h:1", Peer: "p:2", BootID: "b", Leaving: true, LimitsHash: "0123456789abcdef"},
		{HTTP: "h:1", Peer: "p:2", BootID: "b", Leaving: true, Departed: true, LimitsHash: "0123456789abcdef"},
	} {
		b := m.encode()
		old, err := decodeMetaBeforeHash(b)
		want := m
		want.LimitsHash = ""
		if err != nil || old != want {
			t.Errorf("older decoder of %+v = %+v, %v; want %+v", m, old, err, want)
		}
		if got, err := decodeMeta(b); err != nil || got != m {
			t.Errorf("decodeMeta(encode(%+v)) = %+v, %v", m, got, err)
		}
		without := want.encode()
		if string(b[:len(b)-2-1-len(m.LimitsHash)]) != string(without[:len(b)-2-1-len(m.LimitsHash)]) {
			t.Errorf("encode(%+v) = %v does not start with the strings of %v", m, b, without)
		}
	}
	if b := (Meta{HTTP: "h", Peer: "p", BootID: "b"}).encode(); len(b) != 7 {
		t.Errorf("a Meta without hash or flags encodes to %v, want the 7 bytes of the strings", b)
	}
}

func TestNewBootID(t *testing.T) {
	a, b := newBootID(), newBootID()
	if len(a) != bootIDLen || a == b {
		t.Fatalf("newBootID() = %q, %q", a, b)
	}
}

// FuzzDecodeMeta: decodeMeta never panics, and what it decodes survives a
// round trip through the complete encoding, trailing bytes and all.
func FuzzDecodeMeta(f *testing.F) {
	f.Add(Meta{HTTP: "h:1", Peer: "p:2", BootID: "b", Leaving: true, LimitsHash: "0123456789abcdef"}.encode())
	f.Add(Meta{HTTP: "h:1"}.encode())
	f.Add([]byte{1, 0, 0, 0, 1, 1, 5, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if got, err := decodeMeta(append(complete(m), 0xff)); err != nil || got != m {
			t.Fatalf("decodeMeta(%v) = %+v; complete encoding decodes to %+v, %v", b, m, got, err)
		}
		if got, err := decodeMeta(m.encode()); err != nil || got != m {
			t.Fatalf("decodeMeta(%v) = %+v; re-encoded %+v, %v", b, m, got, err)
		}
	})
}
