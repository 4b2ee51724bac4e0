package router

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"strings"
	"sync"
)

// Lease is what the opaque Lease string handed to clients carries: every
// key the acquire charged (the tenant's first, then the others in
// chainOrder) with its Lease id, enough to route complete and renew to each
// key's owner.
type Lease struct {
	Tenant string
	// Node is the node that admitted it: the only one that holds its
	// sides admitted by the fallback.
	Node  string
	n     int
	sides [MaxSides]LeaseSide
}

// LeaseSide is one key of a lease.
type LeaseSide struct {
	Key string
	ID  uint64
	// Fallback marks a side admitted by the Fallback limiter of node Node
	// while its owner was unreachable.
	Fallback bool
}

// Add appends a side; a lease holds at most MaxSides.
func (l *Lease) Add(key string, id uint64, fallback bool) {
	if l.n < MaxSides {
		l.sides[l.n] = LeaseSide{key, id, fallback}
		l.n++
	}
}

// Sides returns l's sides, the tenant's first.
func (l *Lease) Sides() []LeaseSide { return l.sides[:l.n] }

// The lease text is base64url (no padding) of a payload and an HMAC-SHA256
// tag (leaseTagLen bytes) over the payload. The tag binds every field
// together: a client cannot change the tenant, add, drop or swap a key,
// point a side at another key's lease id, or mark a side as admitted by the
// fallback, without the key.
//
// Two payloads are written. Version 2 (every lease before chains, and still
// every lease of a tenant alone or a tenant and its pool, so that those
// cost what they did): the version byte, a flags byte (1: the tenant's side
// is a fallback's, 2: the pool's), the tenant's and the pool's lease ids as
// uvarints, the tenant, pool and node names as uvarint length + bytes (the
// pool "" for none). Version 3 (any other chain): the version byte, the
// number of sides n (1 to MaxSides), then per side a flags byte (1:
// fallback) and its lease id as a uvarint, then the tenant and node names
// and the keys of sides 2 to n as uvarint length + bytes (the first side's
// key is always the tenant's). Both are read back, so leases handed out
// before an upgrade still complete.
const (
	leaseV2     = 2
	leaseV3     = 3
	leaseTagLen = sha256.Size
)

var (
	errLease          = errors.New("malformed lease")
	errLeaseSignature = errors.New("lease signature does not verify: forged, altered, or issued by another cluster")
)

// v2 reports whether l is written as version 2: a tenant alone or a
// tenant and a pool.
func (l *Lease) v2() bool {
	return l.n == 1 || (l.n == 2 && len(l.sides[1].Key) > 2 && strings.HasPrefix(l.sides[1].Key, "p:"))
}

// appendPayload appends l's fields, without the tag.
func (l *Lease) appendPayload(b []byte) []byte {
	if l.v2() {
		return l.appendV2(b)
	}
	b = append(b, leaseV3, byte(l.n))
	for _, s := range l.Sides() {
		var flags byte
		if s.Fallback {
			flags = 1
		}
		b = binary.AppendUvarint(append(b, flags), s.ID)
	}
	b = appendLeaseString(b, l.Tenant)
	b = appendLeaseString(b, l.Node)
	for _, s := range l.Sides()[1:] {
		b = appendLeaseString(b, s.Key)
	}
	return b
}

func (l *Lease) appendV2(b []byte) []byte {
	var flags byte
	var pool LeaseSide
	if l.n == 2 {
		pool = l.sides[1]
	}
	if l.sides[0].Fallback {
		flags |= 1
	}
	if pool.Fallback {
		flags |= 2
	}
	b = append(b, leaseV2, flags)
	b = binary.AppendUvarint(b, l.sides[0].ID)
	b = binary.AppendUvarint(b, pool.ID)
	b = appendLeaseString(b, l.Tenant)
	b = appendLeaseString(b, strings.TrimPrefix(pool.Key, "p:"))
	return appendLeaseString(b, l.Node)
}

func appendLeaseString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// payloadReader reads a payload's fields; b becomes nil at the first
// field that is not there.
type payloadReader struct{ b []byte }

func (p *payloadReader) uvarint() uint64 {
	if p.b == nil {
		return 0
	}
	v, n := binary.Uvarint(p.b)
	if n <= 0 {
		p.b = nil
		return 0
	}
	p.b = p.b[n:]
	return v
}

func (p *payloadReader) byte() byte {
	if len(p.b) == 0 {
		p.b = nil
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

func (p *payloadReader) string() string {
	n := p.uvarint()
	if p.b == nil || n > uint64(len(p.b)) {
		p.b = nil
		return ""
	}
	s := string(p.b[:n])
	p.b = p.b[n:]
	return s
}

// parsePayload is the inverse of appendPayload: the payload must hold
// exactly the fields, with a tenant.
func parsePayload(b []byte) (Lease, error) {
	if len(b) < 2 {
		return Lease{}, errLease
	}
	p := payloadReader{b[2:]}
	var l Lease
	switch {
	case b[0] == leaseV2 && b[1]&^3 == 0:
		tid, pid := p.uvarint(), p.uvarint()
		l.Tenant = p.string()
		pool := p.string()
		l.Node = p.string()
		l.Add(TenantKey(l.Tenant), tid, b[1]&1 != 0)
		if pool != "" {
			l.Add(PoolKey(pool), pid, b[1]&2 != 0)
		}
	case b[0] == leaseV3 && b[1] >= 1 && b[1] <= MaxSides:
		l.n = int(b[1])
		for i := range l.n {
			flags := p.byte()
			l.sides[i] = LeaseSide{ID: p.uvarint(), Fallback: flags == 1}
			if flags&^1 != 0 {
				return Lease{}, errLease
			}
		}
		l.Tenant = p.string()
		l.Node = p.string()
		l.sides[0].Key = TenantKey(l.Tenant)
		for i := 1; i < l.n; i++ {
			if l.sides[i].Key = p.string(); l.sides[i].Key == "" {
				return Lease{}, errLease
			}
		}
	default:
		return Lease{}, errLease
	}
	if p.b == nil || len(p.b) != 0 || l.Tenant == "" {
		return Lease{}, errLease
	}
	return l, nil
}

// leaseSigner signs the leases this cluster hands out and verifies the ones
// clients bring back, with HMAC-SHA256 under keys derived from the cluster
// secrets: the first key signs, every key verifies (so a secret being
// rotated in or out is accepted during the rotation). Without secrets the
// key is a fixed, public one: the tag then only catches corruption, and a
// lease's protection is that its ids are random 64-bit numbers known only to
// the client that was given it. Safe for concurrent use.
type leaseSigner struct {
	macs []*sync.Pool // of hash.Hash, one pool per key, in the order of the secrets
}

// leaseKeyLabel separates the lease key from every other use of a secret.
const leaseKeyLabel = "tokenring lease key v1"

func newLeaseSigner(secrets [][]byte) *leaseSigner {
	keys := make([][]byte, 0, max(1, len(secrets)))
	for _, s := range secrets {
		m := hmac.New(sha256.New, s)
		m.Write([]byte(leaseKeyLabel))
		keys = append(keys, m.Sum(nil))
	}
	if len(keys) == 0 {
		k := sha256.Sum256([]byte(leaseKeyLabel + " (no cluster secret)"))
		keys = append(keys, k[:])
	}
	s := &leaseSigner{}
	for _, k := range keys {
		s.macs = append(s.macs, &sync.Pool{New: func() any { return hmac.New(sha256.New, k) }})
	}
	return s
}

// tag appends the tag of payload under key i to dst.
func (s *leaseSigner) tag(dst []byte, i int, payload []byte) []byte {
	m := s.macs[i].Get().(hash.Hash)
	m.Reset()
	m.Write(payload)
	dst = m.Sum(dst)
	s.macs[i].Put(m)
	return dst
}

// sign returns l's lease text, tagged with the first key.
func (s *leaseSigner) sign(l Lease) string {
	bp := bodyBuffers.Get().(*[]byte)
	defer putBody(bp)
	b := l.appendPayload((*bp)[:0])
	b = s.tag(b, 0, b)
	n := len(b)
	b = base64.RawURLEncoding.AppendEncode(b, b)
	*bp = b
	return string(b[n:])
}

// open returns the lease of text: errLease when it is not a lease at all,
// errLeaseSignature when its tag matches none of the keys.
func (s *leaseSigner) open(text string) (Lease, error) {
	if len(text) == 0 || len(text) > maxLeaseText {
		return Lease{}, errLease
	}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(b) < 2+leaseTagLen {
		return Lease{}, errLease
	}
	payload, got := b[:len(b)-leaseTagLen], b[len(b)-leaseTagLen:]
	l, err := parsePayload(payload)
	if err != nil {
		return Lease{}, err
	}
	var want [leaseTagLen]byte
	for i := range s.macs {
		if hmac.Equal(s.tag(want[:0], i, payload), got) {
			return l, nil
		}
	}
	return Lease{}, errLeaseSignature
}
