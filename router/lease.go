package router

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
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

const leaseVersion = 1

var errLease = errors.New("malformed lease")

func (l lease) String() string {
	b := make([]byte, 0, 32+len(l.Tenant)+len(l.Pool)+len(l.Node))
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
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseLease(s string) (lease, error) {
	if len(s) == 0 || len(s) > 1024 {
		return lease{}, errLease
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != leaseVersion || b[1]&^3 != 0 {
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
