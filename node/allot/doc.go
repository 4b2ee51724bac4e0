// Package allot decides hot keys where their requests arrive: a node that
// forwards many acquires of one key holds a slice of admissions its owner
// made in advance, and hands them out itself. It holds the holder's
// bookkeeping (Holder: heat, slices, refills, give-backs) and the owner's
// side of a slice (Allot), and the encoding of a slice (AppendGrant). It
// does no I/O: the node (node/allot.go) asks, gives back and refills, and
// the owner's node runs Allot under the key's lock.
//
// A key's owner alone admits against it, so one busy tenant or pool is
// capped by what its owner can decide, and every other node pays a forward
// per request. When a node forwards more than node.Config.HotKeyRate
// acquires a second for one key, it asks the owner for a slice: OpAllot
// admits, at the owner, as many ordinary requests as this node is expected
// to need before the owner's current bucket ends (each reserving the
// largest token bound seen here, each holding a concurrency slot), at most
// a hundredth of what the window has left. This node then hands those admissions out to its own
// callers without asking the owner, and asks for the next slice when a
// fifth of the last one is left.
//
// Exactness. Every admission handed out is one the owner made, in its own
// Budget: the window and the slots count it from the moment it is allotted,
// so the sum of live slices never exceeds what the window has left. An
// admission is handed out only before the owner's bucket it was charged to
// ends (deadline: the holder's clock when it asked, plus the time the owner
// said its bucket had left, so it never passes the owner's bucket end
// whatever the clocks read), so it is counted in the bucket its request
// arrived in, as if the owner had decided it then. At the deadline the
// admissions not handed out are cancelled at the owner (OpReturn:
// request, tokens and slot given back): nothing stays reserved longer than
// a bucket.
// A handed-out admission is an ordinary lease of the owner's: settle,
// release, renew and cancel go to the owner as for any other lease, and a
// handoff moves it with the key.
//
// A key with a budget (limiter.Limits.Spend) gets no slice: an admission
// made in advance cannot know the price of the request it will serve, so
// every request of it is decided at its owner. Nor does a fair key
// (limiter.Limits.Fair, a pool shared among its tenants) while it is
// contended: an admission made in advance is of no flow, and the shares
// count only what each flow was admitted. Slices granted before it was
// contended end with their bucket, so the flows' shares are exact from
// one window later.
//
// What it costs: a request served from a slice reserves the slice's token
// bound, not its own estimate, until it is settled; a node that crashes
// holding a slice leaves its unused admissions charged until their bucket
// leaves the window and their slots until the lease TTL.
//
// Invariants:
//
//   - Every admission handed out is one the owner made and counts: the
//     live slices never hold more than the window has left, each at most
//     a hundredth of it (allotShare), none near the limit (minSlice).
//   - No admission is handed out at or after its slice's deadline: it is
//     counted in the bucket its request arrived in.
//   - What a holder did not hand out goes back to the owner (OpReturn),
//     once: giving back is idempotent, and what could not go back yet is
//     owed and tried again until ReturnHorizon.
//   - A slice serves only while its owner is the key's owner at the
//     address it came from.
package allot
