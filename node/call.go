package node

import "github.com/tokenring/tokenring/node/peer"

// The decision protocol's vocabulary. A caller hands its node a Call and
// gets an Answer (Do); a node forwards the Call to the key's owner over the
// peer protocol, which defines both (node/peer/call.go) and carries them.
// They are named here as the node's callers use them.
type (
	// Call is one decision for one key, executed by the key's owner.
	Call = peer.Call
	// Answer is the owner's reply to a Call.
	Answer = peer.Answer
	// Op is the operation a Call asks a key's owner to perform.
	Op = peer.Op
	// Charge is a debt: units another node admitted for the key by its
	// fallback while the owner was unreachable (OpCharge).
	Charge = peer.Charge
)

// The operations a caller asks of its node. The others (peer.OpReplicate
// and on) pass between nodes only.
const (
	OpAcquire = peer.OpAcquire // admit a request (may queue when Req.Wait > 0)
	OpSettle  = peer.OpSettle  // settle a lease with the reported usage and free its slot
	OpRelease = peer.OpRelease // free a lease's slot, keeping its tokens charged as reserved
	OpCancel  = peer.OpCancel  // roll an admission back completely
	OpRenew   = peer.OpRenew   // extend a lease's slot
	OpStatus  = peer.OpStatus  // report the key's limits and usage
	OpCharge  = peer.OpCharge  // charge a debt (Charge)
	OpRun     = peer.OpRun     // several calls in one (RunCall)
)

// ErrPeerDown is returned (wrapped) when a key's owner cannot be reached:
// the connection was refused or broke, or the owner stayed silent past
// its liveness. Callers fall back at once instead of waiting for a timeout.
var ErrPeerDown = peer.ErrPeerDown

// The peer protocol's settings in Config.
type (
	// BatchConfig controls how a peer connection batches calls into
	// frames (Config.Batch).
	BatchConfig = peer.BatchConfig
	// ForwardConfig says when a forwarded call gives up on its owner
	// (Config.Forward).
	ForwardConfig = peer.ForwardConfig
	// Dialer opens connections to peers (Config.Dial).
	Dialer = peer.Dialer
)
