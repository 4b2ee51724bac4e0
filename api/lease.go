package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"strings"
	"sync"

	"github.com/tokenring/tokenring/router"
)

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
// number of sides n (1 to router.MaxSides), then per side a flags byte (1:
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

// isV2 reports whether l is written as version 2: a tenant alone or a
// tenant and a pool.
func isV2(l *router.Lease) bool {
	sides := l.Sides()
	return len(sides) == 1 || (len(sides) == 2 && len(sides[1].Key) > 2 && strings.HasPrefix(sides[1].Key, "p:"))
}

// appendPayload appends l's fields, without the tag.
func appendPayload(b []byte, l *router.Lease) []byte {
	if isV2(l) {
		return appendV2(b, l)
	}
	sides := l.Sides()
	b = append(b, leaseV3, byte(len(sides)))
	for _, s := range sides {
		var flags byte
		if s.Fallback {
			flags = 1
		}
		b = binary.AppendUvarint(append(b, flags), s.ID)
	}
	b = appendLeaseString(b, l.Tenant)
	b = appendLeaseString(b, l.Node)
	for _, s := range sides[1:] {
		b = appendLeaseString(b, s.Key)
	}
	return b
}

func appendV2(b []byte, l *router.Lease) []byte {
	var flags byte
	var pool router.LeaseSide
	sides := l.Sides()
	if len(sides) == 2 {
		pool = sides[1]
	}
	if sides[0].Fallback {
		flags |= 1
	}
	if pool.Fallback {
		flags |= 2
	}
	b = append(b, leaseV2, flags)
	b = binary.AppendUvarint(b, sides[0].ID)
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
func parsePayload(b []byte) (router.Lease, error) {
	if len(b) < 2 {
		return router.Lease{}, errLease
	}
	p := payloadReader{b[2:]}
	var l router.Lease
	switch {
	case b[0] == leaseV2 && b[1]&^3 == 0:
		tid, pid := p.uvarint(), p.uvarint()
		l.Tenant = p.string()
		pool := p.string()
		l.Node = p.string()
		l.Add(router.TenantKey(l.Tenant), tid, b[1]&1 != 0)
		if pool != "" {
			l.Add(router.PoolKey(pool), pid, b[1]&2 != 0)
		}
	case b[0] == leaseV3 && b[1] >= 1 && b[1] <= router.MaxSides:
		n := int(b[1])
		var ids [router.MaxSides]uint64
		var fallback [router.MaxSides]bool
		for i := range n {
			flags := p.byte()
			ids[i], fallback[i] = p.uvarint(), flags == 1
			if flags&^1 != 0 {
				return router.Lease{}, errLease
			}
		}
		l.Tenant = p.string()
		l.Node = p.string()
		l.Add(router.TenantKey(l.Tenant), ids[0], fallback[0])
		for i := 1; i < n; i++ {
			key := p.string()
			if key == "" {
				return router.Lease{}, errLease
			}
			l.Add(key, ids[i], fallback[i])
		}
	default:
		return router.Lease{}, errLease
	}
	if p.b == nil || len(p.b) != 0 || l.Tenant == "" {
		return router.Lease{}, errLease
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
func (s *leaseSigner) sign(l router.Lease) string {
	bp := bodyBuffers.Get().(*[]byte)
	defer putBody(bp)
	b := appendPayload((*bp)[:0], &l)
	b = s.tag(b, 0, b)
	n := len(b)
	b = base64.RawURLEncoding.AppendEncode(b, b)
	*bp = b
	return string(b[n:])
}

// open returns the lease of text: errLease when it is not a lease at all,
// errLeaseSignature when its tag matches none of the keys.
func (s *leaseSigner) open(text string) (router.Lease, error) {
	if len(text) == 0 || len(text) > maxLeaseText {
		return router.Lease{}, errLease
	}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(b) < 2+leaseTagLen {
		return router.Lease{}, errLease
	}
	payload, got := b[:len(b)-leaseTagLen], b[len(b)-leaseTagLen:]
	l, err := parsePayload(payload)
	if err != nil {
		return router.Lease{}, err
	}
	var want [leaseTagLen]byte
	for i := range s.macs {
		if hmac.Equal(s.tag(want[:0], i, payload), got) {
			return l, nil
		}
	}
	return router.Lease{}, errLeaseSignature
}
