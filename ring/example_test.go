package ring_test

import (
	"fmt"

	"github.com/tokenring/tokenring/ring"
)

func Example() {
	members := []ring.Member{
		{Name: "n1", HTTP: "127.0.0.1:8081", Peer: "127.0.0.1:7001", Gossip: "127.0.0.1:7946"},
		{Name: "n2", HTTP: "127.0.0.1:8082", Peer: "127.0.0.1:7002", Gossip: "127.0.0.1:7947"},
		{Name: "n3", HTTP: "127.0.0.1:8083", Peer: "127.0.0.1:7003", Gossip: "127.0.0.1:7948"},
	}
	r, err := ring.New(ring.Config{}, members)
	if err != nil {
		fmt.Println(err)
		return
	}
	owner, _ := r.Owner("acme")
	fmt.Println("acme: partition", r.Partition("acme"), "owner", owner.Name, "at", owner.Peer)

	// n4 joins: these partitions change owner and their state must be
	// handed over.
	bigger, err := ring.New(ring.Config{}, append(members, ring.Member{Name: "n4"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	moves := ring.Moves(r, bigger)
	fmt.Println(len(moves), "of", bigger.PartitionCount(), "partitions move; first:", moves[0])
	// Output:
	// acme: partition 137 owner n3 at 127.0.0.1:7003
	// 62 of 271 partitions move; first: {0 n3 n4}
}
