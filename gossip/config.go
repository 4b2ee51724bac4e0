package gossip

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// Limits checked by Validate.
const (
	// MaxMetaSize is memberlist's limit on the encoded metadata of a node.
	MaxMetaSize = memberlist.MetaMaxSize
	// MaxNameSize bounds a node name: it travels in every gossip message,
	// next to the metadata, and UDP packets are about 1,400 bytes.
	MaxNameSize = 256
)

// Config configures one member of a gossip cluster. Start from
// DefaultLANConfig or DefaultLocalConfig and set Name, Meta and Join. Each
// field says what its zero value does; a zero field of the timing profile
// (ProbeInterval through GossipToTheDeadTime) takes its DefaultLANConfig
// value, so a Config built from scratch is usable too. Every member of a
// cluster should use the same timing profile.
type Config struct {
	// Name identifies this node; it must be unique in the cluster and is
	// the name the ring places partitions by. A node that joins with the
	// name of a live member at another address is refused: each join
	// attempt fails, and Start returns an error wrapping ErrNameConflict.
	// A node that restarts under its old name at the same address simply
	// rejoins; at a new address it is refused until the cluster has
	// declared the old one dead and DeadNodeReclaimTime has passed, or
	// has forgotten it (GossipToTheDeadTime). Required; at most
	// MaxNameSize bytes.
	Name string

	// BindAddr is the IP address memberlist listens on, UDP and TCP.
	// Empty means "0.0.0.0", all interfaces; then AdvertiseAddr had better
	// be set, since otherwise memberlist advertises the first private IP
	// it finds and fails if there is none (a loopback-only host).
	BindAddr string

	// BindPort is the UDP and TCP port memberlist listens on. Zero means
	// a port chosen by the system, which Local reports after Start; tests
	// use it to avoid port clashes.
	BindPort int

	// AdvertiseAddr is the IP address other members use to reach this
	// one, for NAT, containers, or a node bound to all interfaces. Empty
	// means BindAddr when it is a specific IP; with 0.0.0.0, memberlist
	// picks the host's first private IPv4 address and Start fails if there
	// is none. Never advertise 0.0.0.0: a member on another host would
	// dial itself.
	AdvertiseAddr string

	// AdvertisePort is the port other members use to reach this one.
	// Zero means the bound port.
	AdvertisePort int

	// Meta is this node's metadata, gossiped to every member. Its encoding
	// must fit in MaxMetaSize bytes. An empty BootID is replaced by a
	// random one at Start.
	Meta Meta

	// Join lists gossip addresses ("host:port", or "host" for BindPort)
	// of existing members. Contacting any one of them is enough to join
	// the whole cluster. A host name is resolved again at every attempt
	// (memberlist asks the first name server of resolv.conf over TCP for
	// a fully qualified name, then the system resolver) and each of its
	// addresses is tried, so a name with one record per member (a
	// Kubernetes headless Service) joins as soon as any of them answers.
	// Empty means this node starts a new cluster.
	Join []string

	// JoinRetries is how many more times Start tries to join when no
	// address in Join answers or the name is in use (see Name), waiting
	// JoinRetryInterval between attempts; then Start fails. More retries ride out members that
	// start at the same time, at the cost of a slower failure when the
	// addresses are wrong. Zero means a single attempt.
	JoinRetries int

	// JoinRetryInterval is the wait between two join attempts. Zero
	// means one second.
	JoinRetryInterval time.Duration

	// ReconnectInterval is how often this node tries to join again the
	// members it saw depart (declared dead, or left) and the Join seeds
	// that are not members. memberlist never contacts a member it declared
	// dead again, so without this a healed network partition would stay
	// split for ever, each side owning every key (Serf adds the same loop
	// on top of memberlist). Zero means 10 s; negative disables it.
	ReconnectInterval time.Duration

	// ReconnectHorizon is how long after a member departed it is still
	// tried. Zero means 72 hours (Serf's reconnect timeout).
	ReconnectHorizon time.Duration

	// Logger receives this package's logs and memberlist's (its [DEBUG]
	// and [INFO] lines at debug level, [WARN] at warn, [ERR] at error).
	// Nil means no logging.
	Logger *slog.Logger

	// ProbeInterval is how often this node probes a random member to
	// check it is alive. Shorter detects failures sooner, at the cost of
	// more packets; the failure detection time is roughly ProbeInterval
	// × (SuspicionMult + 1 or 2). Zero means 1 s.
	ProbeInterval time.Duration

	// ProbeTimeout is how long to wait for a probe's ack before asking
	// IndirectChecks other members to probe on our behalf. It should be
	// well above the 99th percentile round-trip time, and below
	// ProbeInterval: too short and a slow member is suspected wrongly. Zero
	// means 500 ms.
	ProbeTimeout time.Duration

	// IndirectChecks is the number of members asked to probe a member
	// that did not answer us directly. More reduces false suspicions
	// caused by a bad path between two members, at the cost of packets. Zero
	// means 3.
	IndirectChecks int

	// SuspicionMult scales the time a suspected member has to refute the
	// suspicion before it is declared dead: SuspicionMult × ProbeInterval
	// × max(1, log10(members)). Higher tolerates longer pauses (GC,
	// overloaded hosts) at the cost of slower detection of real crashes.
	// Zero means 4.
	SuspicionMult int

	// SuspicionMaxTimeoutMult multiplies the suspicion timeout above to
	// give the initial timeout, used while few other members have
	// confirmed the suspicion; it shrinks to the base timeout as
	// confirmations arrive. Higher protects better against one member
	// with a bad network falsely accusing others. Zero means 6.
	SuspicionMaxTimeoutMult int

	// GossipInterval is how often this node sends queued broadcasts
	// (joins, leaves, suspicions) to GossipNodes random members. Shorter
	// spreads changes faster at the cost of more, smaller packets. Zero
	// means 200 ms.
	GossipInterval time.Duration

	// GossipNodes is the number of random members each gossip round goes
	// to. More speeds up convergence at the cost of bandwidth. Zero means 3.
	GossipNodes int

	// RetransmitMult sets how many times a broadcast is retransmitted:
	// RetransmitMult × log10(members + 1). Higher makes delivery more
	// certain on a lossy network at the cost of bandwidth. Too low, and a
	// member can miss a change until the next push/pull. Zero means 4.
	RetransmitMult int

	// PushPullInterval is how often this node does a full state exchange
	// over TCP with a random member, repairing anything gossip missed.
	// Shorter converges faster after a partition, at a cost that grows
	// with the cluster size (memberlist stretches it beyond 32 members).
	// Zero means 5 s, not memberlist's LAN 30 s: a member that missed a
	// joiner's broadcast (UDP, lost under load) keeps the partitions the
	// joiner should receive, and the joiner is not ready, until its next
	// exchange; one exchange is a few hundred bytes a member.
	PushPullInterval time.Duration

	// TCPTimeout bounds TCP operations: joins, push/pull and the TCP
	// fallback of probes. Longer tolerates slow links; shorter fails a join
	// to a dead address sooner. Zero means 10 s.
	TCPTimeout time.Duration

	// GossipToTheDeadTime is how long a dead or departed member keeps
	// receiving gossip (so it can learn it was declared dead and rejoin)
	// and is remembered; after it, the member is forgotten and its name
	// can be reused at another address. Zero means 30 s.
	GossipToTheDeadTime time.Duration

	// dnsConfigPath is the resolv.conf memberlist reads to resolve a Join
	// name over TCP. Empty means /etc/resolv.conf; tests point it at their
	// own name server.
	dnsConfigPath string

	// DeadNodeReclaimTime lets a node reuse the name of a member that was
	// declared dead this long ago, from a different address (a container
	// restarted with a new IP), before GossipToTheDeadTime has passed.
	// Zero means never: the name is free only once the dead member is
	// forgotten. Too short, and a member wrongly declared dead (a network
	// partition) can see its name taken by another process.
	DeadNodeReclaimTime time.Duration

	// Secrets, when not empty, encrypt and authenticate all gossip
	// (memberlist's AES-GCM keyring, with GossipVerifyIncoming and
	// GossipVerifyOutgoing): a member without one of them can neither join
	// nor read nor inject messages. Secrets[0] is the primary, used to
	// send; the others are only accepted, for rotation. Each is turned into
	// a 32-byte key by SHA-256("tokenring gossip v1" || secret), so any
	// length works, but a secret needs at least 32 random bytes to be one.
	// Empty means no encryption.
	Secrets [][]byte

	// Label is put on every gossip packet and stream and checked on every
	// one received: another product's (or another cluster's) gossip on the
	// same port is refused. Every member of a cluster must use the same.
	// Empty means DefaultLabel; at most MaxLabelSize bytes.
	Label string

	// MaxInboundStreams is the most inbound gossip TCP connections served
	// at once; one beyond it is closed as soon as accepted and counted
	// (tokenring_gossip_conns_rejected_total), as is one accepted while
	// the process is within its descriptor reserve (internal/fdreserve).
	// memberlist has no cap of its own and holds a silent connection for
	// TCPTimeout before it checks its label or key, so without one anyone
	// reaching the port could take every descriptor of the process.
	// Higher admits more simultaneous joins and push/pulls; lower holds
	// fewer descriptors against a flood, and a member refused retries (a
	// join after JoinRetryInterval, a push/pull at the next interval).
	// Zero means DefaultMaxInboundStreams (64).
	MaxInboundStreams int

	// InboundStreamTimeout is how long an inbound gossip TCP connection
	// has, from its accept, to deliver its message (memberlist reads one
	// an inbound stream, then only answers): whatever memberlist's
	// TCPTimeout, a reader that stays silent or trickles holds its slot
	// this long at most. Too short, and a member's push/pull from a
	// stalled host fails (it is retried at the next interval). Zero means
	// DefaultInboundStreamTimeout (1 s).
	InboundStreamTimeout time.Duration
}

// DefaultLabel is the Label of a Config that leaves it empty.
const DefaultLabel = "tokenring"

// MaxLabelSize is memberlist's limit on a Label.
const MaxLabelSize = 255

// gossipKeyContext is prefixed to a secret before hashing it to a key.
const gossipKeyContext = "tokenring gossip v1"

// gossipKey derives the 32-byte AES key of a secret.
func gossipKey(secret []byte) []byte {
	h := sha256.New()
	h.Write([]byte(gossipKeyContext))
	h.Write(secret)
	return h.Sum(nil)
}

// keyring returns the memberlist keyring of secrets, primary first; nil
// when there are none.
func keyring(secrets [][]byte) (*memberlist.Keyring, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = gossipKey(s)
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("gossip keyring: %w", err)
	}
	return kr, nil
}

// DefaultLANConfig returns the configuration for a cluster on a LAN: the
// timings of memberlist.DefaultLANConfig, which spread a change in well under
// a second and detect a crash in about 5 seconds in a small cluster (in a
// larger one the suspicion starts at 6 times that and shrinks as members
// confirm it), listening on 0.0.0.0:7946 and retrying a join 5 times, a
// second apart, and trying departed members and seeds again every 10 s for
// 72 hours. Name, Meta and Join are left for the caller; set
// AdvertiseAddr when the host has no private IP.
func DefaultLANConfig() Config {
	m := memberlist.DefaultLANConfig()
	return Config{
		BindAddr:                m.BindAddr,
		BindPort:                m.BindPort,
		JoinRetries:             5,
		JoinRetryInterval:       time.Second,
		ReconnectInterval:       10 * time.Second,
		ReconnectHorizon:        72 * time.Hour,
		ProbeInterval:           m.ProbeInterval,
		ProbeTimeout:            m.ProbeTimeout,
		IndirectChecks:          m.IndirectChecks,
		SuspicionMult:           m.SuspicionMult,
		SuspicionMaxTimeoutMult: m.SuspicionMaxTimeoutMult,
		GossipInterval:          m.GossipInterval,
		GossipNodes:             m.GossipNodes,
		RetransmitMult:          m.RetransmitMult,
		PushPullInterval:        5 * time.Second,
		TCPTimeout:              m.TCPTimeout,
		GossipToTheDeadTime:     m.GossipToTheDeadTime,
		DeadNodeReclaimTime:     m.DeadNodeReclaimTime,
	}
}

// DefaultLocalConfig returns a configuration for members on one host, for
// tests: memberlist.DefaultLocalConfig with faster probing (every 200 ms,
// 100 ms timeout), a shorter suspicion (3 probe intervals, at most twice
// that), gossip every 50 ms with the LAN's 4× retransmission, and a full
// state exchange every second, so that a crash is detected in about 1 to 2
// seconds and a join or leave spreads in about 100 ms. It listens on
// 127.0.0.1 on a port chosen by the system, retries a join 20 times, 200 ms
// apart, tries departed members again every second, and lets a restarted node take its name back from a different port
// 1 second after the old one was declared dead (a join in the meantime
// fails with ErrNameConflict and is retried). Such short timeouts would
// cause false suspicions on a busy network; do not use it across hosts.
func DefaultLocalConfig() Config {
	m := memberlist.DefaultLocalConfig()
	c := DefaultLANConfig()
	c.BindAddr = "127.0.0.1"
	c.BindPort = 0
	c.JoinRetries = 20
	c.JoinRetryInterval = 200 * time.Millisecond
	c.ReconnectInterval = time.Second
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.IndirectChecks = m.IndirectChecks
	c.SuspicionMult = m.SuspicionMult
	c.SuspicionMaxTimeoutMult = 2
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = time.Second
	c.TCPTimeout = m.TCPTimeout
	c.GossipToTheDeadTime = m.GossipToTheDeadTime
	c.DeadNodeReclaimTime = time.Second
	return c
}

// DeadAfter is the shortest silence after which the other members may
// declare this one dead: memberlist's least suspicion timeout,
// SuspicionMult × ProbeInterval (the log10(members) factor is at least 1,
// and confirmations shrink the timeout down to this, never below). A
// process that stalled longer than this (a GC pause, a frozen VM) must
// assume the others declared it dead and restored what it held.
func (c Config) DeadAfter() time.Duration {
	c = c.withDefaults()
	return time.Duration(c.SuspicionMult) * c.ProbeInterval
}

// withDefaults returns c with its zero fields filled as documented.
func (c Config) withDefaults() Config {
	d := DefaultLANConfig()
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if c.JoinRetryInterval == 0 {
		c.JoinRetryInterval = d.JoinRetryInterval
	}
	fillDuration(&c.ReconnectInterval, d.ReconnectInterval)
	fillDuration(&c.ReconnectHorizon, d.ReconnectHorizon)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	fillDuration(&c.ProbeInterval, d.ProbeInterval)
	fillDuration(&c.ProbeTimeout, d.ProbeTimeout)
	fillInt(&c.IndirectChecks, d.IndirectChecks)
	fillInt(&c.SuspicionMult, d.SuspicionMult)
	fillInt(&c.SuspicionMaxTimeoutMult, d.SuspicionMaxTimeoutMult)
	fillDuration(&c.GossipInterval, d.GossipInterval)
	fillInt(&c.GossipNodes, d.GossipNodes)
	fillInt(&c.RetransmitMult, d.RetransmitMult)
	fillDuration(&c.PushPullInterval, d.PushPullInterval)
	fillDuration(&c.TCPTimeout, d.TCPTimeout)
	fillDuration(&c.GossipToTheDeadTime, d.GossipToTheDeadTime)
	if c.Label == "" {
		c.Label = DefaultLabel
	}
	fillInt(&c.MaxInboundStreams, DefaultMaxInboundStreams)
	fillDuration(&c.InboundStreamTimeout, DefaultInboundStreamTimeout)
	return c
}

func fillDuration(d *time.Duration, def time.Duration) {
	if *d == 0 {
		*d = def
	}
}

func fillInt(i *int, def int) {
	if *i == 0 {
		*i = def
	}
}

// Validate reports every problem with c, after its zero fields take their
// defaults, that would make Start fail or misbehave.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	switch {
	case c.Name == "":
		bad("name is required")
	case len(c.Name) > MaxNameSize:
		bad("name is %d bytes, more than %d", len(c.Name), MaxNameSize)
	}
	if net.ParseIP(c.BindAddr) == nil {
		bad("bind address %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		bad("advertise address %q is not an IP address", c.AdvertiseAddr)
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		bad("bind port %d out of range", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		bad("advertise port %d out of range", c.AdvertisePort)
	}
	meta := c.Meta
	if meta.BootID == "" {
		meta.BootID = strings.Repeat("0", bootIDLen) // as Start will, so the size is right
	}
	if n := len(meta.encode()); n > MaxMetaSize {
		bad("meta is %d bytes encoded, more than %d", n, MaxMetaSize)
	}
	if len(c.Label) > MaxLabelSize {
		bad("label is %d bytes, more than %d", len(c.Label), MaxLabelSize)
	}
	for i, s := range c.Secrets {
		if len(s) == 0 {
			bad("secret %d is empty", i)
		}
	}
	for _, a := range c.Join {
		if a == "" {
			bad("empty join address in %q", c.Join)
			break
		}
	}
	if c.JoinRetries < 0 {
		bad("join retries %d is negative", c.JoinRetries)
	}
	for _, f := range []signed{
		signedField("join retry interval", c.JoinRetryInterval),
		signedField("probe interval", c.ProbeInterval),
		signedField("probe timeout", c.ProbeTimeout),
		signedField("gossip interval", c.GossipInterval),
		signedField("push/pull interval", c.PushPullInterval),
		signedField("TCP timeout", c.TCPTimeout),
		signedField("gossip-to-the-dead time", c.GossipToTheDeadTime),
		signedField("dead node reclaim time", c.DeadNodeReclaimTime),
		signedField("reconnect horizon", c.ReconnectHorizon),
		signedField("indirect checks", c.IndirectChecks),
		signedField("suspicion multiplier", c.SuspicionMult),
		signedField("suspicion max timeout multiplier", c.SuspicionMaxTimeoutMult),
		signedField("gossip nodes", c.GossipNodes),
		signedField("retransmit multiplier", c.RetransmitMult),
		signedField("max inbound streams", c.MaxInboundStreams),
		signedField("inbound stream timeout", c.InboundStreamTimeout),
	} {
		if f.negative {
			bad("%s %v is negative", f.name, f.v)
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval && c.ProbeTimeout > 0 && c.ProbeInterval > 0 {
		bad("probe timeout %v is not shorter than the probe interval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gossip: invalid config: %w", err)
	}
	return nil
}

// signed is a config field that must not be negative: a duration or a
// count.
type signed struct {
	name     string
	v        any // printed with %v
	negative bool
}

func signedField[T time.Duration | int](name string, v T) signed {
	return signed{name, v, v < 0}
}

// memberlistConfig translates c, with defaults filled, into memberlist's
// configuration, with d as every delegate.
func (c Config) memberlistConfig(d *delegate) (*memberlist.Config, error) {
	m := memberlist.DefaultLANConfig()
	kr, err := keyring(c.Secrets)
	if err != nil {
		return nil, err
	}
	m.Keyring = kr
	m.GossipVerifyIncoming = kr != nil
	m.GossipVerifyOutgoing = kr != nil
	m.Label = c.Label
	m.Name = c.Name
	m.BindAddr = c.BindAddr
	m.BindPort = c.BindPort
	m.AdvertiseAddr = c.AdvertiseAddr
	m.AdvertisePort = c.AdvertisePort
	if m.AdvertisePort == 0 {
		// memberlist replaces it with the actual port when BindPort is 0,
		// and uses it only with an explicit AdvertiseAddr.
		m.AdvertisePort = c.BindPort
	}
	m.ProbeInterval = c.ProbeInterval
	m.ProbeTimeout = c.ProbeTimeout
	m.IndirectChecks = c.IndirectChecks
	m.SuspicionMult = c.SuspicionMult
	m.SuspicionMaxTimeoutMult = c.SuspicionMaxTimeoutMult
	m.GossipInterval = c.GossipInterval
	m.GossipNodes = c.GossipNodes
	m.RetransmitMult = c.RetransmitMult
	m.PushPullInterval = c.PushPullInterval
	m.TCPTimeout = c.TCPTimeout
	m.GossipToTheDeadTime = c.GossipToTheDeadTime
	m.DeadNodeReclaimTime = c.DeadNodeReclaimTime
	if c.dnsConfigPath != "" {
		m.DNSConfigPath = c.dnsConfigPath
	}
	m.Logger = newStdLogger(c.Logger)
	m.Delegate = d
	m.Events = d
	m.Conflict = d
	m.Alive = d
	return m, nil
}
