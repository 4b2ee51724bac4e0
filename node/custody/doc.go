// Package custody moves each partition's limiter state to the member the
// ring names, without losing or doubling a count: the custody protocol as a
// pure state machine (Machine) and its messages' wire form (AppendMsgs,
// DecodeMsgs), the majority rule a member may decide under (Quorum: views,
// fences, the mandate), and the members both are fed (Member). Nothing here
// does I/O or reads a clock: the shell (node/transfer.go, node/fence.go)
// feeds in memberships, peers' messages and ticks, carries out what Ready
// says, and publishes each partition's Route to the hot path.
//
// Invariants, checked by the simulation (sim_test.go, TestCustodySim: members
// over a network that delays, drops, duplicates, reorders and cuts, joining,
// leaving, crashing, stalling and splitting):
//
//   - At most one member decides for a partition at any instant: its
//     custodian, not fenced, holding the majority's mandate.
//   - No admission is lost or counted twice by a handover: state leaves a
//     custodian only as a snapshot its taker acknowledges, and is
//     restored from copies only once every live member said it neither
//     holds nor claims the partition and the chain of handovers ends at a
//     member that is gone.
//   - A member installs only views that hold a majority of the membership
//     counted; two sides of a split never both do.
//   - At rest, every partition is held once, by its ring owner.
//
// The protocol. Every partition's limiter state has one custodian: the
// member holding it. Only the custodian admits against the partition's
// keys, and only while it is not handing the partition on, so at any
// instant at most one member decides for a key. The ring says who should
// be custodian; the protocol moves custody there:
//
//  1. A custodian whose ring names another owner stops admitting for the
//     partition (the shell freezes the partition's keys into one snapshot,
//     removing them from its table) and offers the snapshot to the owner,
//     under a new epoch. It keeps the snapshot, and resends the offer every
//     retry interval, until the taker acknowledges that epoch: no timeout
//     anywhere drops state. If the taker leaves the membership before
//     acknowledging, the giver asks everyone (a pull round, see 3) whether
//     the offer made it; only if no live member has seen it is custody the
//     giver's again.
//  2. A taker installs an offer whose epoch is newer than any it handled
//     for the partition, and acknowledges every offer, new or duplicate, so
//     retries and duplicates are harmless. It does not hand custody straight
//     back to the member it came from until its own ring changes: the two
//     rings disagree for a moment, and the newer one wins when it arrives.
//     An offer that reaches a member still offering the partition itself
//     proves that member's own offer was installed (its ack was lost).
//  3. A member whose ring names it owner and that has no custody waits. It
//     asks every live member, and every member it heard from or of lately
//     that its view does not show yet (a joiner), what it knows (a pull
//     round): a custodian whose ring agrees hands the partition over at
//     once. When every one of them answers that it neither holds the
//     partition nor claims it, and the newest handover anyone reports went
//     to a member that is gone, custody died with that member: the waiter
//     restores the partition (replica, checkpoint, or empty) under a newer
//     epoch. Replies count only within one round begun after the last
//     membership change, so a partition on its way between live members is
//     never mistaken for a lost one.
//
// Epochs increase along the chain of custody of a partition; a member
// remembers the newest it took part in, which is how it tells a duplicate or
// stale offer from a new one.
//
// The decisions in 1 and 3 that act on a member being gone rely on failure
// detection being slower than message delivery: a member is declared dead
// (seconds, with memberlist) after anything it sent has arrived
// (milliseconds, over TCP). The simulation keeps to that, and checks the
// rest under arbitrary delay, loss, duplication, reordering and cuts.
package custody
