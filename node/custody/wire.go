package custody

// The machine's messages on the wire.

import (
	"encoding/binary"
	"fmt"

	"github.com/tokenring/tokenring/node/internal/wire"
)

// AppendMsgs encodes messages for the State of one OpTransfer call (the
// shell carries them over the peer protocol): a uvarint count, then per
// message its kind, flags (1 held, 2 claiming), from, to, partition,
// epoch, round, state, gave-to and gave epoch.
func AppendMsgs(b []byte, msgs []Msg) []byte {
	b = binary.AppendUvarint(b, uint64(len(msgs)))
	for i := range msgs {
		m := &msgs[i]
		var flags byte
		if m.Held {
			flags |= 1
		}
		if m.Claiming {
			flags |= 2
		}
		b = append(b, byte(m.Kind), flags)
		b = wire.AppendString(b, m.From)
		b = wire.AppendString(b, m.To)
		b = binary.AppendUvarint(b, uint64(m.Part))
		b = binary.AppendUvarint(b, m.Epoch)
		b = binary.AppendUvarint(b, m.Round)
		b = wire.AppendString(b, string(m.State))
		b = wire.AppendString(b, m.GaveTo)
		b = binary.AppendUvarint(b, m.Gave)
	}
	return b
}

// maxMsgs bounds the messages of one OpTransfer call: a few per
// partition.
const maxMsgs = 1 << 16

// DecodeMsgs decodes what AppendMsgs encoded.
func DecodeMsgs(data []byte) ([]Msg, error) {
	r := wire.NewReader(data)
	n := r.Uvarint()
	if r.Err() == nil && (n > maxMsgs || n > uint64(r.Len())) {
		return nil, fmt.Errorf("decode custody messages: count %d", n)
	}
	msgs := make([]Msg, 0, n)
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		var m Msg
		m.Kind = MsgKind(r.Byte())
		flags := r.Byte()
		m.Held, m.Claiming = flags&1 != 0, flags&2 != 0
		m.From, m.To = r.Text(), r.Text()
		part := r.Uvarint()
		m.Epoch, m.Round = r.Uvarint(), r.Uvarint()
		if m.Kind == MsgOffer {
			m.State = []byte(r.Text()) // non-nil: an empty partition is still a snapshot
		} else {
			m.State = r.Bytes()
		}
		m.GaveTo, m.Gave = r.Text(), r.Uvarint()
		if r.Err() == nil && (m.Kind < MsgOffer || m.Kind > MsgInfo || part > 1<<20) {
			r.Fail(fmt.Errorf("message %d: kind %d, partition %d", i, m.Kind, part))
		}
		m.Part = int(part)
		msgs = append(msgs, m)
	}
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%d trailing bytes", r.Len()))
	}
	if r.Err() != nil {
		return nil, fmt.Errorf("decode custody messages: %w", r.Err())
	}
	return msgs, nil
}
