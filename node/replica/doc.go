// Package replica keeps copies of the keys a node decides for, so that a
// crash loses at most what changed since the last round: the keys changed
// since the last round (Dirty), the rounds that copy them to their backups
// and the checkpoint (Replicator.Round; Sync for ReplicationSync), the
// copies a backup holds for other owners (Store) and the copies its
// backups acknowledged (Acked, what a fence relies on), the optional
// durable store (Checkpoint, RedisCheckpoint), the checkpoint as a node
// read it at startup (Preload), and the fetch of a crashed owner's key
// from the newest copy it left (Replicator.Fetch).
//
// The node (node/replication.go, node/handoff.go, node/restore.go) decides
// when: it runs a round every ReplicationInterval, marks a key after each
// change, fetches a key of a restored partition on first use, and
// installs what it fetches in its table under the partition's gate.
//
// Invariants:
//
//   - A key is marked after its change is made, and marked again when a
//     copy of it fails: a round never drops a change it did not copy.
//   - A key counts as acknowledged by a backup only once that backup
//     answered the call that carried it (Acked).
//   - A backup keeps a replica only if it would decode and is not dated
//     beyond the clock skew (Store.Check); a rejected one leaves the
//     previous replica in place. Of two copies of a key it keeps the later
//     state (limiter.SnapshotTime), whatever order they arrive in.
//   - A fetch takes the copy of the latest state there is, by the state's
//     own time: a backup's replica or the checkpoint's snapshot.
//   - Maps that held many keys give their memory back as keys go
//     (internal/shrink).
package replica
