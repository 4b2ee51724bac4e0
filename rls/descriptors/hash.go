package descriptors

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
)

// Hash returns a digest of the configuration as parsed (SHA-256, in hex):
// equal for two Configs that match every descriptor alike, on any node and
// whatever the files' names, order, comments or layout; different, but for
// a collision, when a limit, a flag or the tree differs. It covers what
// Match, MatchKey and LimitsOf read, and not metadata.
func (c *Config) Hash() string { return c.hash }

// digestVersion starts the digested text: a change of what it covers
// changes every digest.
const digestVersion = "tokenring rls/descriptors 1"

// digest returns the hex SHA-256 of a canonical text of domains: each
// string after its length, domains and children in sorted order, wildcard
// children also in their (matching) order.
func digest(domains map[string]*node) string {
	d := digester{h: sha256.New()}
	d.str(digestVersion)
	names := make([]string, 0, len(domains))
	for name := range domains {
		names = append(names, name)
	}
	slices.Sort(names)
	d.num(int64(len(names)))
	for _, name := range names {
		d.str(name)
		d.node(domains[name])
	}
	return hex.EncodeToString(d.h.Sum(nil))
}

// digester writes values into a hash unambiguously.
type digester struct{ h hash.Hash }

func (d digester) num(n int64) {
	var b [binary.MaxVarintLen64]byte
	d.h.Write(b[:binary.PutVarint(b[:], n)])
}

func (d digester) str(s string) {
	d.num(int64(len(s)))
	d.h.Write([]byte(s))
}

func (d digester) flag(b bool) {
	if b {
		d.num(1)
	} else {
		d.num(0)
	}
}

func (d digester) node(n *node) {
	d.str(n.key)
	d.flag(n.valueToMetric)
	d.flag(n.shareThreshold)
	d.flag(n.limit != nil)
	if l := n.limit; l != nil {
		d.str(l.Name)
		d.num(int64(l.Unit))
		d.num(int64(l.RequestsPerUnit))
		d.flag(l.Unlimited)
		d.flag(l.ShadowMode)
		d.flag(l.QuotaMode)
		d.flag(l.DetailedMetric)
		d.num(int64(len(l.Replaces)))
		for _, r := range l.Replaces {
			d.str(r)
		}
		d.num(l.TokensPerUnit)
		d.num(l.Concurrency)
		d.str(l.RequestIDKey)
	}
	d.num(int64(len(n.wildcards)))
	for _, w := range n.wildcards {
		d.str(w.key)
	}
	keys := make([]string, 0, len(n.children))
	for k := range n.children {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	d.num(int64(len(keys)))
	for _, k := range keys {
		d.node(n.children[k])
	}
}
