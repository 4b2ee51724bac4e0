package node

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
)

func TestCustodyMsgsRoundTrip(t *testing.T) {
	msgs := []custody.Msg{
		{Kind: custody.MsgOffer, From: "n1/a", To: "n2/b", Part: 270, Epoch: 7, State: []byte{}},
		{Kind: custody.MsgOffer, From: "n1/a", To: "n2/b", Part: 3, Epoch: 8, State: peer.AppendEntry(peer.AppendEntry([]byte{2}, "t:x", []byte{1, 2}), "t:y", nil)},
		{Kind: custody.MsgAck, From: "n2/b", To: "n1/a", Part: 3, Epoch: 8},
		{Kind: custody.MsgPull, From: "n3", To: "n1/a", Part: 9, Round: 41},
		{Kind: custody.MsgInfo, From: "n1/a", To: "n3", Part: 9, Round: 41, Epoch: 5, Held: true, Claiming: true, GaveTo: "n4/z", Gave: 4},
	}
	got, err := decodeCustodyMsgs(appendCustodyMsgs(nil, msgs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, msgs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, msgs)
	}
	var keys []string
	if err := peer.DecodeEntries(msgs[1].State, func(k string, s []byte) error { keys = append(keys, k); return nil }); err != nil || len(keys) != 2 {
		t.Fatalf("entries: %v %v", keys, err)
	}
}

// FuzzDecodeCustodyMsgs: no input makes the decoder panic or allocate
// beyond its input, and whatever it accepts encodes back to the same bytes.
func FuzzDecodeCustodyMsgs(f *testing.F) {
	f.Add(appendCustodyMsgs(nil, []custody.Msg{{Kind: custody.MsgAck, From: "a", To: "b", Part: 1, Epoch: 2}}))
	f.Add(appendCustodyMsgs(nil, []custody.Msg{{Kind: custody.MsgOffer, From: "a", To: "b", Part: 1, Epoch: 2, State: []byte{1, 3, 't', ':', 'k', 0}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := decodeCustodyMsgs(b)
		if err != nil {
			return
		}
		for _, m := range msgs {
			if m.Kind < custody.MsgOffer || m.Kind > custody.MsgInfo || m.Part < 0 {
				t.Fatalf("accepted %+v", m)
			}
		}
		if again := appendCustodyMsgs(nil, msgs); !bytes.Equal(again, b) {
			// Varints have one canonical form each; flags other than
			// held/claiming are dropped: accept only those differences.
			back, err := decodeCustodyMsgs(again)
			if err != nil || !reflect.DeepEqual(back, msgs) {
				t.Fatalf("re-encoding %x gives %x, which decodes to %+v (%v)", b, again, back, err)
			}
		}
	})
}

// A backup's copy round-trips through peer.OpReplica's answer, and garbage is
// an error or a copy, never a panic.
func FuzzDecodeReplica(f *testing.F) {
	f.Add(int64(1_700_000_000_123_456_789), []byte("snapshot"))
	f.Add(int64(-1), []byte{})
	f.Fuzz(func(t *testing.T, at int64, state []byte) {
		want := replica{state: state, at: time.Unix(0, at)}
		got, err := decodeReplica(appendReplica(nil, want))
		if err != nil || !got.at.Equal(want.at) || !bytes.Equal(got.state, want.state) {
			t.Fatalf("round trip of %v: %v, %v", want, got, err)
		}
		_, _ = decodeReplica(state)
	})
}
