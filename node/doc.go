// Package node is one member of a tokenring cluster: it holds the limiter
// state of the keys it owns (the key table), decides for them, forwards
// the decisions for other keys to their owners, and follows the cluster's
// membership. It is the shell around the packages below it, which do one
// job each; node decides when, and holds the locks.
//
// Here:
//
//   - node.go, local.go: Node, Do (the decision loop: a key's partition's
//     route says decide here, wait for custody, or forward) and the key
//     table with its waiters;
//   - transfer.go, membership.go, handoff.go: the custody shell (views
//     from gossip, the machine's Ready carried out: freeze, install,
//     restore, routes), Join, Drain, and fetching a restored partition's
//     keys (fetchKey);
//   - fence.go: the mandate (heartbeats) and fences (a view without a
//     majority, a stall);
//   - replication.go, restore.go: when replication runs, and the startup
//     preload installed into restored partitions;
//   - allot.go: asking for, serving, refilling and giving back slices;
//   - serve.go: the calls peers forward here; call.go: the vocabulary the
//     node's callers use (Call, Answer, the ops), from node/peer;
//   - clock.go: the Clock every timer and deadline of the decision and
//     custody paths reads; with Config.Transport, Config.Stepped and a
//     Membership feed (JoinFeed) it lets sim_test.go run real Nodes under
//     a simulated network and clock.
//
// Below it (imports point down; none imports node):
//
//	node/custody   the custody machine, the quorum, members (pure; imports ring, internal/wire)
//	node/peer      the peer protocol: calls, frames, clients, server, handshake (imports limiter, internal/wire)
//	node/replica   replication, checkpoint, preload, fetch (imports peer, limiter, ring, internal/shrink, internal/wire)
//	node/allot     a hot key's slices (imports peer, limiter, internal/wire)
//	node/internal  shrink (maps that give memory back), wire (the values' encoding)
//
// Invariants:
//
//   - A key is decided by one member at a time: the custodian of its
//     partition, holding the majority's mandate, under the partition's
//     gate (read-locked per decision, write-locked for every custody
//     change), so no admission slips between a snapshot and the route that
//     forwards.
//   - A call that fails was admitted nowhere, or is undone: an acquire its
//     caller stopped waiting for is cancelled at its owner if the owner
//     admitted it after all, so a fallback decision after it does not
//     count the request twice.
//   - No lock is held across network I/O.
//   - A change to a key is marked for replication after it is made.
package node
