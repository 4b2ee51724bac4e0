package node

// The custody machine's messages on the wire: the shell (transfer.go)
// carries them between members in peer.OpTransfer calls.

import (
	"encoding/binary"
	"fmt"

	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
)

// appendCustodyMsgs encodes the custody machine's messages for one
// peer.OpTransfer call's State: a uvarint count, then per message its kind,
// flags (1 held, 2 claiming), from, to, partition, epoch, round, state,
// gave-to and gave epoch.
func appendCustodyMsgs(b []byte, msgs []custody.Msg) []byte {
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
		b = peer.AppendString(b, m.From)
		b = peer.AppendString(b, m.To)
		b = binary.AppendUvarint(b, uint64(m.Part))
		b = binary.AppendUvarint(b, m.Epoch)
		b = binary.AppendUvarint(b, m.Round)
		b = peer.AppendString(b, string(m.State))
		b = peer.AppendString(b, m.GaveTo)
		b = binary.AppendUvarint(b, m.Gave)
	}
	return b
}

// maxCustodyMsgs bounds the messages of one peer.OpTransfer call: a few per
// partition.
const maxCustodyMsgs = 1 << 16

// decodeCustodyMsgs decodes what appendCustodyMsgs encoded.
func decodeCustodyMsgs(data []byte) ([]custody.Msg, error) {
	r := peer.NewReader(data)
	n := r.Uvarint()
	if r.Err() == nil && (n > maxCustodyMsgs || n > uint64(r.Len())) {
		return nil, fmt.Errorf("decode custody messages: count %d", n)
	}
	msgs := make([]custody.Msg, 0, n)
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		var m custody.Msg
		m.Kind = custody.MsgKind(r.Byte())
		flags := r.Byte()
		m.Held, m.Claiming = flags&1 != 0, flags&2 != 0
		m.From, m.To = r.Text(), r.Text()
		part := r.Uvarint()
		m.Epoch, m.Round = r.Uvarint(), r.Uvarint()
		if m.Kind == custody.MsgOffer {
			m.State = []byte(r.Text()) // non-nil: an empty partition is still a snapshot
		} else {
			m.State = r.Bytes()
		}
		m.GaveTo, m.Gave = r.Text(), r.Uvarint()
		if r.Err() == nil && (m.Kind < custody.MsgOffer || m.Kind > custody.MsgInfo || part > 1<<20) {
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
