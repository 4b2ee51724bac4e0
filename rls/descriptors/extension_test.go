package descriptors

import (
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// tenants is a configuration with tokenring's extensions: per tenant, a
// token and concurrency limit carried by a request id; per tenant and model
// a request limit; and a plain reference limit beside them.
const tenants = `
domain: llm
descriptors:
  - key: tenant
    rate_limit:
      unit: minute
      tokens_per_unit: 200000
      concurrency: 20
      request_id_key: request_id
    descriptors:
      - key: model
        rate_limit:
          unit: minute
          requests_per_unit: 600
          concurrency: 4
          request_id_key: request_id
  - key: tenant
    value: acme
    rate_limit:
      unit: hour
      requests_per_unit: 100
      tokens_per_unit: 1000000
      request_id_key: rid
  - key: ip
    rate_limit:
      unit: second
      requests_per_unit: 5
`

func TestRequestID(t *testing.T) {
	c := parseText(t, tenants)
	for _, tc := range []struct {
		entries []Entry
		rule    string // "" for no limit
		rid     string
		key     []Entry // MatchKey's entries
	}{
		// The request id after the limit's level: the limit, per tenant.
		{es("tenant", "t1", "request_id", "r-1"), "llm.tenant", "r-1", es("tenant", "t1")},
		{es("tenant", "t1", "request_id", "r-2"), "llm.tenant", "r-2", es("tenant", "t1")},
		// Without it: the same limit, the ordinary way.
		{es("tenant", "t1"), "llm.tenant", "", es("tenant", "t1")},
		// One level down.
		{es("tenant", "t1", "model", "gpt", "request_id", "r-3"), "llm.tenant.model", "r-3", es("tenant", "t1", "model", "gpt")},
		{es("tenant", "t1", "model", "gpt"), "llm.tenant.model", "", es("tenant", "t1", "model", "gpt")},
		// acme's own rule names its own request-id key.
		{es("tenant", "acme", "rid", "r-4"), "llm.tenant_acme", "r-4", es("tenant", "acme")},
		{es("tenant", "acme", "request_id", "r-5"), "", "", nil},
		// The request id must be the last entry, right after the level.
		{es("tenant", "t1", "request_id", "r-6", "model", "gpt"), "", "", nil},
		{es("tenant", "t1", "other", "x", "request_id", "r-7"), "", "", nil},
		// A limit without request_id_key takes no request id.
		{es("ip", "1.2.3.4", "request_id", "r-8"), "", "", nil},
		{es("ip", "1.2.3.4"), "llm.ip", "", es("ip", "1.2.3.4")},
	} {
		l, rid, ok := c.Match("llm", tc.entries)
		l2, rid2, key, ok2 := c.MatchKey("llm", tc.entries)
		if ok != ok2 || l != l2 || rid != rid2 {
			t.Errorf("%v: Match and MatchKey differ", tc.entries)
		}
		if tc.rule == "" {
			if ok {
				t.Errorf("%v: matched %s, want none", tc.entries, l.Rule)
			}
			continue
		}
		if !ok || l.Rule != tc.rule || rid != tc.rid {
			t.Errorf("%v: ok %v rule %v rid %q, want %s %q", tc.entries, ok, l, rid, tc.rule, tc.rid)
			continue
		}
		if want := Key("llm", tc.key); key != want {
			t.Errorf("%v: key %q, want %q", tc.entries, key, want)
		}
		if l.Stat != l.Rule {
			t.Errorf("%v: stat %q", tc.entries, l.Stat)
		}
	}
}

// TestRequestIDStat: the request id is not in Stat, even with
// detailed_metric.
func TestRequestIDStat(t *testing.T) {
	c := parseText(t, `
domain: llm
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, concurrency: 3, request_id_key: request_id}
`)
	l, rid, ok := c.Match("llm", es("tenant", "t1", "request_id", "r-1"))
	if !ok || rid != "r-1" || l.Stat != "llm.tenant_t1" {
		t.Errorf("ok %v rid %q stat %q", ok, rid, l.Stat)
	}
}

func TestLimitsOf(t *testing.T) {
	c := parseText(t, tenants)
	for _, tc := range []struct {
		key  string
		want limiter.Limits
		ok   bool
	}{
		{Key("llm", es("tenant", "t1")), limiter.Limits{Tokens: 200000, Concurrency: 20, Window: time.Minute}, true},
		{Key("llm", es("tenant", "t1", "model", "m")), limiter.Limits{Requests: 600, Concurrency: 4, Window: time.Minute}, true},
		{Key("llm", es("tenant", "acme")), limiter.Limits{Requests: 100, Tokens: 1000000, Window: time.Hour}, true},
		{Key("llm", es("ip", "10.0.0.1")), limiter.Limits{Requests: 5, Window: time.Second}, true},
		// A key holds no request id.
		{Key("llm", es("tenant", "t1", "request_id", "r-1")), limiter.Limits{}, false},
		{Key("llm", es("nothing", "x")), limiter.Limits{}, false},
		{Key("other", es("tenant", "t1")), limiter.Limits{}, false},
		{"t:tenant", limiter.Limits{}, false},
		{"d:3:llm/6:tenant=2:t", limiter.Limits{}, false},
	} {
		got, ok := c.LimitsOf(tc.key)
		if got != tc.want || ok != tc.ok {
			t.Errorf("LimitsOf(%q) = %+v %v, want %+v %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}

func TestUnits(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		in   string
		unit Unit
		name string
		d    time.Duration
		num  int32 // Envoy's enum number
	}{
		{"second", Second, "SECOND", time.Second, 1},
		{"MINUTE", Minute, "MINUTE", time.Minute, 2},
		{"Hour", Hour, "HOUR", time.Hour, 3},
		{"day", Day, "DAY", day, 4},
		{"month", Month, "MONTH", 30 * day, 5},
		{"year", Year, "YEAR", 365 * day, 6},
		{"week", Week, "WEEK", 7 * day, 7},
	} {
		u, ok := ParseUnit(tc.in)
		if !ok || u != tc.unit || u.String() != tc.name || u.Duration() != tc.d || int32(u) != tc.num {
			t.Errorf("%s: %v %v %s %v", tc.in, u, ok, u, u.Duration())
		}
		if u.Duration() > 366*day {
			t.Errorf("%s: beyond limiter's cap", tc.in)
		}
	}
	for _, bad := range []string{"", "unknown", "UNKNOWN", "seconds", "fortnight", "1"} {
		if u, ok := ParseUnit(bad); ok || u != UnitUnknown {
			t.Errorf("ParseUnit(%q) = %v %v", bad, u, ok)
		}
	}
	if UnitUnknown.String() != "UNKNOWN" || UnitUnknown.Duration() != 0 || Unit(99).String() != "UNKNOWN" {
		t.Error("UnitUnknown")
	}
}
