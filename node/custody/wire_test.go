package custody

import (
	"bytes"
	"reflect"
	"testing"
)

func TestCustodyMsgsRoundTrip(t *testing.T) {
	msgs := []Msg{
		{Kind: MsgOffer, From: "n1/a", To: "n2/b", Part: 270, Epoch: 7, State: []byte{}},
		{Kind: MsgOffer, From: "n1/a", To: "n2/b", Part: 3, Epoch: 8, State: []byte{2, 3, 't', ':', 'x', 2, 1, 2, 3, 't', ':', 'y', 0}},
		{Kind: MsgAck, From: "n2/b", To: "n1/a", Part: 3, Epoch: 8},
		{Kind: MsgPull, From: "n3", To: "n1/a", Part: 9, Round: 41},
		{Kind: MsgInfo, From: "n1/a", To: "n3", Part: 9, Round: 41, Epoch: 5, Held: true, Claiming: true, GaveTo: "n4/z", Gave: 4},
	}
	got, err := DecodeMsgs(AppendMsgs(nil, msgs))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, msgs) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, msgs)
	}
}

// FuzzDecodeCustodyMsgs: no input makes the decoder panic or allocate
// beyond its input, and whatever it accepts encodes back to the same bytes.
func FuzzDecodeCustodyMsgs(f *testing.F) {
	f.Add(AppendMsgs(nil, []Msg{{Kind: MsgAck, From: "a", To: "b", Part: 1, Epoch: 2}}))
	f.Add(AppendMsgs(nil, []Msg{{Kind: MsgOffer, From: "a", To: "b", Part: 1, Epoch: 2, State: []byte{1, 3, 't', ':', 'k', 0}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := DecodeMsgs(b)
		if err != nil {
			return
		}
		for _, m := range msgs {
			if m.Kind < MsgOffer || m.Kind > MsgInfo || m.Part < 0 {
				t.Fatalf("accepted %+v", m)
			}
		}
		if again := AppendMsgs(nil, msgs); !bytes.Equal(again, b) {
			// Varints have one canonical form each; flags other than
			// held/claiming are dropped: accept only those differences.
			back, err := DecodeMsgs(again)
			if err != nil || !reflect.DeepEqual(back, msgs) {
				t.Fatalf("re-encoding %x gives %x, which decodes to %+v (%v)", b, again, back, err)
			}
		}
	})
}
