package config

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// reservationYAML sets a reservation at every level that can hold one.
const reservationYAML = `
limits:
  default: {rpm: 60, tpm: 100000, reservation: max_tokens}
  tenants:
    inherits: {rpm: 10}
    own: {tpm: 5000, reservation: estimate, parent: team, models: {gpt-4o: {tpm: 100}, "o1-*": {reservation: max_tokens}}}
  groups:
    team: {tpm: 1000000, reservation: max_tokens, models: {gpt-4o: {tpm: 50000}}}
    plain: {tpm: 1000}
pools:
  gpt-4o: {tpm: 2000000, reservation: max_tokens}
  o1: {tpm: 1000}
`

// reservation is read wherever rpm, tpm and concurrency are: a tenant's
// absent one is limits.default's, a group's or a pool's absent one is
// the default reservation (""), a models entry's absent one its level's.
func TestReservationParsed(t *testing.T) {
	c, err := Parse([]byte(reservationYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		what string
		got  Reservation
		want Reservation
	}{
		{"limits.default", c.Limits.Default.Reservation, ReserveMaxTokens},
		{"a tenant without an entry", c.TenantLimits("nobody").Reservation, ReserveMaxTokens},
		{"limits.tenants.inherits", c.Limits.Tenants["inherits"].Reservation, ReserveMaxTokens},
		{"limits.tenants.own", c.Limits.Tenants["own"].Reservation, ReserveEstimate},
		{"limits.tenants.own.models.gpt-4o", c.TenantModels("own")["gpt-4o"].Reservation, ReserveEstimate},
		{"limits.tenants.own.models.o1-*", c.TenantModels("own")["o1-*"].Reservation, ReserveMaxTokens},
		{"limits.groups.team", c.Limits.Groups["team"].Reservation, ReserveMaxTokens},
		{"limits.groups.team.models.gpt-4o", c.Limits.Groups["team"].Models["gpt-4o"].Reservation, ReserveMaxTokens},
		{"limits.groups.plain", c.Limits.Groups["plain"].Reservation, ""},
		{"pools.gpt-4o", c.Pools["gpt-4o"].Reservation, ReserveMaxTokens},
		{"pools.o1", c.Pools["o1"].Reservation, ""},
	} {
		if x.got != x.want {
			t.Errorf("%s: reservation %q, want %q", x.what, x.got, x.want)
		}
	}
	if r := Default().Limits.Default.Reservation; r != "" {
		t.Errorf("the built-in default reserves %q, want \"\" (estimate)", r)
	}
	// Written back, it reads the same.
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Parse(data, nil); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %v\n%s", err, data)
	}
}

// A reservation that is neither estimate nor max_tokens stops the file,
// naming the field and the two values it may take.
func TestReservationErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"limits:\n  default: {reservation: max-tokens}\n", `limits.default.reservation: must be estimate or max_tokens, got "max-tokens"`},
		{"limits:\n  tenants:\n    acme: {reservation: MAX_TOKENS}\n", `limits.tenants.acme.reservation: must be estimate or max_tokens, got "MAX_TOKENS"`},
		{"limits:\n  groups:\n    team: {reservation: \"\"}\n", `limits.groups.team.reservation: must be estimate or max_tokens, got ""`},
		{"limits:\n  groups:\n    team: {models: {gpt-4o: {reservation: full}}}\n", `limits.groups.team.models.gpt-4o.reservation: must be estimate or max_tokens, got "full"`},
		{"pools:\n  m: {reservation: 4096}\n", `pools.m.reservation: must be estimate or max_tokens, got "4096"`},
		{"limits:\n  default: {reservation: [max_tokens]}\n", "line 2: limits.default.reservation: must be a string, got a list"},
	} {
		_, err := Parse([]byte(tc.yaml), nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) = %v, want %q", tc.yaml, err, tc.want)
		}
	}
	c := Default()
	c.Limits.Default.Reservation = "whole"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `limits.default.reservation: must be estimate or max_tokens, got "whole"`) {
		t.Errorf("Validate = %v", err)
	}
}

// A reservation of max_tokens changes the limits hash (members that
// reserve differently show as a mismatch); none, or estimate, leaves the
// hash a file without reservations had.
func TestReservationHash(t *testing.T) {
	base, err := Parse([]byte(chainsYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := base.LimitsHash()
	estimate, err := Parse([]byte(strings.Replace(chainsYAML, "concurrency: 10}", "concurrency: 10, reservation: estimate}", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if estimate.Limits.Default.Reservation != ReserveEstimate || estimate.LimitsHash() != h {
		t.Errorf("estimate written out: hash %s, want %s as without it", estimate.LimitsHash(), h)
	}
	for name, edit := range map[string]func(c *Config){
		"default": func(c *Config) { c.Limits.Default.Reservation = ReserveMaxTokens },
		"a group": func(c *Config) {
			for g, gr := range c.Limits.Groups {
				gr.Reservation = ReserveMaxTokens
				c.Limits.Groups[g] = gr
				return
			}
		},
	} {
		c, _ := Parse([]byte(chainsYAML), nil)
		edit(&c)
		if c.LimitsHash() == h {
			t.Errorf("max_tokens at %s: the hash did not change", name)
		}
	}
}
