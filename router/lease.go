package router

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// lease is what the opaque lease string handed to clients carries: enough to
// route complete and renew to the owners of the tenant's and the pool's keys.
type lease struct {
	Tenant      string
	Pool        string // empty when the model maps to no pool
	TenantLease uint64 // the tenant budget's lease id
	PoolLease   uint64 // the pool budget's lease id
	// TenantFallback and PoolFallback mark sides admitted by the fallback
	// limiter of node Node while their owner was unreachable.
	TenantFallback, PoolFallback bool
	Node                         string
}

// The lease text is base64url (no padding) of: the version byte, a flags
// byte, the two lease ids as uvarints, the tenant, pool and node names as
// uvarint length + bytes, then an HMAC-SHA256 tag (leaseTagLen bytes) over
// everything before it. The tag binds every field together: a client cannot
// change the tenant, point a side at another key's lease id, or mark a side
// as admitted by the fallback, without the key.
const (
	leaseVersion = 2
	leaseTagLen  = sha256.Size
)

var (
	errLease          = errors.New("malformed lease")
	errLeaseSignature = errors.New("lease signature does not verify: forged, altered, or issued by another cluster")
)

// appendPayload appends l's fields, without the tag.
func (l lease) appendPayload(b []byte) []byte {
	var flags byte
	if l.TenantFallback {
		flags |= 1
	}
	if l.PoolFallback {
		flags |= 2
	}
	b = append(b, leaseVersion, flags)
	b = binary.AppendUvarint(b, l.TenantLease)
	b = binary.AppendUvarint(b, l.PoolLease)
	for _, s := range []string{l.Tenant, l.Pool, l.Node} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// parsePayload is the inverse of appendPayload: the payload must hold
// exactly the fields, with a tenant.
func parsePayload(b []byte) (lease, error) {
	if len(b) < 2 || b[0] != leaseVersion || b[1]&^3 != 0 {
		return lease{}, errLease
	}
	l := lease{TenantFallback: b[1]&1 != 0, PoolFallback: b[1]&2 != 0}
	b = b[2:]
	next := func() uint64 {
		if b == nil {
			return 0
		}
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := next()
		if b == nil || n > uint64(len(b)) {
			b = nil
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	l.TenantLease = next()
	l.PoolLease = next()
	l.Tenant = str()
	l.Pool = str()
	l.Node = str()
	if b == nil || len(b) != 0 || l.Tenant == "" {
		return lease{}, errLease
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
func (s *leaseSigner) sign(l lease) string {
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
func (s *leaseSigner) open(text string) (lease, error) {
	if len(text) == 0 || len(text) > maxLeaseText {
		return lease{}, errLease
	}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil || len(b) < 2+leaseTagLen {
		return lease{}, errLease
	}
	payload, got := b[:len(b)-leaseTagLen], b[len(b)-leaseTagLen:]
	l, err := parsePayload(payload)
	if err != nil {
		return lease{}, err
	}
	var want [leaseTagLen]byte
	for i := range s.macs {
		if hmac.Equal(s.tag(want[:0], i, payload), got) {
			return l, nil
		}
	}
	return lease{}, errLeaseSignature
}
