package gossip

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// Meta is the metadata a node gossips about itself. The gossip layer
// carries it and does not interpret it.
type Meta struct {
	HTTP string // client API, LLM proxy and admin address
	Peer string // node-to-node protocol address

	// BootID is different every time the process starts, so that peers
	// can tell a restarted node (which has lost its in-memory state) from
	// one that only went quiet. Start fills an empty one with 16 random
	// hex digits.
	BootID string

	// Leaving says the node is draining: it stays a member, answers and
	// hands its state on, but owns nothing in the ring any more. Encoded
	// after the three strings as one byte (1 = leaving); older decoders
	// ignore it.
	Leaving bool

	// Departed says the node has finished draining: it handed everything
	// on and is about to leave the gossip cluster, so its absence from
	// then on is a departure, not a crash or a cut. It comes with
	// Leaving. Encoded as a second flag byte (1 = departed) after the
	// leaving byte, which stays 1: a decoder that knows only Leaving
	// (which it reads as that byte being exactly 1) still sees a leaving
	// member, and ignores the byte after.
	Departed bool

	// LimitsHash identifies the limits the node admits with (see
	// config.Config.LimitsHash), so that members with other limits can be
	// told apart; empty when unknown (an older node). Encoded after the
	// two flag bytes, which are then always written, as a uvarint length
	// and its bytes: older decoders read the flags as before and ignore
	// it.
	LimitsHash string
}

// metaVersion is the first byte of an encoded Meta. A later version may
// append fields; decoders ignore bytes after the fields they know, so only
// an incompatible change needs a new version.
const metaVersion = 1

// bootIDLen is the length of a generated BootID.
const bootIDLen = 16

// encode returns the compact encoding of m: the version byte, then each
// field as a uvarint length and its bytes.
func (m Meta) encode() []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen16+len(m.HTTP)+len(m.Peer)+len(m.BootID))
	b = append(b, metaVersion)
	for _, s := range []string{m.HTTP, m.Peer, m.BootID} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	switch {
	case m.LimitsHash != "":
		b = append(b, flagByte(m.Leaving), flagByte(m.Departed))
		b = binary.AppendUvarint(b, uint64(len(m.LimitsHash)))
		b = append(b, m.LimitsHash...)
	case m.Departed:
		b = append(b, flagByte(m.Leaving), 1)
	case m.Leaving:
		b = append(b, 1)
	}
	return b
}

var errShortMeta = errors.New("truncated")

// decodeMeta is the inverse of encode.
func decodeMeta(b []byte) (Meta, error) {
	if len(b) == 0 {
		return Meta{}, errors.New("gossip: decode meta: empty")
	}
	if b[0] != metaVersion {
		return Meta{}, fmt.Errorf("gossip: decode meta: unknown version %d", b[0])
	}
	b = b[1:]
	var fields [3]string
	for i := range fields {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return Meta{}, fmt.Errorf("gossip: decode meta: field %d: %w", i, errShortMeta)
		}
		fields[i] = string(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	m := Meta{HTTP: fields[0], Peer: fields[1], BootID: fields[2],
		Leaving: len(b) > 0 && b[0] == 1, Departed: len(b) > 1 && b[1] == 1}
	if len(b) > 2 {
		b = b[2:]
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return Meta{}, fmt.Errorf("gossip: decode meta: limits hash: %w", errShortMeta)
		}
		m.LimitsHash = string(b[k : k+int(n)])
	}
	return m, nil
}

// flagByte encodes a flag.
func flagByte(on bool) byte {
	if on {
		return 1
	}
	return 0
}

// newBootID returns bootIDLen random hex digits.
func newBootID() string {
	var b [bootIDLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails, per crypto/rand
	return hex.EncodeToString(b[:])
}
