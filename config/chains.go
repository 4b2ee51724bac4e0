package config

// Chains of limits: a tenant may name a parent group, a group its own
// parent, and every level (tenant or group) may carry per-model limits.
//
//	limits:
//	  tenants:
//	    key-7f3a: {rpm: 100, parent: team-research, models: {gpt-4o: {tpm: 50000}}}
//	  groups:
//	    team-research: {rpm: 1000, tpm: 2000000, concurrency: 40, parent: org-acme}
//	    org-acme: {tpm: 10000000, concurrency: 200}
//
// A request of a tenant is charged at every level of its chain (the tenant,
// then each ancestor, nearest first) and, at each level whose models map has
// an entry for the request's model, at that entry too; then at the model's
// pool. The router does that, all or nothing; this file only says what the
// limits are.

import (
	"encoding/binary"
	"fmt"
	"hash"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxChainLevels is the most levels a chain has: a tenant and up to
// MaxChainLevels-1 groups above it.
const MaxChainLevels = 4

// MaxNameLen bounds the bytes of a group's name and of a models entry's
// name (the router accepts tenant and model names of at most as many).
const MaxNameLen = 256

// Group is one entry of limits.groups: a level above tenants (a team, an
// organisation). A field absent from a group's entry is unlimited (0), as
// in a pool's: a group limits only what it names.
type Group struct {
	Limits `yaml:",inline"`
	// Parent is the group above this one, "" for none. It must name a
	// group of limits.groups; the chain from any tenant up may hold at
	// most MaxChainLevels levels, and no cycle.
	Parent string `yaml:"parent,omitempty"`
	// Models are per-model limits at this level, by model name (a name
	// ending in '*' matches every model starting with the rest, the
	// longest such prefix winning over a shorter one; an exact name wins
	// over every prefix, as in pools). Each entry is one budget shared by
	// every request of the group's tenants for a model it matches. A field
	// absent from an entry is unlimited.
	Models map[string]Limits `yaml:"models,omitempty"`
}

// TenantChain is what a limits.tenants entry says beyond its own limits:
// its parent group and its per-model limits (same rules as Group's).
type TenantChain struct {
	Parent string
	Models map[string]Limits
}

// Ancestors returns the groups above tenant, nearest first: its parent,
// the parent's parent, and so on. A tenant not listed in limits.tenants
// (one limits.default applies to) has none. On a Config that Validate
// accepts the result holds at most MaxChainLevels-1 names; on any other
// it stops at an unknown group, a cycle or that many names.
func (c Config) Ancestors(tenant string) []string {
	var out []string
	g := c.Limits.TenantChains[tenant].Parent
	for g != "" && len(out) < MaxChainLevels-1 {
		out = append(out, g)
		next, ok := c.Limits.Groups[g]
		if !ok {
			break
		}
		g = next.Parent
	}
	return out
}

// TenantModels returns the per-model limits of tenant (nil for none).
func (c Config) TenantModels(tenant string) map[string]Limits {
	return c.Limits.TenantChains[tenant].Models
}

// MatchModel returns the entry of models that model falls under: the entry
// named exactly model, else the one with the longest name ending in '*'
// whose prefix model starts with. ok is false when none does, and for an
// empty model.
func MatchModel(models map[string]Limits, model string) (entry string, l Limits, ok bool) {
	return matchEntry(models, model)
}

// matchEntry is MatchModel for a map of any values (models entries,
// prices).
func matchEntry[V any](m map[string]V, model string) (entry string, v V, ok bool) {
	if model == "" || len(m) == 0 {
		return "", v, false
	}
	if x, ok := m[model]; ok {
		return model, x, true
	}
	best := -1
	for n, x := range m {
		prefix, wild := strings.CutSuffix(n, "*")
		if wild && len(prefix) > best && strings.HasPrefix(model, prefix) {
			best, entry, v = len(prefix), n, x
		}
	}
	return entry, v, best >= 0
}

// validateChains checks limits.groups and the parents and models of
// limits.tenants: names, counts, parents that exist, chains of at most
// MaxChainLevels levels and no cycle. Each error names the path of the
// field and, for a chain, the chain itself ("a → b → a").
func (c Config) validateChains(errs *errorList) {
	for _, g := range sortedKeys(c.Limits.Groups) {
		path := "limits.groups." + g
		if msg := badName(g); msg != "" {
			errs.add("limits.groups", fmt.Sprintf("group name %q %s", g, msg))
		}
		gr := c.Limits.Groups[g]
		errs.limits(path, gr.Limits)
		errs.models(path+".models", gr.Models)
		if gr.Parent != "" {
			// A group may hold tenants: with them, its chain is one level longer.
			c.checkChain(errs, path+".parent", g, true, gr.Parent, MaxChainLevels-1)
		}
	}
	for _, t := range sortedKeys(c.Limits.TenantChains) {
		path := "limits.tenants." + t
		tc := c.Limits.TenantChains[t]
		if _, ok := c.Limits.Tenants[t]; !ok {
			errs.add(path, "has a parent or models but no entry in limits.tenants")
		}
		errs.models(path+".models", tc.Models)
		if tc.Parent != "" {
			c.checkChain(errs, path+".parent", t, false, tc.Parent, MaxChainLevels)
		}
	}
}

// checkChain follows the parents from group g up, the chain starting at
// first (a tenant, or the group whose parent g is when isGroup), and
// records its first problem at path: an unknown group, a cycle, or more
// than most names in the chain (most is MaxChainLevels from a tenant,
// MaxChainLevels-1 from a group, which a tenant below it makes one level
// longer).
func (c Config) checkChain(errs *errorList, path, first string, isGroup bool, g string, most int) {
	chain := []string{first}
	var visited []string
	if isGroup {
		visited = append(visited, first)
	}
	for ; g != ""; g = c.Limits.Groups[g].Parent {
		chain = append(chain, g)
		if _, ok := c.Limits.Groups[g]; !ok {
			errs.add(path, fmt.Sprintf("unknown group %q (in %s; define it under limits.groups)", g, strings.Join(chain, " → ")))
			return
		}
		for _, v := range visited {
			if v == g {
				errs.add(path, "cycle: "+strings.Join(chain, " → "))
				return
			}
		}
		visited = append(visited, g)
		if len(chain) > most {
			what := fmt.Sprintf("%d levels", len(chain))
			if isGroup {
				what = fmt.Sprintf("%d groups", len(chain))
			}
			errs.add(path, fmt.Sprintf("chain %s has %s; at most %d levels (a tenant and %d groups)",
				strings.Join(chain, " → "), what, MaxChainLevels, MaxChainLevels-1))
			return
		}
	}
}

// models checks the names and counts of a models map.
func (e *errorList) models(path string, m map[string]Limits) {
	for _, name := range sortedKeys(m) {
		switch msg := badName(name); {
		case msg != "":
			e.add(path, fmt.Sprintf("model name %q %s", name, msg))
		case strings.Contains(strings.TrimSuffix(name, "*"), "*"):
			e.add(path+"."+name, "'*' is allowed only at the end")
		}
		e.limits(path+"."+name, m[name])
	}
}

// limits checks the three counts of l and its reservation.
func (e *errorList) limits(path string, l Limits) {
	e.count(path+".rpm", l.RPM, 0)
	e.count(path+".tpm", l.TPM, 0)
	e.count(path+".concurrency", l.Concurrency, 0)
	switch l.Reservation {
	case "", ReserveEstimate, ReserveMaxTokens:
	default:
		e.add(path+".reservation", fmt.Sprintf("must be %s or %s, got %q", ReserveEstimate, ReserveMaxTokens, string(l.Reservation)))
	}
}

// hashReservation adds r to a LimitsHash after its level's counts: a word
// no count, length or duration can be (-1), and only for max_tokens, so
// that limits without one keep the hash they had before reservations
// existed ("" and estimate reserve alike).
func hashReservation(num func(int64), r Reservation) {
	if r == ReserveMaxTokens {
		num(-1)
	}
}

// badName says what is wrong with a group's or a models entry's name, ""
// when nothing is: empty, over MaxNameLen bytes, or holding a control
// character (the router's keys separate a level from its model with one).
func badName(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxNameLen:
		return fmt.Sprintf("is longer than %d bytes", MaxNameLen)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return "must not contain control characters"
		}
	}
	return ""
}

// tenants decodes limits.tenants: each entry's limits on top of base, and
// its parent and models (chainEntry) when it has either.
func (d *decoder) tenants(n *yaml.Node, path string, base Limits) (map[string]Limits, map[string]TenantChain) {
	if isNull(n) {
		return nil, nil
	}
	var limits map[string]Limits
	var chains map[string]TenantChain
	for _, p := range d.entries(n, path) {
		l := base
		var tc TenantChain
		d.chainEntry(p.val, join(path, p.key.Value), &l, &tc.Parent, &tc.Models)
		if limits == nil {
			limits = make(map[string]Limits)
		}
		limits[p.key.Value] = l
		if tc.Parent != "" || tc.Models != nil {
			if chains == nil {
				chains = make(map[string]TenantChain)
			}
			chains[p.key.Value] = tc
		}
	}
	return limits, chains
}

// groups decodes limits.groups; a group's absent fields are unlimited.
func (d *decoder) groups(n *yaml.Node, path string) map[string]Group {
	if isNull(n) {
		return nil
	}
	var m map[string]Group
	for _, p := range d.entries(n, path) {
		var g Group
		d.chainEntry(p.val, join(path, p.key.Value), &g.Limits, &g.Parent, &g.Models)
		if m == nil {
			m = make(map[string]Group)
		}
		m[p.key.Value] = g
	}
	return m
}

// chainEntry decodes a tenant's or a group's entry: rpm, tpm, concurrency
// and reservation onto l (absent fields keep l's values), parent and
// models. A models entry's absent dimensions are unlimited, and its absent
// reservation is its level's: the entry is part of the level.
func (d *decoder) chainEntry(n *yaml.Node, path string, l *Limits, parent *string, models *map[string]Limits) {
	f := d.fields(n, path, "rpm", "tpm", "concurrency", "reservation", "budget", "parent", "models")
	d.int(f["rpm"], path+".rpm", &l.RPM)
	d.int(f["tpm"], path+".tpm", &l.TPM)
	d.int(f["concurrency"], path+".concurrency", &l.Concurrency)
	d.reservation(f["reservation"], path+".reservation", &l.Reservation)
	d.budget(f["budget"], path+".budget", &l.Budget)
	d.string(f["parent"], path+".parent", parent)
	*models = d.limitsMap(f["models"], path+".models", Limits{Reservation: l.Reservation})
}

// limitsSectionYAML is LimitsSection as the file writes it: a tenant's
// parent and models inside its entry. Keep its fields in step with
// LimitsSection's (TestLimitsSectionYAMLFields).
type limitsSectionYAML struct {
	Default        Limits                `yaml:"default"`
	Tenants        map[string]tenantYAML `yaml:"tenants,omitempty"`
	Groups         map[string]Group      `yaml:"groups,omitempty"`
	Window         time.Duration         `yaml:"window"`
	LeaseTTL       time.Duration         `yaml:"lease_ttl"`
	MaxPromptBytes int                   `yaml:"max_prompt_bytes"`
}

// tenantYAML is one limits.tenants entry as the file writes it.
type tenantYAML struct {
	Limits `yaml:",inline"`
	Parent string            `yaml:"parent,omitempty"`
	Models map[string]Limits `yaml:"models,omitempty"`
}

// MarshalYAML writes s as Parse reads it back: each tenant's parent and
// models (TenantChains) inside its entry of tenants.
func (s LimitsSection) MarshalYAML() (any, error) {
	out := limitsSectionYAML{Default: s.Default, Groups: s.Groups, Window: s.Window, LeaseTTL: s.LeaseTTL, MaxPromptBytes: s.MaxPromptBytes}
	for t, l := range s.Tenants {
		if out.Tenants == nil {
			out.Tenants = make(map[string]tenantYAML, len(s.Tenants))
		}
		tc := s.TenantChains[t]
		out.Tenants[t] = tenantYAML{Limits: l, Parent: tc.Parent, Models: tc.Models}
	}
	return out, nil
}

// hashChains adds the groups and the tenants' parents and models to a
// LimitsHash; nothing when there are none, so that a config without chains
// keeps the hash it had before chains existed.
func (c Config) hashChains(h hash.Hash) {
	if len(c.Limits.Groups) == 0 && len(c.Limits.TenantChains) == 0 {
		return
	}
	var buf [8]byte
	num := func(v int64) {
		binary.BigEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	str := func(s string) { num(int64(len(s))); h.Write([]byte(s)) }
	level := func(name, parent string, l Limits, models map[string]Limits) {
		str(name)
		str(parent)
		num(l.RPM)
		num(l.TPM)
		num(l.Concurrency)
		hashReservation(num, l.Reservation)
		hashBudget(num, str, l.Budget)
		num(int64(len(models)))
		for _, m := range sortedKeys(models) {
			str(m)
			ml := models[m]
			num(ml.RPM)
			num(ml.TPM)
			num(ml.Concurrency)
			hashReservation(num, ml.Reservation)
			hashBudget(num, str, ml.Budget)
		}
	}
	str("chains v1")
	num(int64(len(c.Limits.Groups)))
	for _, g := range sortedKeys(c.Limits.Groups) {
		gr := c.Limits.Groups[g]
		level(g, gr.Parent, gr.Limits, gr.Models)
	}
	num(int64(len(c.Limits.TenantChains)))
	for _, t := range sortedKeys(c.Limits.TenantChains) {
		tc := c.Limits.TenantChains[t]
		level(t, tc.Parent, Limits{}, tc.Models)
	}
}
