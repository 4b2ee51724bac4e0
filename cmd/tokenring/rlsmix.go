package main

// The requests of -system rls, made from a rate limit service config in
// envoyproxy/ratelimit's YAML format (domain, then descriptors: key,
// value, rate_limit, nested descriptors), the file the server under test
// reads.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
)

// rlsRule is one entry of a descriptor list of the config; the fields not
// read here (shadow_mode, replaces, ...) are the server's business.
type rlsRule struct {
	Key         string         `yaml:"key"`
	Value       string         `yaml:"value"`
	RateLimit   map[string]any `yaml:"rate_limit"`
	Descriptors []rlsRule      `yaml:"descriptors"`
}

// maxRLSDepth bounds the nesting of descriptor lists a mix follows.
const maxRLSDepth = 8

// rlsMix is what -system rls sends: requests for the config's domain, each
// with one descriptor for every key of the config's top-level list, in the
// order the keys first appear there.
//
// A descriptor follows one path of the config's tree: at each list, the
// key (the first key of a nested list) takes one of its values, and the
// rule it matches leads to the next list, until a rule without one. A
// key with rules that match any value (no value: a counter for each
// value; a value ending in '*': each value with that prefix) is
// tenant-valued: tenant i sends the i-th of those rules' prefixes in turn
// (none for a rule without value) before its name, so that the run's
// tenants are spread over them and each keeps one counter; the key's
// literal values are then not sent. A key with literal values only takes
// one of them at random. Rules with neither a rate_limit nor a nested list
// (no limit to meet) are not sent.
type rlsMix struct {
	domain string
	keys   []*rlsKey
}

// rlsKey is a key of a descriptor list and the values a descriptor gives it.
type rlsKey struct {
	key     string
	tenant  bool // choices' values are prefixes of a tenant's name
	choices []rlsChoice
}

// rlsChoice is one value of a key: the value, or a tenant's prefix; next
// is the key of the rule's nested list (nil: the descriptor ends).
type rlsChoice struct {
	value string
	next  *rlsKey
}

// readRLSMix reads the config file at path.
func readRLSMix(path string) (*rlsMix, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-rls-config: %w", err)
	}
	m, err := parseRLSMix(raw)
	if err != nil {
		return nil, fmt.Errorf("-rls-config %s: %w", path, err)
	}
	return m, nil
}

// parseRLSMix makes the mix of a config.
func parseRLSMix(raw []byte) (*rlsMix, error) {
	var cfg struct {
		Domain      string    `yaml:"domain"`
		Descriptors []rlsRule `yaml:"descriptors"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	if cfg.Domain == "" {
		return nil, errors.New("no domain")
	}
	keys, err := rlsKeys(cfg.Descriptors, 0)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no descriptor with a rate_limit")
	}
	return &rlsMix{domain: cfg.Domain, keys: keys}, nil
}

// rlsKeys groups the rules of one list by key, in the order the keys first
// appear.
func rlsKeys(rules []rlsRule, depth int) ([]*rlsKey, error) {
	if depth >= maxRLSDepth {
		return nil, fmt.Errorf("descriptors nested deeper than %d", maxRLSDepth)
	}
	var keys []*rlsKey
	byKey := map[string]*rlsKey{}
	literal := map[*rlsKey][]rlsChoice{}
	for _, r := range rules {
		if r.Key == "" {
			return nil, errors.New("a descriptor without a key")
		}
		if r.RateLimit == nil && len(r.Descriptors) == 0 {
			continue
		}
		var next *rlsKey
		if len(r.Descriptors) > 0 {
			nested, err := rlsKeys(r.Descriptors, depth+1)
			if err != nil {
				return nil, err
			}
			if len(nested) > 0 {
				next = nested[0]
			}
		}
		k := byKey[r.Key]
		if k == nil {
			k = &rlsKey{key: r.Key}
			byKey[r.Key] = k
			keys = append(keys, k)
		}
		if prefix, wild := strings.CutSuffix(r.Value, "*"); wild || r.Value == "" {
			k.tenant = true
			k.choices = append(k.choices, rlsChoice{value: prefix, next: next})
		} else {
			literal[k] = append(literal[k], rlsChoice{value: r.Value, next: next})
		}
	}
	for _, k := range keys {
		if !k.tenant {
			k.choices = literal[k]
		}
	}
	return keys, nil
}

// request is a request of the mix for tenant ti, named tenant; rng picks
// the literal values.
func (m *rlsMix) request(ti int, tenant string, rng *rand.Rand) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: m.domain, Descriptors: make([]*rlcommon.RateLimitDescriptor, len(m.keys))}
	for i, k := range m.keys {
		d := &rlcommon.RateLimitDescriptor{}
		for k != nil {
			c, value := k.pick(ti, tenant, rng)
			d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k.key, Value: value})
			k = c.next
		}
		req.Descriptors[i] = d
	}
	return req
}

// pick is k's choice for tenant ti, named tenant, and the value it sends:
// for a tenant-valued key the tenant's own prefix and its name, else a
// literal value at random.
func (k *rlsKey) pick(ti int, tenant string, rng *rand.Rand) (rlsChoice, string) {
	if k.tenant {
		c := k.choices[ti%len(k.choices)]
		return c, c.value + tenant
	}
	c := k.choices[0]
	if len(k.choices) > 1 {
		c = k.choices[rng.IntN(len(k.choices))]
	}
	return c, c.value
}
