package node

import "testing"

// Scripted steps of the custody machine, for what the simulation does not
// pin down on its own.

// A joiner hears of offers before it hears of the cluster: an offer from a
// member its view does not show yet is installed and acknowledged, not
// dropped (dropping it only delayed handovers, which the simulation does
// not measure, so no seed catches it).
func TestCustodyJoinerInstallsOfferBeforeItsView(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	m.Step(custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 1, Epoch: 1, State: []byte{0}})
	rd := m.Ready()
	if len(rd.Install) != 1 || rd.Install[0].Part != 1 {
		t.Fatalf("installs %+v, want partition 1", rd.Install)
	}
	if len(rd.Msgs) != 1 || rd.Msgs[0].Kind != msgAck || rd.Msgs[0].To != "n1" || rd.Msgs[0].Epoch != 1 {
		t.Fatalf("messages %+v, want one ack of epoch 1 to n1", rd.Msgs)
	}
	if !m.Holds(1) || m.Route(1).Mode != routeLocal {
		t.Fatalf("holds %v, route %+v: want custodian, admitting", m.Holds(1), m.Route(1))
	}
}

// An offer from a member this one saw leave the membership is dropped: its
// partitions may have been restored elsewhere since.
func TestCustodyDropsOffersFromGoneMembers(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	owners := []string{"n2", "n2", "n2", "n2"}
	m.SetView(custodyView{Owners: owners, Alive: map[string]bool{"n1": true, "n2": true}})
	m.SetView(custodyView{Owners: owners, Alive: map[string]bool{"n2": true}})
	m.Ready()
	m.Step(custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 1, Epoch: 9, State: []byte{0}})
	if rd := m.Ready(); len(rd.Install) != 0 || len(rd.Msgs) != 0 {
		t.Fatalf("an offer from a gone member led to %+v", rd)
	}
}

// A duplicate offer is acknowledged again and installs nothing.
func TestCustodyDuplicateOfferIsAckedOnly(t *testing.T) {
	m := newCustody("n2", 4, custodyConfig{})
	offer := custodyMsg{Kind: msgOffer, From: "n1", To: "n2", Part: 2, Epoch: 3, State: []byte{0}}
	m.Step(offer)
	m.Ready()
	m.Step(offer)
	rd := m.Ready()
	if len(rd.Install) != 0 || len(rd.Msgs) != 1 || rd.Msgs[0].Kind != msgAck || rd.Msgs[0].Epoch != 3 {
		t.Fatalf("duplicate offer led to %+v, want one ack and no install", rd)
	}
}
