// Package ring maps keys to the cluster member that owns them.
//
// A key hashes (xxhash) to one of a fixed number of partitions, and each
// partition has one owner, chosen by consistent hashing with bounded loads
// (github.com/buraksezer/consistent): no member owns more than
// ceil(PartitionCount / members × Load) partitions. The partition, not the
// key, is the unit that moves when membership changes; Moves lists the
// partitions whose owner differs between two rings, which is the work list of
// a handoff. Bounded load means a change can move partitions between members
// that were there before and after, not only to a joiner or from a leaver.
//
// A Ring is immutable: build a new one with New whenever the member list
// changes. Every node that builds a ring from the same member list (in any
// order) and the same Config gets the same placement, and the same Version.
// All methods of a Ring are safe for concurrent use; Owner does not lock or
// allocate.
//
// The package does no I/O and starts no goroutines.
package ring

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

// Defaults for the zero fields of Config. They are the defaults of
// buraksezer/consistent.
const (
	DefaultPartitionCount    = 271
	DefaultReplicationFactor = 20
	DefaultLoad              = 1.25
)

// Limits on Config, so that a typo is an error rather than an out-of-memory
// crash.
const (
	MaxPartitionCount    = 1 << 16
	MaxReplicationFactor = 1 << 10
)

// Config controls the placement of partitions. Every member of a cluster must
// use the same Config: a different value gives a different placement (and a
// different Version). The zero value is usable: each zero field takes the
// Default of the same name.
type Config struct {
	// PartitionCount is the number of partitions keys are hashed into, and
	// so the granularity of a handoff: a membership change moves whole
	// partitions. More partitions spread load more evenly and make each
	// handoff smaller, at the cost of a longer Moves list and more per-
	// partition bookkeeping in the node. A prime spreads keys uniformly.
	// It cannot change while the cluster runs: partition numbers of rings
	// with different counts are not comparable. Zero means
	// DefaultPartitionCount (271); at most MaxPartitionCount.
	PartitionCount int

	// ReplicationFactor is the number of virtual nodes each member has on
	// the hash circle. More virtual nodes spread partitions more evenly
	// (fewer of them are placed by the load bound rather than by the hash)
	// at the cost of build time and memory, both linear in members ×
	// ReplicationFactor. It is not data replication: see Backup. Zero
	// means DefaultReplicationFactor (20); at most MaxReplicationFactor.
	ReplicationFactor int

	// Load bounds the partitions of one member to ceil(PartitionCount /
	// members × Load). Closer to 1 means a more even spread but more
	// partitions that move between surviving members on a membership
	// change; larger means fewer such moves but more imbalance. Zero means
	// DefaultLoad (1.25); it must be at least 1 (below 1 the members
	// cannot hold every partition) and finite.
	Load float64
}

// withDefaults returns c with its zero fields filled.
func (c Config) withDefaults() Config {
	if c.PartitionCount == 0 {
		c.PartitionCount = DefaultPartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	return c
}

// Validate reports whether c, after its zero fields take their defaults, is
// usable.
func (c Config) Validate() error {
	c = c.withDefaults()
	if c.PartitionCount < 1 || c.PartitionCount > MaxPartitionCount {
		return fmt.Errorf("ring: partition count %d out of range [1, %d]", c.PartitionCount, MaxPartitionCount)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > MaxReplicationFactor {
		return fmt.Errorf("ring: replication factor %d out of range [1, %d]", c.ReplicationFactor, MaxReplicationFactor)
	}
	if math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1 {
		return fmt.Errorf("ring: load %v must be finite and at least 1", c.Load)
	}
	return nil
}

// Member is one node of the cluster as the ring sees it: a unique name, which
// alone decides placement, and the addresses other nodes use to reach it
// (carried for routing and the admin endpoint; they do not affect placement
// but do affect Version).
type Member struct {
	Name   string // unique in the cluster; must not be empty
	HTTP   string // client API, LLM proxy and admin address
	Peer   string // node-to-node protocol address
	Gossip string // memberlist address
	// LimitsHash identifies the limits the member admits with (the
	// config's LimitsHash); empty when unknown (an older member).
	LimitsHash string
}

// String returns the member's name. It makes Member a consistent.Member.
func (m Member) String() string { return m.Name }

// Move is one partition whose owner differs between two rings. From or To is
// "" when the old or new ring had no member at all.
type Move struct {
	Partition int
	From      string // owner in the old ring
	To        string // owner in the new ring
}

// noOwner marks a partition without an owner (a ring with no members) or
// without a backup (fewer than two members).
const noOwner = -1

// Ring is an immutable assignment of partitions to members. The zero value
// is not usable; build one with New.
type Ring struct {
	cfg     Config   // with defaults filled
	members []Member // sorted by name
	owners  []int32  // partition -> index in members, or noOwner
	backups []int32  // partition -> index in members, or noOwner
	// backupsOf: index of an owner in members -> the members that back its
	// partitions up, closest first (at most MaxBackups); backups[p] is
	// the first of its owner's.
	backupsOf [][]int32
	counts    []int // index in members -> partitions owned
	version   string
}

// hasher is the consistent.Hasher of every ring: xxhash, 64 bits.
type hasher struct{}

// Sum64 returns the xxhash of b.
func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// New builds the ring of members under cfg. The order of members does not
// matter: they are sorted by name first, so every node builds the same ring
// from the same list. It returns an error, and never panics, if cfg is
// invalid or a name is empty or repeated. An empty (or nil) list is valid
// and gives a ring that owns nothing.
func New(cfg Config, members []Member) (*Ring, error) {
	return build(cfg, members, hasher{})
}

// build is New with the placement hash injected, so a test can force
// degenerate placements. Keys are always hashed with xxhash by Partition.
func build(cfg Config, members []Member, h consistent.Hasher) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sorted, err := sortedMembers(members)
	if err != nil {
		return nil, err
	}
	r := &Ring{
		cfg:       cfg,
		members:   sorted,
		owners:    make([]int32, cfg.PartitionCount),
		backups:   make([]int32, cfg.PartitionCount),
		backupsOf: make([][]int32, len(sorted)),
		counts:    make([]int, len(sorted)),
		version:   version(cfg, sorted),
	}
	if len(sorted) == 0 {
		r.ownNothing()
		return r, nil
	}
	if err := r.place(h); err != nil {
		return nil, err
	}
	return r, nil
}

// sortedMembers returns a copy of members sorted by name, or an error if a
// name is empty or repeated.
func sortedMembers(members []Member) ([]Member, error) {
	sorted := slices.Clone(members)
	slices.SortFunc(sorted, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	for i, m := range sorted {
		if m.Name == "" {
			return nil, errors.New("ring: member with an empty name")
		}
		if i > 0 && sorted[i-1].Name == m.Name {
			return nil, fmt.Errorf("ring: duplicate member name %q", m.Name)
		}
	}
	return sorted, nil
}

// ownNothing marks every partition of r as having neither owner nor
// backup: the placement of a ring without members.
func (r *Ring) ownNothing() {
	for p := range r.owners {
		r.owners[p], r.backups[p] = noOwner, noOwner
	}
}

// place fills r's owners, backups and counts by consistent hashing with
// bounded loads under r.cfg, hashing the members on the circle with h. r
// must have at least one member, and its counts must be zero.
//
// consistent panics on placements it cannot make ("not enough room to
// distribute partitions"). Validate rules out the configurations that cause
// it, but a panic in a library must not take the node down with it, so
// place turns any that remains into an error.
func (r *Ring) place(h consistent.Hasher) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("ring: place %d partitions on %d members: %v", r.cfg.PartitionCount, len(r.members), v)
		}
	}()
	pl := newPlacer(r.cfg, r.members, h)
	for p := range r.owners {
		o, err := pl.owner(p)
		if err != nil {
			return err
		}
		bs, err := pl.backups(p, o)
		if err != nil {
			return err
		}
		b := int32(noOwner)
		if len(bs) > 0 {
			b = bs[0]
		}
		r.owners[p], r.backups[p], r.backupsOf[o] = o, b, bs
		r.counts[o]++
	}
	return nil
}

// placer answers, for one ring, which member owns a partition and which
// backs it up, as indices into the ring's sorted members.
type placer struct {
	c        *consistent.Consistent
	index    map[string]int32  // member name -> index in the sorted members
	backupOf map[int32][]int32 // owner -> its backups, closest first, for the owners asked about so far
}

// newPlacer hashes the sorted members (at least one) onto a consistent
// circle configured by cfg, with h. It panics where consistent.New does.
func newPlacer(cfg Config, sorted []Member, h consistent.Hasher) *placer {
	index := make(map[string]int32, len(sorted))
	cmembers := make([]consistent.Member, len(sorted))
	for i, m := range sorted {
		index[m.Name] = int32(i)
		cmembers[i] = m
	}
	c := consistent.New(cmembers, consistent.Config{
		Hasher:            h,
		PartitionCount:    cfg.PartitionCount,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
	return &placer{c: c, index: index, backupOf: make(map[int32][]int32, len(sorted))}
}

// owner returns the member that owns partition p.
func (pl *placer) owner(p int) (int32, error) {
	om := pl.c.GetPartitionOwner(p)
	if om == nil {
		return 0, fmt.Errorf("ring: partition %d has no owner among %d members", p, len(pl.index))
	}
	return pl.index[om.String()], nil
}

// backups returns the backups of partition p, whose owner is o: the
// members closest to p other than o, closest first, at most MaxBackups
// (none if o is the only member). The backups of a partition depend only
// on its owner in consistent (the owner's successors among the members
// hashed by name), so they are looked up once per owner rather than once
// per partition.
func (pl *placer) backups(p int, o int32) ([]int32, error) {
	if bs, ok := pl.backupOf[o]; ok {
		return bs, nil
	}
	closest, err := pl.c.GetClosestNForPartition(p, len(pl.index))
	if err != nil {
		return nil, fmt.Errorf("ring: backups of partition %d: %w", p, err)
	}
	var bs []int32
	for _, m := range closest {
		if i := pl.index[m.String()]; i != o && len(bs) < MaxBackups {
			bs = append(bs, i)
		}
	}
	pl.backupOf[o] = bs
	return bs, nil
}

// version digests cfg and the sorted members (every field, length-prefixed
// so that no two lists share an encoding).
func version(cfg Config, sorted []Member) string {
	d := xxhash.New()
	var buf [binary.MaxVarintLen64]byte
	putInt := func(v uint64) {
		n := binary.PutUvarint(buf[:], v)
		_, _ = d.Write(buf[:n])
	}
	putString := func(s string) {
		putInt(uint64(len(s)))
		_, _ = d.WriteString(s)
	}
	putString("tokenring/ring/v1")
	putInt(uint64(cfg.PartitionCount))
	putInt(uint64(cfg.ReplicationFactor))
	putInt(math.Float64bits(cfg.Load))
	putInt(uint64(len(sorted)))
	for _, m := range sorted {
		putString(m.Name)
		putString(m.HTTP)
		putString(m.Peer)
		putString(m.Gossip)
	}
	return fmt.Sprintf("%016x", d.Sum64())
}

// Partition returns the partition of key: xxhash(key) mod PartitionCount. It
// is the same on every ring with the same PartitionCount, whatever the
// members.
func (r *Ring) Partition(key string) int {
	return int(xxhash.Sum64String(key) % uint64(len(r.owners)))
}

// Owner returns the member that owns key, or false if the ring has no
// members. It does not lock or allocate.
func (r *Ring) Owner(key string) (Member, bool) {
	return r.PartitionOwner(r.Partition(key))
}

// PartitionOwner returns the owner of partition p, or false if the ring has
// no members or p is not in [0, PartitionCount).
func (r *Ring) PartitionOwner(p int) (Member, bool) {
	return r.at(r.owners, p)
}

// Backup returns the member that should hold a replica of key's state: the
// next member after the owner of key's partition, in the order of
// consistent's GetClosestN. It is never the owner; it returns false if the
// ring has fewer than two members.
func (r *Ring) Backup(key string) (Member, bool) {
	return r.PartitionBackup(r.Partition(key))
}

// PartitionBackup returns the backup of partition p (see Backup), or false
// if the ring has fewer than two members or p is out of range.
func (r *Ring) PartitionBackup(p int) (Member, bool) {
	return r.at(r.backups, p)
}

// MaxBackups is the most backups a partition can have (see
// PartitionBackups).
const MaxBackups = 7

// Backups returns the first n backups of key's partition (see
// PartitionBackups).
func (r *Ring) Backups(key string, n int) []Member {
	return r.PartitionBackups(r.Partition(key), n)
}

// PartitionBackups returns the first n backups of partition p: the members
// closest to it other than its owner, closest first, so the first is
// PartitionBackup. Fewer when the ring has fewer than n+1 members (or n is
// above MaxBackups); none when p is out of range. Every member computes
// the same list from the same ring.
func (r *Ring) PartitionBackups(p, n int) []Member {
	if p < 0 || p >= len(r.owners) || r.owners[p] == noOwner {
		return nil
	}
	bs := r.backupsOf[r.owners[p]]
	bs = bs[:min(n, len(bs))]
	out := make([]Member, len(bs))
	for i, b := range bs {
		out[i] = r.members[b]
	}
	return out
}

// at returns the member at table[p].
func (r *Ring) at(table []int32, p int) (Member, bool) {
	if p < 0 || p >= len(table) {
		return Member{}, false
	}
	i := table[p]
	if i == noOwner {
		return Member{}, false
	}
	return r.members[i], true
}

// Len is the number of members.
func (r *Ring) Len() int { return len(r.members) }

// Members returns a copy of the members, sorted by name.
func (r *Ring) Members() []Member {
	return slices.Clone(r.members)
}

// Partitions returns the number of partitions each member owns, keyed by
// name. Every member has an entry (possibly 0); with at least one member the
// counts add up to PartitionCount.
func (r *Ring) Partitions() map[string]int {
	res := make(map[string]int, len(r.members))
	for i, m := range r.members {
		res[m.Name] = r.counts[i]
	}
	return res
}

// OwnedPartitions returns the partitions owned by the member called name, in
// increasing order; none if there is no such member.
func (r *Ring) OwnedPartitions(name string) []int {
	i, ok := slices.BinarySearchFunc(r.members, name, func(m Member, n string) int { return cmp.Compare(m.Name, n) })
	if !ok {
		return nil
	}
	res := make([]int, 0, r.counts[i])
	for p, o := range r.owners {
		if o == int32(i) {
			res = append(res, p)
		}
	}
	return res
}

// PartitionCount returns the number of partitions.
func (r *Ring) PartitionCount() int { return len(r.owners) }

// Config returns the configuration of the ring, with defaults filled.
func (r *Ring) Config() Config { return r.cfg }

// Version returns a digest, as 16 hex digits, of the Config and of the
// member list (names and addresses). Two rings with the same Version have
// the same placement; nodes compare versions to check they agree.
func (r *Ring) Version() string { return r.version }

// String describes the ring for logs.
func (r *Ring) String() string {
	return "ring " + r.version + " (" + strconv.Itoa(len(r.members)) + " members, " +
		strconv.Itoa(len(r.owners)) + " partitions)"
}

// Moves returns, in increasing partition order, every partition whose owner
// in next differs from its owner in prev. A nil or memberless prev owns
// nothing, so every owned partition of next moves From ""; likewise a nil or
// memberless next makes every owned partition of prev move To "". If the two
// rings have different partition counts their partition numbers are not
// comparable, and Moves treats prev as nil. Owners are compared by name: a
// member that kept its name but changed address has not moved.
func Moves(prev, next *Ring) []Move {
	if prev != nil && next != nil && len(prev.owners) != len(next.owners) {
		prev = nil
	}
	n := 0
	if prev != nil {
		n = len(prev.owners)
	}
	if next != nil {
		n = len(next.owners)
	}
	var moves []Move
	for p := range n {
		from, to := prev.ownerName(p), next.ownerName(p)
		if from != to {
			moves = append(moves, Move{Partition: p, From: from, To: to})
		}
	}
	return moves
}

// ownerName returns the name of the owner of partition p, or "" if r is nil
// or has no members.
func (r *Ring) ownerName(p int) string {
	if r == nil {
		return ""
	}
	if i := r.owners[p]; i != noOwner {
		return r.members[i].Name
	}
	return ""
}
