package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const pricesYAML = `
prices:
  gpt-4o: {input: "2.50", cached_input: "1.25", output: 10}
  gpt-4o-mini: {input: 0.15, output: 0.6}
  "claude-*": {input: 3, cached_input: 0.3, cache_write: 3.75, output: 15}
limits:
  default: {rpm: 100}
  tenants:
    acme:
      budget: {usd: "25.00", period: month, time_zone: Europe/Paris}
      parent: eng
      models:
        "gpt-*": {budget: {usd: 0.000000000001, period: total}}
  groups:
    eng: {budget: {usd: "1000", period: week}}
pools:
  gpt-4o: {tpm: 1000000, budget: {usd: 5, period: 1h}}
`

// TestPricesAndBudgetsParse: decimal text becomes exact picodollars (per
// token for prices: micro-dollars per million tokens), absent cache prices
// are the input's, budgets sit at any level with their periods and zones.
func TestPricesAndBudgetsParse(t *testing.T) {
	c, err := Parse([]byte(pricesYAML), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string]Price{
		"gpt-4o":      {Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 2_500_000, Output: 10_000_000},
		"gpt-4o-mini": {Input: 150_000, CachedInput: 150_000, CacheWrite: 150_000, Output: 600_000},
		"claude-*":    {Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000},
	}
	if !reflect.DeepEqual(c.Prices, want) {
		t.Fatalf("prices %+v", c.Prices)
	}
	if p, ok := c.Price("claude-sonnet-4"); !ok || p != want["claude-*"] {
		t.Fatalf("claude-sonnet-4 priced %+v %v", p, ok)
	}
	if p, ok := c.Price("gpt-4o-mini"); !ok || p != want["gpt-4o-mini"] {
		t.Fatalf("the exact name wins: %+v", p)
	}
	if _, ok := c.Price("llama"); ok {
		t.Fatal("an unpriced model has a price")
	}
	b := c.Limits.Tenants["acme"].Budget
	if b == nil || b.Amount != 25_000_000_000_000 || b.Period != PeriodMonth || b.Loc.String() != "Europe/Paris" {
		t.Fatalf("acme's budget %+v", b)
	}
	if b := c.Limits.TenantChains["acme"].Models["gpt-*"].Budget; b == nil || b.Amount != 1 || b.Period != PeriodTotal {
		t.Fatalf("a models entry's budget %+v", b)
	}
	if b := c.Limits.Groups["eng"].Budget; b == nil || b.Amount != 1000e12 || b.Loc != time.UTC {
		t.Fatalf("eng's budget %+v", b)
	}
	if e, _ := c.Pools["gpt-4o"].Budget.Every(); e != time.Hour {
		t.Fatalf("the pool's period: %s", e)
	}
	if !c.Budgeted() {
		t.Fatal("not budgeted")
	}
	if Picodollars(2_500_001).usd(6) != "2.500001" || Picodollars(0).usd(6) != "0" || Picodollars(1_500_000).usd(6) != "1.5" {
		t.Fatal("USD per million")
	}
}

// TestPricesAndBudgetsRefused: every malformed price or budget is refused
// with its path and what is expected.
func TestPricesAndBudgetsRefused(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{`prices: {m: {input: -1, output: 1}}`, "prices.m.input: must be USD per million tokens"},
		{`prices: {m: {input: 0.0000001, output: 1}}`, "prices.m.input: must be USD per million tokens with at most 6 decimal places"},
		{`prices: {m: {input: 1e3, output: 1}}`, "prices.m.input: must be USD"},
		{`prices: {m: {input: 1}}`, "prices.m.output: is required"},
		{`prices: {m: {input: 1, output: 2000000}}`, "prices.m.output: must be USD"},
		{`prices: {m: {input: 1, output: 1, cache: 2}}`, "prices.m.cache: unknown field"},
		{"limits: {default: {budget: {usd: 0, period: day}}}", "limits.default.budget.usd: must be a positive amount"},
		{"limits: {default: {budget: {usd: 1.0000000000001, period: day}}}", "at most 12 decimal places"},
		{"limits: {default: {budget: {usd: 2000000, period: day}}}", "at most 1000000"},
		{"limits: {default: {budget: {period: day}}}", "limits.default.budget.usd: is required"},
		{"limits: {default: {budget: {usd: 1}}}", "limits.default.budget.period: is required"},
		{"limits: {default: {budget: {usd: 1, period: fortnight}}}", "must be day, week, month, total or a duration"},
		{"limits: {default: {budget: {usd: 1, period: 10ms}}}", "from 1s to 8784h"},
		{"limits: {default: {budget: {usd: 1, period: day, time_zone: Mars/Olympus}}}", "must be an IANA time zone"},
	} {
		_, err := Parse([]byte(c.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.yaml, err, c.want)
		}
	}
}

// TestPricesAndBudgetsRoundTripAndHash: the file a config writes reads
// back the same; a budget or a price changes the limits' hash (limits
// without either add nothing to it: hashBudget, hashPrices).
func TestPricesAndBudgetsRoundTripAndHash(t *testing.T) {
	want, err := Parse([]byte(pricesYAML), nil)
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
	if !reflect.DeepEqual(got.Prices, want.Prices) || !reflect.DeepEqual(got.Limits.Tenants["acme"].Budget, want.Limits.Tenants["acme"].Budget) {
		t.Fatalf("round trip:\n%s", data)
	}
	plain, _ := Parse([]byte("limits: {default: {rpm: 100}}"), nil)
	budgeted, _ := Parse([]byte("limits: {default: {rpm: 100, budget: {usd: 1, period: day}}}"), nil)
	priced, _ := Parse([]byte("limits: {default: {rpm: 100}}\nprices: {m: {input: 1, output: 1}}"), nil)
	if budgeted.LimitsHash() == plain.LimitsHash() || priced.LimitsHash() == plain.LimitsHash() || priced.LimitsHash() == budgeted.LimitsHash() {
		t.Fatal("a budget or a price left the hash as it was")
	}
}

// TestFairShareAndWeights: pools are fair unless fair_share: false;
// weights name tenants, 1 to MaxWeight, and change the limits' hash.
func TestFairShareAndWeights(t *testing.T) {
	c, err := Parse([]byte("weights: {acme: 3, batch: 1}\n"), nil)
	if err != nil || !c.FairShare || c.Weight("acme") != 3 || c.Weight("batch") != 1 || c.Weight("other") != 1 {
		t.Fatalf("%+v %v", c.Weights, err)
	}
	off, err := Parse([]byte("fair_share: false\n"), nil)
	if err != nil || off.FairShare {
		t.Fatalf("fair_share: false read as %v (%v)", off.FairShare, err)
	}
	plain, _ := Parse(nil, nil)
	if off.LimitsHash() == plain.LimitsHash() || c.LimitsHash() == plain.LimitsHash() {
		t.Fatal("fair_share or weights left the limits' hash as it was")
	}
	for _, bad := range []string{"weights: {acme: 0}", "weights: {acme: 2000000}", "weights: {acme: x}", "fair_share: maybe"} {
		if _, err := Parse([]byte(bad), nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
