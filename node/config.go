package node

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/node/replica"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/tracing"
)

// Config configures a Node. Zero fields take the documented defaults.
type Config struct {
	// Name is this member's unique name in the cluster. Required.
	Name string
	// PeerAddr is the address the peer protocol listens on. Empty means
	// 127.0.0.1 with a port chosen by the system; PeerAddr() tells which.
	PeerAddr string
	// Policy is shared by every key's budget.
	Policy limiter.Policy
	// LimitsFor gives the limits of a key the node has not seen yet. Required.
	LimitsFor func(key string) limiter.Limits
	// Now is the wall clock. Nil means time.Now, or Clock.Now when Clock
	// is set.
	Now func() time.Time
	// Clock is what every timer and deadline of the decision and custody
	// paths reads. Nil means the host's: Now for the wall clock, the
	// runtime's monotonic clock and timers for the rest.
	Clock Clock
	// Transport, if set, carries the calls to peers instead of the peer
	// protocol's TCP connections (a simulation's network): New opens no
	// listener, PeerAddr is taken as this node's address as given, and
	// the peers' calls arrive through Serve.
	Transport peer.Transport
	// Stepped makes the node start no goroutine of its own: its periodic
	// work (sweeps, the custody machine's ticks, heartbeats, replication
	// rounds) runs only when RunDue is called, custody messages are sent
	// from the goroutine that made them, and a membership feed is read
	// only through FollowFeed. For a simulation that owns every
	// interleaving; production leaves it false.
	Stepped bool
	// FaultPoint, if set, is called at the custody shell's fault points,
	// where a simulation may crash the node mid-step: "freeze" (before a
	// partition's keys are taken out for a handover), "install" (before
	// a handed-over partition is put in the table), "restore". Nil in
	// production.
	FaultPoint func(where string)
	// Dial opens peer connections. Nil means a net.Dialer.
	Dial Dialer
	// Batch controls batching on peer connections, both directions.
	Batch BatchConfig
	// Forward says when a forwarded call counts its owner as unreachable.
	Forward ForwardConfig
	// SweepInterval is how often expired slots are freed and idle keys
	// dropped. Zero means one second.
	SweepInterval time.Duration
	// MaxHops bounds how often a call is forwarded when members disagree
	// about its owner (gossip not yet converged). Zero means 2.
	MaxHops int
	// HopTimeout bounds a call this node forwards on a peer's behalf (plus
	// the call's wait), so a further hop to an unresponsive node cannot
	// pin the connection's goroutine; and how long a call a peer forwarded
	// here waits for its partition to arrive (TransferWait is the bound
	// for this node's own callers). The forwarder gives up at a cap of its
	// own (the router's ForwardMaxWait) and answers 503, since the owner
	// may still count the call; so HopTimeout must be shorter, for the
	// forwarder to hear ErrTransferPending in time and fall back, as a
	// debt. Zero means one second.
	HopTimeout time.Duration
	// TransferWait bounds how long a call waits for its key's partition
	// to arrive here, when custody of the partition is on its way (a
	// ring change). It is the transfer's deadline, not the client's: past
	// it the call fails with ErrTransferPending and the caller falls back.
	// Zero means 2 seconds.
	TransferWait time.Duration
	// HandoffHorizon is how long after a partition's custodian crashed
	// its keys are looked up, on first use, in the backup's replicas and
	// the checkpoint. State older than one window plus one lease TTL has
	// expired anyway. Zero means 3 minutes.
	HandoffHorizon time.Duration
	// PullTimeout bounds one lookup of a crashed custodian's key in a
	// replica or the checkpoint. Zero means 250ms.
	PullTimeout time.Duration
	// ReplicationInterval is how often the keys changed since the last
	// round are copied to their backups. It bounds what an owner's crash
	// loses. Zero means 100ms; negative disables replication.
	ReplicationInterval time.Duration
	// ReplicationSync makes the owner answer a call that changed a key
	// (an admission, a settle) only once the key's backup holds the new
	// state: one crash then loses nothing. The copies travel on the peer
	// connections, batched like forwarded calls. A backup that cannot be
	// reached does not block the answer: the key is copied by the next
	// round instead (tokenring_sync_replication_missed_total).
	ReplicationSync bool
	// ReplicationCopies is how many members besides its owner hold a copy
	// of each key (the partition's first backups in the ring): a key's
	// state survives that many simultaneous crashes. Each copy costs one
	// more copy per replication round, and in sync mode an answer waits
	// for every reachable copy (sent in parallel). Zero means 1; at most
	// ring.MaxBackups.
	ReplicationCopies int
	// Checkpoint, if set, receives every replication round's snapshots
	// too, and is read when a crashed owner's key has no newer replica.
	Checkpoint replica.Checkpoint
	// Ring configures the rings built from membership snapshots; zero
	// fields take ring's defaults (271 partitions).
	Ring ring.Config
	// Logger receives the node's logs. Nil discards them.
	Logger *slog.Logger
	// Tracer, if not nil, makes the spans of forwarded calls, on both
	// sides (trace.go); nil is tracing off.
	Tracer *tracing.Tracer
	// HotKeyRate is how many acquires a second this node must forward for
	// one key before it asks the key's owner for a slice of its budget and
	// decides the key's requests itself (node/allot). Zero means
	// DefaultHotKeyRate; negative turns slices off.
	HotKeyRate int
	// MaxKeys caps the keys the table creates for calls (limiter
	// Table.SetMaxKeys): a new key at a full table takes an idle key's
	// place or is refused with limiter.TableFull. State arriving by
	// handoff, transfer, or a fetch from a replica or the checkpoint (it
	// holds counted units) and debts are never refused. Zero means
	// DefaultMaxKeys; negative means unlimited.
	MaxKeys int
	// MaxClockSkew is how far ahead of this node's clock the times in a
	// state arriving from elsewhere (handoff, transfer, replica,
	// checkpoint) may lie; a state beyond it is rejected, not applied
	// (limiter.ErrFutureState). Zero means DefaultMaxClockSkew.
	MaxClockSkew time.Duration

	// Secrets are the cluster secrets, each at least peer.MinSecretLen
	// (32) random bytes. Empty means the plaintext, unauthenticated peer
	// protocol: for loopback development clusters only. Otherwise every
	// peer connection is authenticated and encrypted (peer/handshake.go):
	// Secrets[0] is used to dial, and the server accepts any of them, so
	// a rotation runs with {new, old} until every member has new.
	Secrets [][]byte
	// Rand is the randomness of the handshake's nonces, read from many
	// connections at once: it must be safe for concurrent use. Nil means
	// crypto/rand.
	Rand io.Reader
	// HandshakeTimeout bounds a peer connection's handshake, so a client
	// that says nothing cannot hold a connection. Zero means 5 seconds.
	HandshakeTimeout time.Duration
	// MaxFrame is the largest peer frame read or written, in bytes: a
	// longer one is rejected before anything is allocated for it and its
	// connection closed. Larger items travel in fragments. Zero means
	// peer.DefaultMaxFrame (1 MiB); otherwise peer.MinMaxFrame to
	// peer.MaxMaxFrame.
	MaxFrame int
	// PeerReadTimeout is how long a peer frame, once started, may take to
	// arrive whole; a connection stalled mid-frame is closed then. Idle
	// connections are not affected. Zero means 10 seconds.
	PeerReadTimeout time.Duration
	// MaxPeerConns is the most peer connections served at once; a
	// connection beyond it is closed as soon as it is accepted. Zero
	// means peer.DefaultMaxConns (256).
	MaxPeerConns int
	// Listen opens the peer listener. Nil means net.Listen.
	Listen func(network, addr string) (net.Listener, error)
}

// DefaultHotKeyRate is Config.HotKeyRate's default: forwarded acquires a
// second for one key. A slice costs its holder about three peer calls a
// bucket (the ask, maybe a top-up, the give-back), so a node that forwards
// more than a handful of a key's acquires a second saves calls, and each
// acquire served from the slice saves a round trip.
const DefaultHotKeyRate = 5

// Defaults of Config fields.
const (
	DefaultMaxKeys      = 1_000_000
	DefaultMaxClockSkew = limiter.DefaultMaxClockSkew
)

// withDefaults fills the zero fields of c with their documented defaults.
func (c Config) withDefaults() Config {
	switch {
	case c.Clock != nil:
		c.Now = c.Clock.Now
	case c.Now == nil:
		c.Now = time.Now
	}
	if c.Clock == nil {
		c.Clock = newHostClock(c.Now)
	}
	if c.Dial == nil {
		d := &net.Dialer{}
		c.Dial = d.DialContext
	}
	c.Forward = c.Forward.WithDefaults() // the mandate's term reads Liveness
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Second
	}
	if c.MaxHops <= 0 {
		c.MaxHops = 2
	}
	if c.HopTimeout <= 0 {
		c.HopTimeout = time.Second
	}
	if c.TransferWait <= 0 {
		c.TransferWait = 2 * time.Second
	}
	if c.HotKeyRate == 0 {
		c.HotKeyRate = DefaultHotKeyRate
	}
	if c.HandoffHorizon <= 0 {
		c.HandoffHorizon = 3 * time.Minute
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = 250 * time.Millisecond
	}
	if c.ReplicationCopies <= 0 {
		c.ReplicationCopies = 1
	}
	c.ReplicationCopies = min(c.ReplicationCopies, ring.MaxBackups)
	if c.ReplicationInterval == 0 {
		c.ReplicationInterval = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.PeerAddr == "" {
		c.PeerAddr = "127.0.0.1:0"
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxClockSkew <= 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.Policy.IDs == nil {
		c.Policy.IDs = randomID
	}
	return c.withPeerDefaults()
}

// withPeerDefaults fills the zero peer protocol fields of c.
func (c Config) withPeerDefaults() Config {
	if c.Rand == nil {
		c.Rand = rand.Reader
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = peer.DefaultHandshakeTimeout
	}
	if c.MaxFrame == 0 {
		c.MaxFrame = peer.DefaultMaxFrame
	}
	if c.PeerReadTimeout <= 0 {
		c.PeerReadTimeout = peer.DefaultReadTimeout
	}
	if c.MaxPeerConns <= 0 {
		c.MaxPeerConns = peer.DefaultMaxConns
	}
	if c.Listen == nil {
		c.Listen = net.Listen
	}
	return c
}

// peerAuth checks c's peer protocol fields and returns the handshake its
// secrets make (nil for none).
func (c Config) peerAuth() (*peer.Auth, error) {
	if c.MaxFrame < peer.MinMaxFrame || c.MaxFrame > peer.MaxMaxFrame {
		return nil, fmt.Errorf("MaxFrame %d, want %d to %d", c.MaxFrame, peer.MinMaxFrame, peer.MaxMaxFrame)
	}
	return peer.NewAuth(c.Secrets, c.Rand, c.HandshakeTimeout)
}

// randomID is the default limiter.Policy.IDs: lease ids a client cannot
// guess, from crypto/rand (which never fails: it panics the process rather
// than return predictable bytes).
func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
