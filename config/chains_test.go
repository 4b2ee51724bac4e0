package config

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// chainsYAML is issue 31's example.
const chainsYAML = `limits:
  default: {rpm: 60, tpm: 100000, concurrency: 10}
  tenants:
    key-7f3a: {rpm: 100, parent: team-research, models: {gpt-4o: {tpm: 50000}, gpt-4o-mini: {tpm: 500000}}}
    plain: {rpm: 5}
  groups:
    team-research: {rpm: 1000, tpm: 2000000, concurrency: 40, parent: org-acme, models: {"gpt-4o-*": {rpm: 7}}}
    org-acme: {tpm: 10000000, concurrency: 200}
`

func TestChainsParse(t *testing.T) {
	c, err := Parse([]byte(chainsYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Limits.Tenants["key-7f3a"], (Limits{RPM: 100, TPM: 100000, Concurrency: 10}); got != want {
		t.Errorf("key-7f3a limits = %+v, want %+v (absent fields from default)", got, want)
	}
	wantChains := map[string]TenantChain{"key-7f3a": {Parent: "team-research",
		Models: map[string]Limits{"gpt-4o": {TPM: 50000}, "gpt-4o-mini": {TPM: 500000}}}}
	if !reflect.DeepEqual(c.Limits.TenantChains, wantChains) {
		t.Errorf("TenantChains = %+v", c.Limits.TenantChains)
	}
	wantGroups := map[string]Group{
		"team-research": {Limits: Limits{RPM: 1000, TPM: 2000000, Concurrency: 40}, Parent: "org-acme", Models: map[string]Limits{"gpt-4o-*": {RPM: 7}}},
		"org-acme":      {Limits: Limits{TPM: 10000000, Concurrency: 200}},
	}
	if !reflect.DeepEqual(c.Limits.Groups, wantGroups) {
		t.Errorf("Groups = %+v", c.Limits.Groups)
	}
	if got := c.Ancestors("key-7f3a"); !reflect.DeepEqual(got, []string{"team-research", "org-acme"}) {
		t.Errorf("Ancestors(key-7f3a) = %v", got)
	}
	for _, tenant := range []string{"plain", "not-listed"} {
		if got := c.Ancestors(tenant); len(got) != 0 {
			t.Errorf("Ancestors(%s) = %v, want none", tenant, got)
		}
	}
	for _, tc := range []struct {
		models map[string]Limits
		model  string
		entry  string
	}{
		{c.TenantModels("key-7f3a"), "gpt-4o", "gpt-4o"},
		{c.TenantModels("key-7f3a"), "gpt-4o-mini", "gpt-4o-mini"},
		{c.TenantModels("key-7f3a"), "gpt-4", ""},
		{c.Limits.Groups["team-research"].Models, "gpt-4o-mini", "gpt-4o-*"},
		{c.Limits.Groups["team-research"].Models, "gpt-4o", ""},
		{map[string]Limits{"a*": {}, "ab*": {}, "abc": {}}, "abd", "ab*"},
		{map[string]Limits{"a*": {}, "ab*": {}, "abc": {}}, "abc", "abc"},
		{map[string]Limits{"*": {}}, "", ""},
	} {
		entry, _, ok := MatchModel(tc.models, tc.model)
		if entry != tc.entry || ok != (tc.entry != "") {
			t.Errorf("MatchModel(%v, %q) = %q, %v; want %q", tc.models, tc.model, entry, ok, tc.entry)
		}
	}
}

// TestChainsValidate: every bad chain is refused with an error naming
// its field path and the chain.
func TestChainsValidate(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the error; none: valid
	}{
		{"a model entry at a group", `limits:
  tenants: {t: {parent: g}}
  groups: {g: {models: {gpt-4o: {tpm: 5}}}}`, nil},
		{"four levels", `limits:
  tenants: {t: {parent: a}}
  groups: {a: {parent: b}, b: {parent: c}, c: {}}`, nil},
		{"a tenant named like its group", `limits:
  tenants: {x: {parent: x}}
  groups: {x: {}}`, nil},
		{"depth 5", `limits:
  tenants: {t: {parent: a}}
  groups: {a: {parent: b}, b: {parent: c}, c: {parent: d}, d: {}}`, []string{
			"limits.groups.a.parent: chain a → b → c → d has 4 groups; at most 4 levels (a tenant and 3 groups)",
			"limits.tenants.t.parent: chain t → a → b → c → d has 5 levels; at most 4 levels",
		}},
		{"cycle", `limits:
  tenants: {t: {parent: a}}
  groups: {a: {parent: b}, b: {parent: a}}`, []string{
			"limits.groups.a.parent: cycle: a → b → a",
			"limits.groups.b.parent: cycle: b → a → b",
			"limits.tenants.t.parent: cycle: t → a → b → a",
		}},
		{"self parent", `limits:
  groups: {a: {parent: a}}`, []string{"limits.groups.a.parent: cycle: a → a"}},
		{"unknown parent of a tenant", `limits:
  tenants: {t: {parent: team}}`, []string{`limits.tenants.t.parent: unknown group "team" (in t → team; define it under limits.groups)`}},
		{"unknown parent of a group", `limits:
  groups: {a: {parent: b}}`, []string{`limits.groups.a.parent: unknown group "b" (in a → b;`}},
		{"bad counts", `limits:
  tenants: {t: {models: {m: {rpm: -1}}}}
  groups: {g: {tpm: -2, models: {m: {concurrency: -3}}}}`, []string{
			"limits.groups.g.tpm: must be >= 0, got -2",
			"limits.groups.g.models.m.concurrency: must be >= 0, got -3",
			"limits.tenants.t.models.m.rpm: must be >= 0, got -1",
		}},
		{"bad model names", `limits:
  tenants: {t: {models: {"a*b": {}, "": {}}}}`, []string{
			"limits.tenants.t.models.a*b: '*' is allowed only at the end",
			`limits.tenants.t.models: model name "" must not be empty`,
		}},
		{"control character in a group", "limits:\n  groups: {\"a\\x1fb\": {}}", []string{`limits.groups: group name "a\x1fb" must not contain control characters`}},
		{"unknown field", `limits:
  groups: {g: {rmp: 1}}`, []string{"limits.groups.g.rmp: unknown field (known: rpm, tpm, concurrency, reservation, budget, parent, models)"}},
		{"models of a pool", `pools: {p: {models: {}}}`, []string{"pools.p.models: unknown field"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), nil)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted it; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestChainsValidateInCode: Validate checks chains of a Config built in
// code too, including parents or models of a tenant without limits.
func TestChainsValidateInCode(t *testing.T) {
	c := Default()
	c.Limits.TenantChains = map[string]TenantChain{"ghost": {Parent: "g"}}
	c.Limits.Groups = map[string]Group{"g": {}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "limits.tenants.ghost: has a parent or models but no entry in limits.tenants") {
		t.Fatalf("Validate = %v", err)
	}
}

func TestChainsRoundTrip(t *testing.T) {
	want, err := Parse([]byte(chainsYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(data, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n%s\ngot  %+v\nwant %+v", data, got.Limits, want.Limits)
	}
}

// TestLimitsSectionYAMLFields keeps limitsSectionYAML in step with
// LimitsSection: the same YAML names, TenantChains aside.
func TestLimitsSectionYAMLFields(t *testing.T) {
	names := func(v any) []string {
		var out []string
		ty := reflect.TypeOf(v)
		for i := range ty.NumField() {
			if tag := strings.Split(ty.Field(i).Tag.Get("yaml"), ",")[0]; tag != "-" {
				out = append(out, tag)
			}
		}
		return out
	}
	if a, b := names(LimitsSection{}), names(limitsSectionYAML{}); !reflect.DeepEqual(a, b) {
		t.Errorf("LimitsSection writes %v, limitsSectionYAML %v", a, b)
	}
}

// TestChainsHash: chains change LimitsHash; a config without them keeps
// the hash it had before chains existed.
func TestChainsHash(t *testing.T) {
	plain := designConfig()
	before := plain.LimitsHash()
	plain.Limits.Groups = map[string]Group{}
	if plain.LimitsHash() != before {
		t.Error("an empty groups map changed the hash")
	}
	c, err := Parse([]byte(chainsYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := c.LimitsHash()
	for name, change := range map[string]func(*Config){
		"group limit": func(c *Config) { g := c.Limits.Groups["org-acme"]; g.TPM++; c.Limits.Groups["org-acme"] = g },
		"group parent": func(c *Config) {
			g := c.Limits.Groups["team-research"]
			g.Parent = ""
			c.Limits.Groups["team-research"] = g
		},
		"tenant model": func(c *Config) { c.Limits.TenantChains["key-7f3a"].Models["gpt-4o"] = Limits{TPM: 1} },
	} {
		c2, _ := Parse([]byte(chainsYAML), nil)
		change(&c2)
		if c2.LimitsHash() == h {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}
