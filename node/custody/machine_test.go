package custody

import "testing"

// Scripted steps of the custody machine, for what the simulation does not
// pin down on its own.

// A joiner hears of offers before it hears of the cluster: an offer from a
// member its view does not show yet is installed and acknowledged, not
// dropped (dropping it only delayed handovers, which the simulation does
// not measure, so no seed catches it).
func TestCustodyJoinerInstallsOfferBeforeItsView(t *testing.T) {
	m := New("n2", 4, Config{})
	m.Step(Msg{Kind: MsgOffer, From: "n1", To: "n2", Part: 1, Epoch: 1, State: []byte{0}})
	rd := m.Ready()
	if len(rd.Install) != 1 || rd.Install[0].Part != 1 {
		t.Fatalf("installs %+v, want partition 1", rd.Install)
	}
	if len(rd.Msgs) != 1 || rd.Msgs[0].Kind != MsgAck || rd.Msgs[0].To != "n1" || rd.Msgs[0].Epoch != 1 {
		t.Fatalf("messages %+v, want one ack of epoch 1 to n1", rd.Msgs)
	}
	if !m.Holds(1) || m.Route(1).Mode != RouteLocal {
		t.Fatalf("holds %v, route %+v: want custodian, admitting", m.Holds(1), m.Route(1))
	}
}

// An offer from a member this one saw leave the membership is dropped: its
// partitions may have been restored elsewhere since.
func TestCustodyDropsOffersFromGoneMembers(t *testing.T) {
	m := New("n2", 4, Config{})
	owners := []string{"n2", "n2", "n2", "n2"}
	m.SetView(View{Owners: owners, Alive: map[string]bool{"n1": true, "n2": true}})
	m.SetView(View{Owners: owners, Alive: map[string]bool{"n2": true}})
	m.Ready()
	m.Step(Msg{Kind: MsgOffer, From: "n1", To: "n2", Part: 1, Epoch: 9, State: []byte{0}})
	if rd := m.Ready(); len(rd.Install) != 0 || len(rd.Msgs) != 0 {
		t.Fatalf("an offer from a gone member led to %+v", rd)
	}
}

// A duplicate offer is acknowledged again and installs nothing.
func TestCustodyDuplicateOfferIsAckedOnly(t *testing.T) {
	m := New("n2", 4, Config{})
	offer := Msg{Kind: MsgOffer, From: "n1", To: "n2", Part: 2, Epoch: 3, State: []byte{0}}
	m.Step(offer)
	m.Ready()
	m.Step(offer)
	rd := m.Ready()
	if len(rd.Install) != 0 || len(rd.Msgs) != 1 || rd.Msgs[0].Kind != MsgAck || rd.Msgs[0].Epoch != 3 {
		t.Fatalf("duplicate offer led to %+v, want one ack and no install", rd)
	}
}

// A fenced machine routes every partition to RouteFenced, hands back the
// snapshots frozen for handovers not yet acknowledged, and ignores what it
// is fed afterwards.
func TestCustodyFenceRetiresTheMachine(t *testing.T) {
	m := New("n2", 4, Config{})
	m.Step(Msg{Kind: MsgOffer, From: "n1", To: "n2", Part: 1, Epoch: 1, State: []byte{0}})
	m.Step(Msg{Kind: MsgOffer, From: "n1", To: "n2", Part: 3, Epoch: 1, State: []byte{0}})
	m.Ready()
	// Partition 3 is being handed to n3, frozen and not yet acknowledged.
	m.SetView(View{Owners: []string{"n2", "n2", "n2", "n3"}, Alive: map[string]bool{"n2": true, "n3": true}})
	for _, p := range m.Ready().Freeze {
		m.Frozen(p, []byte{7})
	}
	m.Ready()
	frozen := m.Fence()
	if len(frozen) != 1 || frozen[0].Part != 3 || string(frozen[0].State) != "\x07" {
		t.Fatalf("fence returned %+v, want partition 3's frozen snapshot", frozen)
	}
	if rd := m.Ready(); len(rd.Routes) != 4 || len(rd.Msgs)+len(rd.Freeze)+len(rd.Install)+len(rd.Restore) != 0 {
		t.Fatalf("after the fence: %+v, want every route and nothing else", rd)
	}
	m.Step(Msg{Kind: MsgAck, From: "n3", To: "n2", Part: 3, Epoch: 2})
	m.Tick()
	m.SetView(View{Owners: []string{"n2", "n2", "n2", "n2"}, Alive: map[string]bool{"n2": true}})
	if rd := m.Ready(); len(rd.Routes)+len(rd.Msgs)+len(rd.Freeze)+len(rd.Install)+len(rd.Restore) != 0 {
		t.Fatalf("a fenced machine acted on its input: %+v", rd)
	}
	for p := range 4 {
		if r := m.Route(p); r.Mode != RouteFenced {
			t.Fatalf("partition %d routes %+v, want fenced", p, r)
		}
	}
	if m.Fence() != nil || !m.Fenced() {
		t.Fatal("a second fence returned snapshots, or the machine is not fenced")
	}
}
