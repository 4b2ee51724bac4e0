package router

// The keys a request charges: every key its limits name, all or nothing.
//
// The keys of one acquire, in the order they are reserved (chainOrder):
//
//	t:<tenant>                       the tenant
//	t:<tenant>\x1fm:<entry>          the tenant's limits for the model, if its models map has an entry for it
//	g:<group>                        each group above the tenant, nearest first
//	g:<group>\x1fm:<entry>           the group's limits for the model, if any
//	p:<pool>                         the model's pool, if any
//
// A descriptor key (d:<domain and entries>, rls/descriptors.Key) is one
// descriptor of an Envoy rate limit request; a set of them is decided
// together by DecideHits (descriptors.go), in the order of their keys.
//
// A model-scoped key is its level's key, the control character U+001F and
// "m:" and the name of the models entry the model falls under (an exact
// name or a "prefix*"). No tenant or model name the API accepts (CheckName)
// and no group or models entry the config accepts holds a control
// character, so the first U+001F of a key ends its level's name and no two
// (level, entry) pairs share a key. Tenant, group and pool keys differ in
// their prefix, so a group may share a tenant's or a pool's name.

import "strings"

// MaxGroups is the most groups above a tenant: a chain has at most
// MaxGroups+1 levels (config.MaxChainLevels).
const MaxGroups = 3

// MaxSides is the most keys one acquire charges: every level, every
// level's model-scoped key, and the pool.
const MaxSides = 2*(MaxGroups+1) + 1

// Chain is what the limits say of one acquire beyond its tenant's key and
// its pool: the groups above the tenant and, at each level, the models
// entry the request's model falls under. The zero Chain is a tenant alone.
type Chain struct {
	// Groups[:NGroups] are the tenant's ancestors, nearest first.
	Groups  [MaxGroups]string
	NGroups int
	// Models[0] is the entry of the tenant's models map that the model
	// falls under, Models[i] that of Groups[i-1]; "" where none applies.
	Models [MaxGroups + 1]string
}

// modelSep joins a level's key and a models entry into a model-scoped key.
const modelSep = "\x1fm:"

// GroupKey is the limiter key of a group.
func GroupKey(group string) string { return "g:" + group }

// ModelKey is the limiter key of the models entry entry at the level whose
// key is levelKey (TenantKey or GroupKey).
func ModelKey(levelKey, entry string) string { return levelKey + modelSep + entry }

// KeyKind is the kind of level a limiter key belongs to.
type KeyKind uint8

// The kinds of keys.
const (
	KeyUnknown    KeyKind = iota
	KeyTenant             // t:<tenant>, and t:<tenant>\x1fm:<entry>
	KeyGroup              // g:<group>, and g:<group>\x1fm:<entry>
	KeyPool               // p:<pool>
	KeyDescriptor         // d:<domain and entries>: an Envoy descriptor (rls/descriptors.Key)
)

// SplitKey returns the kind of key, the name of its level (tenant, group
// or pool) and, for a model-scoped key, its models entry ("" otherwise).
func SplitKey(key string) (kind KeyKind, name, entry string) {
	if len(key) < 2 || key[1] != ':' {
		return KeyUnknown, key, ""
	}
	switch key[0] {
	case 't':
		kind = KeyTenant
	case 'g':
		kind = KeyGroup
	case 'p':
		return KeyPool, key[2:], ""
	case 'd':
		return KeyDescriptor, key[2:], ""
	default:
		return KeyUnknown, key, ""
	}
	name, entry, _ = strings.Cut(key[2:], modelSep)
	return kind, name, entry
}

// Side is one key an acquire charges.
type Side struct {
	Key   string
	Kind  KeyKind
	Name  string // the level's name: the tenant, group or pool
	Entry string // the models entry of a model-scoped key, else ""
}

// Label names the side in answers: "tenant:acme", "group:team-research",
// "pool:gpt-4o", and for a model-scoped key "tenant:acme|model:gpt-4o"
// (the models entry, as configured: possibly "gpt-4o-*"); a descriptor
// key is "descriptor:" and the key after its "d:".
func (s Side) Label() string {
	var b strings.Builder
	switch s.Kind {
	case KeyGroup:
		b.WriteString("group:")
	case KeyPool:
		b.WriteString("pool:")
	case KeyDescriptor:
		b.WriteString("descriptor:")
	default:
		b.WriteString("tenant:")
	}
	b.WriteString(s.Name)
	if s.Entry != "" {
		b.WriteString("|model:")
		b.WriteString(s.Entry)
	}
	return b.String()
}

// metric is the side's value of tokenring_decisions_total's "side" label.
func (s Side) metric() string {
	switch {
	case s.Kind == KeyDescriptor:
		return "descriptor"
	case s.Kind == KeyPool:
		return "pool"
	case s.Kind == KeyGroup && s.Entry != "":
		return "group_model"
	case s.Kind == KeyGroup:
		return "group"
	case s.Entry != "":
		return "tenant_model"
	}
	return "tenant"
}

// TenantKey is the limiter key of a tenant.
func TenantKey(tenant string) string { return "t:" + tenant }

// PoolKey is the limiter key of a pool.
func PoolKey(pool string) string { return "p:" + pool }
