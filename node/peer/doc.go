// Package peer is the protocol tokenring nodes speak to each other: one
// persistent, multiplexed TCP connection per pair of nodes, carrying Calls
// and their Answers. A Call is a key's decision forwarded to its owner, or
// the work between nodes: custody messages (OpTransfer), replicas
// (OpReplicate, OpReplicateMany, OpReplica), a hot key's slices (OpAllot,
// OpReturn), liveness probes (OpPing).
//
// Where things are:
//
//   - call.go: the operations, Call and Answer and their encoding (the
//     values by internal/wire), entries for keys and snapshots;
//   - frame.go: frames of items, fragments, the frame cap;
//   - sender.go: the writer without a goroutine (flat combining);
//   - client.go, pool.go: Client (dial, liveness, abandoned acquires) and
//     a node's Pool of them;
//   - server.go: Server (accept loop, connection cap, calls answered on
//     the reader when Inline says they are cheap);
//   - handshake.go, seal.go: the cluster-secret handshake and AES-256-GCM
//     sealing of every frame after it;
//   - strangers.go: the budget of connections still in their handshake;
//   - trace.go: a forwarded call's trace context (an item flag), sent
//     only to a server whose answer to a ping lists that it reads it.
//
// Invariants:
//
//   - No frame read or written exceeds the frame cap (Limits.MaxFrame); a
//     larger item travels in fragments, and a reader allocates nothing for
//     a frame beyond the cap.
//   - Answers come back by id, in any order: a queued acquire never holds
//     up the calls behind it.
//   - A forwarded call gives up on its owner early only when the owner is
//     unreachable (refused, broken, or silent past Liveness after a probe):
//     ErrPeerDown. A slow answer on a live connection is waited for. An
//     acquire whose caller stopped waiting is cancelled at the owner if
//     the owner admitted it after all.
//   - With cluster secrets, nothing is served to a connection before it
//     proves one, and a frame altered, replayed, dropped or reordered fails
//     to open: the connection closes.
//   - Connections in their handshake (strangers) have a budget apart from
//     the members': a newcomer is never refused, and a flood from a few
//     addresses cannot keep members out.
//   - The encoding only grows: an op keeps its number and its fields their
//     meaning (retired ops stay taken), so nodes of two builds talk during
//     a rolling upgrade.
//
// It imports limiter (the requests and decisions Calls carry) and
// internal/wire (the values' encoding), and nothing else of tokenring's: the node (node.Node) is above it, and hands the
// Server what to do with a call (ServerConfig.Handle).
package peer
