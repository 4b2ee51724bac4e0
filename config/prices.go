package config

import (
	"fmt"
	"math/big"
	"strings"
	"time"

	_ "time/tzdata" // budgets' time zones on a machine without a zoneinfo database

	"go.yaml.in/yaml/v3"
)

// Prices and budgets: what a model's tokens cost, and how many dollars a
// level may spend per period. Amounts are exact integers of picodollars
// (10⁻¹² USD), parsed from decimal text, never through floating point.

// Price is what one model's tokens cost, per million tokens in USD as
// the file writes them ("2.50"), held as picodollars per token (the same
// number as micro-dollars per million tokens: at most 6 decimal places).
type Price struct {
	Input       Picodollars `yaml:"input"`                  // an uncached prompt token
	CachedInput Picodollars `yaml:"cached_input,omitempty"` // a prompt token read from the provider's cache; absent: input
	CacheWrite  Picodollars `yaml:"cache_write,omitempty"`  // a prompt token written to the cache; absent: input
	Output      Picodollars `yaml:"output"`                 // a completion token
}

// Picodollars is an amount of 10⁻¹² USD. As a price it is per token, and
// the file writes it as USD per million tokens; as a budget it is the
// whole amount, and the file writes USD.
type Picodollars int64

// MaxBudgetUSD caps a budget (the limiter's MaxSpend, about $1.15 million)
// and MaxPricePerMillion a price.
const (
	MaxBudgetUSD       = 1_000_000
	MaxPricePerMillion = 1_000_000
)

// Budget is a level's spend limit: budget: {usd: "25.00", period: month}.
type Budget struct {
	// USD is the amount as written: a decimal with at most 12 places.
	USD string `yaml:"usd"`
	// Period is day, week, month, total (never resets) or a duration of
	// at least 1s ("1h": periods of that length from the Unix epoch).
	Period string `yaml:"period"`
	// TimeZone names the zone whose midnights, Mondays and firsts of the
	// month bound the periods (IANA, "Europe/Paris"); absent: UTC.
	TimeZone string `yaml:"time_zone,omitempty"`

	Amount Picodollars    `yaml:"-"` // USD, parsed
	Loc    *time.Location `yaml:"-"` // TimeZone, loaded
}

// The budget periods by name; any other value is a duration.
const (
	PeriodDay   = "day"
	PeriodWeek  = "week"
	PeriodMonth = "month"
	PeriodTotal = "total"
)

// Price returns the price of model: the entry of prices named exactly
// model, else the longest one ending in '*' whose prefix model starts
// with; ok is false when none matches.
func (c Config) Price(model string) (p Price, ok bool) {
	_, p, ok = matchEntry(c.Prices, model)
	return p, ok
}

// Budgeted reports whether any level of the file has a budget.
func (c Config) Budgeted() bool {
	has := func(l Limits) bool { return l.Budget != nil }
	for _, ls := range c.allLimits() {
		if has(ls) {
			return true
		}
	}
	return false
}

// allLimits lists every Limits of the file: the default, tenants, groups,
// models entries, pools.
func (c Config) allLimits() []Limits {
	out := []Limits{c.Limits.Default}
	for _, l := range c.Limits.Tenants {
		out = append(out, l)
	}
	for _, tc := range c.Limits.TenantChains {
		for _, l := range tc.Models {
			out = append(out, l)
		}
	}
	for _, g := range c.Limits.Groups {
		out = append(out, g.Limits)
		for _, l := range g.Models {
			out = append(out, l)
		}
	}
	for _, l := range c.Pools {
		out = append(out, l)
	}
	return out
}

// decimal parses s, a non-negative decimal ("25", "0.15", "1_000.5"),
// as an exact multiple of 10^-places; false if it is not one, or
// negative, or above most (in whole units).
func decimal(s string, places int, most int64) (int64, bool) {
	s = strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	r, ok := new(big.Rat).SetString(s)
	if !ok || r.Sign() < 0 || strings.ContainsAny(s, "eE/") {
		return 0, false
	}
	scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(places)), nil)))
	if !scaled.IsInt() || r.Cmp(new(big.Rat).SetInt64(most)) > 0 {
		return 0, false
	}
	return scaled.Num().Int64(), true
}

// prices decodes prices: model (or prefix*) → its price per million tokens.
func (d *decoder) prices(n *yaml.Node, c *Config) {
	if isNull(n) {
		return
	}
	for _, p := range d.entries(n, "prices") {
		path := join("prices", p.key.Value)
		f := d.fields(p.val, path, "input", "cached_input", "cache_write", "output")
		var pr Price
		for _, x := range []struct {
			name string
			to   *Picodollars
		}{{"input", &pr.Input}, {"cached_input", &pr.CachedInput}, {"cache_write", &pr.CacheWrite}, {"output", &pr.Output}} {
			var s string
			if f[x.name] == nil || !d.string(f[x.name], path+"."+x.name, &s) {
				if x.name == "input" || x.name == "output" {
					d.value(path+"."+x.name, "is required (USD per million tokens, e.g. \"2.50\")")
				}
				continue
			}
			v, ok := decimal(s, 6, MaxPricePerMillion)
			if !ok {
				d.value(path+"."+x.name, fmt.Sprintf("must be USD per million tokens with at most 6 decimal places, 0 to %d, got %q", MaxPricePerMillion, s))
				continue
			}
			*x.to = Picodollars(v)
		}
		if f["cached_input"] == nil {
			pr.CachedInput = pr.Input
		}
		if f["cache_write"] == nil {
			pr.CacheWrite = pr.Input
		}
		if c.Prices == nil {
			c.Prices = make(map[string]Price)
		}
		c.Prices[p.key.Value] = pr
	}
}

// budget decodes a level's budget onto *b.
func (d *decoder) budget(n *yaml.Node, path string, b **Budget) {
	f := d.fields(n, path, "usd", "period", "time_zone")
	if f == nil {
		return
	}
	var nb Budget
	if !d.string(f["usd"], path+".usd", &nb.USD) {
		d.value(path+".usd", `is required (e.g. "25.00")`)
	} else if v, ok := decimal(nb.USD, 12, MaxBudgetUSD); !ok || v == 0 {
		d.value(path+".usd", fmt.Sprintf("must be a positive amount of USD with at most 12 decimal places, at most %d, got %q", MaxBudgetUSD, nb.USD))
	} else {
		nb.Amount = Picodollars(v)
	}
	if !d.string(f["period"], path+".period", &nb.Period) {
		d.value(path+".period", "is required: day, week, month, total or a duration such as 1h")
	} else if _, err := nb.Every(); err != nil {
		d.value(path+".period", err.Error())
	}
	nb.Loc = time.UTC
	if d.string(f["time_zone"], path+".time_zone", &nb.TimeZone) {
		loc, err := time.LoadLocation(nb.TimeZone)
		if err != nil || nb.TimeZone == "" || nb.TimeZone == "Local" {
			d.value(path+".time_zone", fmt.Sprintf("must be an IANA time zone such as Europe/Paris, got %q", nb.TimeZone))
		} else {
			nb.Loc = loc
		}
	}
	*b = &nb
}

// Every is the length of a budget whose Period is a duration; 0 for the
// named periods. An error says what is wrong with Period.
func (b *Budget) Every() (time.Duration, error) {
	switch b.Period {
	case PeriodDay, PeriodWeek, PeriodMonth, PeriodTotal:
		return 0, nil
	}
	d, err := time.ParseDuration(b.Period)
	if err != nil || d < time.Second || d > 366*24*time.Hour {
		return 0, fmt.Errorf("must be day, week, month, total or a duration from 1s to 8784h, got %q", b.Period)
	}
	return d, nil
}

// hashBudget adds b to a LimitsHash after its level's reservation: nothing
// for none, so that limits without budgets keep the hash they had.
func hashBudget(num func(int64), str func(string), b *Budget) {
	if b == nil {
		return
	}
	num(-2)
	num(int64(b.Amount))
	str(b.Period)
	str(b.TimeZone)
}

// hashPrices adds prices to a LimitsHash: nothing for none.
func (c Config) hashPrices(num func(int64), str func(string)) {
	if len(c.Prices) == 0 {
		return
	}
	str("prices")
	for _, m := range sortedKeys(c.Prices) {
		p := c.Prices[m]
		str(m)
		num(int64(p.Input))
		num(int64(p.CachedInput))
		num(int64(p.CacheWrite))
		num(int64(p.Output))
	}
}

// MarshalYAML writes p as the file does: USD per million tokens.
func (p Price) MarshalYAML() (any, error) {
	return map[string]string{"input": p.Input.usd(6), "cached_input": p.CachedInput.usd(6),
		"cache_write": p.CacheWrite.usd(6), "output": p.Output.usd(6)}, nil
}

// usd writes v × 10^-places as a decimal without trailing zeros: a price
// per token in picodollars with places 6 is USD per million tokens.
func (v Picodollars) usd(places int) string {
	r := new(big.Rat).SetFrac(big.NewInt(int64(v)), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(places)), nil))
	s := strings.TrimRight(r.FloatString(places), "0")
	return strings.TrimSuffix(s, ".")
}

// MaxWeight caps a tenant's weight in its pool's fair shares.
const MaxWeight = 1_000_000

// Weight is tenant's weight in its pools' fair shares: weights', else 1.
func (c Config) Weight(tenant string) int64 {
	if w, ok := c.Weights[tenant]; ok {
		return w
	}
	return 1
}

// weights decodes weights: tenant → 1 to MaxWeight.
func (d *decoder) weights(n *yaml.Node) map[string]int64 {
	if isNull(n) {
		return nil
	}
	var m map[string]int64
	for _, p := range d.entries(n, "weights") {
		path := join("weights", p.key.Value)
		var w int64
		if !d.int(p.val, path, &w) {
			continue
		}
		if w < 1 || w > MaxWeight {
			d.value(path, fmt.Sprintf("must be 1 to %d, got %d", MaxWeight, w))
			continue
		}
		if m == nil {
			m = make(map[string]int64)
		}
		m[p.key.Value] = w
	}
	return m
}

// hashFairness adds fair_share and the weights to a LimitsHash: nothing
// for the default (fair, no weights), so that such limits keep their
// hash.
func (c Config) hashFairness(num func(int64), str func(string)) {
	if !c.FairShare {
		str("fair_share: false")
	}
	if len(c.Weights) == 0 {
		return
	}
	str("weights")
	for _, t := range sortedKeys(c.Weights) {
		str(t)
		num(c.Weights[t])
	}
}
