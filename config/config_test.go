package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// designYAML is an example config in the shape of docs/configuration.md's "A complete example".
const designYAML = `limits:
  default: {rpm: 60, tpm: 100000, concurrency: 10}      # any tenant not listed
  tenants:
    acme: {rpm: 600, tpm: 2000000, concurrency: 50}
  window: 60s          # rpm/tpm are counted over this sliding window
  lease_ttl: 120s      # concurrency slot TTL without renew
pools:                 # shared upstream limits, by model name
  gpt-4o-mini: {rpm: 10000, tpm: 4000000, concurrency: 500}
fallback: degraded     # degraded | open | closed
forward_timeout: 15ms
keys:                  # LLM proxy: API key -> tenant
  sk-acme-1: acme
upstream:
  base_url: http://127.0.0.1:9000/v1
  api_key: ${OPENAI_API_KEY}
admin_token: ${TOKENRING_ADMIN_TOKEN}   # when set, /admin/* needs "Authorization: Bearer <token>"
`

// env returns a getenv over m.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func designConfig() Config {
	c := Default()
	c.Limits.Tenants = map[string]Limits{"acme": {RPM: 600, TPM: 2000000, Concurrency: 50}}
	c.Pools = map[string]Limits{"gpt-4o-mini": {RPM: 10000, TPM: 4000000, Concurrency: 500}}
	c.Keys = map[string]string{"sk-acme-1": "acme"}
	c.Upstream.APIKey = "sk-upstream"
	c.AdminToken = "s3cret"
	return c
}

func TestDesignExample(t *testing.T) {
	got, err := Parse([]byte(designYAML), env(map[string]string{
		"OPENAI_API_KEY":        "sk-upstream",
		"TOKENRING_ADMIN_TOKEN": "s3cret",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if want := designConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	// Without the variables each unset reference is an error naming its
	// field; the one in the comment after admin_token is not.
	_, err = Parse([]byte(designYAML), nil)
	want := "upstream.api_key: ${OPENAI_API_KEY} is not set (write ${OPENAI_API_KEY:-} for a deliberate empty default)\n" +
		"admin_token: ${TOKENRING_ADMIN_TOKEN} is not set (write ${TOKENRING_ADMIN_TOKEN:-} for a deliberate empty default)"
	if err == nil || err.Error() != want {
		t.Errorf("no env: error %v\nwant %s", err, want)
	}
}

func TestDefault(t *testing.T) {
	d := Default()
	want := Config{
		Limits: LimitsSection{
			Default:  Limits{RPM: 60, TPM: 100000, Concurrency: 10},
			Window:   60 * time.Second,
			LeaseTTL: 120 * time.Second,

			MaxPromptBytes: 256 << 10,
		},
		FairShare:      true,
		Fallback:       FallbackDegraded,
		ForwardTimeout: 15 * time.Millisecond,
		ForwardMaxWait: 2 * time.Second,
		PeerLiveness:   time.Second,
		Replication:    Replication{Interval: 100 * time.Millisecond, Mode: ReplicationAsync, Copies: 1},
		Drain:          5 * time.Second,
		Upstream: Upstream{BaseURL: "http://127.0.0.1:9000/v1", DialTimeout: 5 * time.Second, TLSTimeout: 10 * time.Second,
			ResponseHeaderTimeout: 300 * time.Second, StreamIdleTimeout: 60 * time.Second},
		AnthropicUpstream: Upstream{DialTimeout: 5 * time.Second, TLSTimeout: 10 * time.Second,
			ResponseHeaderTimeout: 300 * time.Second, StreamIdleTimeout: 60 * time.Second},
		DefaultMaxTokens: 4096,
		Queue:            Queue{MaxWaiters: 1024, Aging: 5 * time.Second},
		MaxKeys:          1_000_000,
		HotKeyRate:       5,
		HTTP: HTTP{FastPath: true, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
			IdleTimeout: 120 * time.Second, WriteTimeout: 60 * time.Second},
		Peer: Peer{MaxFrameBytes: 1 << 20, MaxConns: 256},
		RLS:  RLS{AllOrNothing: true},
		Log:  Log{Format: LogFmt},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Default() = %+v\nwant %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
	for _, empty := range []string{"", "\n", "# nothing\n", "---\n", "{}\n", "---\n# c\n...\n", "limits:\n", "limits: {}\nqueue:\n"} {
		c, err := Parse([]byte(empty), nil)
		if err != nil {
			t.Errorf("Parse(%q): %v", empty, err)
		} else if !reflect.DeepEqual(c, d) {
			t.Errorf("Parse(%q) = %+v, want Default()", empty, c)
		}
	}
}

// TestParse: each document changes Default by edit.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		edit func(*Config)
	}{
		{"partial default", "limits:\n  default: {rpm: 5}\n", func(c *Config) { c.Limits.Default.RPM = 5 }},
		{"tenant inherits default", "limits:\n  tenants:\n    acme: {rpm: 600}\n  default: {tpm: 7}\n", func(c *Config) {
			c.Limits.Default.TPM = 7
			c.Limits.Tenants = map[string]Limits{"acme": {RPM: 600, TPM: 7, Concurrency: 10}}
		}},
		{"tenant zero is unlimited", "limits:\n  tenants:\n    acme: {rpm: 0}\n", func(c *Config) {
			c.Limits.Tenants = map[string]Limits{"acme": {RPM: 0, TPM: 100000, Concurrency: 10}}
		}},
		{"null tenant is the default", "limits:\n  tenants:\n    acme:\n", func(c *Config) {
			c.Limits.Tenants = map[string]Limits{"acme": c.Limits.Default}
		}},
		{"pool fields default to unlimited", "pools:\n  gpt-4o: {tpm: 30000000}\n  'gpt-4o-*': {}\n", func(c *Config) {
			c.Pools = map[string]Limits{"gpt-4o": {TPM: 30000000}, "gpt-4o-*": {}}
		}},
		{"number forms", "limits:\n  default: {rpm: 1_000, tpm: 2e6, concurrency: \"7\"}\n", func(c *Config) {
			c.Limits.Default = Limits{RPM: 1000, TPM: 2000000, Concurrency: 7}
		}},
		{"limits at the cap", "limits:\n  default: {tpm: 1e15}\n", func(c *Config) { c.Limits.Default.TPM = 1e15 }},
		{"durations", "limits: {window: 1m30s, lease_ttl: 24h}\nforward_timeout: 250us\nqueue: {aging: 1s}\n", func(c *Config) {
			c.Limits.Window, c.Limits.LeaseTTL = 90*time.Second, 24*time.Hour
			c.ForwardTimeout, c.Queue.Aging = 250*time.Microsecond, time.Second
		}},
		{"fallback", "fallback: closed\n", func(c *Config) { c.Fallback = FallbackClosed }},
		{"preload_encodings", "preload_encodings: true\n", func(c *Config) { c.PreloadEncodings = true }},
		{"preload_encodings in any case", "preload_encodings: TRUE\n", func(c *Config) { c.PreloadEncodings = true }},
		{"preload_encodings off", "preload_encodings: false\n", func(c *Config) {}},
		{"forward waits", "forward_timeout: 50ms\nforward_max_wait: 10s\npeer_liveness: 3s\n", func(c *Config) {
			c.ForwardTimeout, c.ForwardMaxWait, c.PeerLiveness = 50*time.Millisecond, 10*time.Second, 3*time.Second
		}},
		{"strings stay as written", "keys:\n  0123: 007\n  yes: true\nadmin_token: 1e3\n", func(c *Config) {
			c.Keys = map[string]string{"0123": "007", "yes": "true"}
			c.AdminToken = "1e3"
		}},
		{"base_url trailing slash", "upstream: {base_url: 'https://api.openai.com/v1/'}\n", func(c *Config) {
			c.Upstream.BaseURL = "https://api.openai.com/v1"
		}},
		{"optional fields", "default_max_tokens: 512\nqueue: {max_waiters: 10}\nanthropic_upstream:\n  base_url: https://api.anthropic.com/v1\n  api_key: ak\n", func(c *Config) {
			c.DefaultMaxTokens = 512
			c.Queue.MaxWaiters = 10
			c.AnthropicUpstream.BaseURL, c.AnthropicUpstream.APIKey = "https://api.anthropic.com/v1", "ak"
		}},
		{"anchors, aliases and merge keys", `
x-tiers:
  gold: &gold {rpm: 600, tpm: 2000000}
  big: &big {concurrency: 99}
limits:
  tenants:
    acme: *gold
    beta: {<<: *gold, rpm: 700}
    gamma: {<<: [*big, *gold]}
`, func(c *Config) {
			c.Limits.Tenants = map[string]Limits{
				"acme":  {RPM: 600, TPM: 2000000, Concurrency: 10},
				"beta":  {RPM: 700, TPM: 2000000, Concurrency: 10},
				"gamma": {RPM: 600, TPM: 2000000, Concurrency: 99},
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.yaml), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tc.edit(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string // the whole error text
	}{
		// Values out of range: the field path, no line.
		{"limits:\n  tenants:\n    acme: {rpm: -5}\n", "limits.tenants.acme.rpm: must be >= 0, got -5"},
		{"limits:\n  default: {tpm: -1}\n", "limits.default.tpm: must be >= 0, got -1"},
		{"limits:\n  window: 5x\n", `limits.window: invalid duration "5x"`},
		{"limits:\n  window: 60\n", `limits.window: invalid duration "60" (a number needs a unit, e.g. "60s")`},
		{"limits:\n  window: 0s\n", "limits.window: must be > 0"},
		{"limits:\n  window: 25h\n", "limits.window: must be <= 24h0m0s, got 25h0m0s"},
		{"limits:\n  lease_ttl: 1us\n", "limits.lease_ttl: must be >= 1ms, got 1µs"},
		{"limits:\n  default: {concurrency: 1000000000000001}\n", "limits.default.concurrency: must be <= 1e15, got 1000000000000001"},
		{"pools:\n  m: {tpm: 1e20}\n", "pools.m.tpm: must be <= 1e15, got 1e20"},
		{"pools:\n  m: {tpm: 99999999999999999999}\n", "pools.m.tpm: must be <= 1e15, got 99999999999999999999"},
		{"pools:\n  m: {rpm: 1.5}\n", `pools.m.rpm: must be an integer, got "1.5"`},
		{"pools:\n  m: {rpm: lots}\n", `pools.m.rpm: must be an integer, got "lots"`},
		{"pools:\n  'gpt-*-mini': {rpm: 1}\n", "pools.gpt-*-mini: '*' is allowed only at the end"},
		{"fallback: maybe\n", `fallback: must be one of degraded|open|closed, got "maybe"`},
		{"forward_timeout: 0ms\n", "forward_timeout: must be > 0"},
		{"forward_timeout: -1s\n", "forward_timeout: must be > 0"},
		{"forward_timeout: 2m\n", "forward_timeout: must be <= 1m0s, got 2m0s"},
		{"forward_max_wait: 0s\n", "forward_max_wait: must be > 0"},
		{"forward_max_wait: 2m\n", "forward_max_wait: must be <= 1m0s, got 2m0s"},
		{"peer_liveness: -1s\n", "peer_liveness: must be > 0"},
		{"peer_liveness: 61s\n", "peer_liveness: must be <= 1m0s, got 1m1s"},
		{"forward_timeout: 500ms\npeer_liveness: 1500ms\n", "forward_max_wait: must be > forward_timeout + peer_liveness (2s), got 2s: a hung owner would be refused at the cap instead of failing over"},
		{"replication:\n  mode: eventually\n", `replication.mode: must be async or sync, got "eventually"`},
		{"replication:\n  interval: 0s\n", "replication.interval: must be > 0"},
		{"replication:\n  every: 1s\n", "line 2: replication.every: unknown field (known: interval, mode, copies)"},
		{"replication:\n  copies: 0\n", "replication.copies: must be between 1 and 7, got 0"},
		{"replication:\n  copies: 99\n", "replication.copies: must be between 1 and 7, got 99"},
		{"drain: -1s\n", "drain: must be between 0 and 10m0s, got -1s"},
		{"keys:\n  sk-1: ''\n", "keys.sk-1: tenant must not be empty"},
		{"keys:\n  sk-1:\n", "keys.sk-1: tenant must not be empty"},
		{"keys:\n  '': acme\n", "keys: API key must not be empty"},
		{"upstream:\n  base_url: ftp://example.com\n", `upstream.base_url: must be an http(s) URL, got "ftp://example.com"`},
		{"upstream:\n  base_url: ''\n", `upstream.base_url: must be an http(s) URL, got ""`},
		{"upstream:\n  base_url: localhost:9000\n", `upstream.base_url: must be an http(s) URL, got "localhost:9000"`},
		{"anthropic_upstream:\n  base_url: 'http://'\n", `anthropic_upstream.base_url: must be an http(s) URL, got "http:"`},
		{"anthropic_upstream:\n  api_key: k\n", "anthropic_upstream.base_url: must be set when anthropic_upstream.api_key is"},
		{"default_max_tokens: 0\n", "default_max_tokens: must be >= 1, got 0"},
		{"queue: {max_waiters: 0}\n", "queue.max_waiters: must be >= 1, got 0"},
		{"queue: {aging: 0s}\n", "queue.aging: must be > 0"},
		{"preload_encodings: yes\n", `preload_encodings: must be true or false, got "yes"`},
		{"preload_encodings: 1\n", `preload_encodings: must be true or false, got "1"`},
		{"limits:\n  tenants:\n    '': {rpm: 1}\n", "limits.tenants: tenant name must not be empty"},
		// Several problems: all of them, in field order.
		{"fallback: maybe\nlimits: {window: 0s, default: {rpm: -1}}\n",
			"limits.default.rpm: must be >= 0, got -1\nlimits.window: must be > 0\nfallback: must be one of degraded|open|closed, got \"maybe\""},

		// Structure: the line, then the field path.
		{"limits:\n  default: {rpm: 1, rmp: 2}\n", "line 2: limits.default.rmp: unknown field (known: rpm, tpm, concurrency, reservation, budget)"},
		{"limits:\n  tenants:\n    acme:\n      rpm: 1\n      burst: 2\n", "line 5: limits.tenants.acme.burst: unknown field (known: rpm, tpm, concurrency, reservation, budget, parent, models)"},
		{"limit:\n  window: 1s\n", "line 1: limit: unknown field (known: limits, pools, fallback, forward_timeout, forward_max_wait, peer_liveness, replication, drain, keys, upstream, admin_token, default_max_tokens, queue, anthropic_upstream, cluster_secret, cluster_secret_secondary, clients, max_keys, hot_key_rate, preload_encodings, http, peer, grpc, rls, log, tracing, prices, fair_share, weights)"},
		{"upstream:\n  url: http://x\n", "line 2: upstream.url: unknown field (known: base_url, api_key, dial_timeout, tls_timeout, response_header_timeout, stream_idle_timeout)"},
		{"limits:\n  tenants:\n    acme: {rpm: 1}\n    acme: {rpm: 2}\n", "line 4: limits.tenants.acme: duplicate key (first at line 3)"},
		{"fallback: open\nfallback: closed\n", "line 2: fallback: duplicate key (first at line 1)"},
		{"limits: 5\n", `line 1: limits: must be a mapping, got "5"`},
		{"limits:\n  default: [1, 2]\n", "line 2: limits.default: must be a mapping, got a list"},
		{"limits:\n  window: [1s]\n", "line 2: limits.window: must be a duration, got a list"},
		{"admin_token: {a: b}\n", "line 1: admin_token: must be a string, got a mapping"},
		{"preload_encodings: [true]\n", "line 1: preload_encodings: must be true or false, got a list"},
		{"pools:\n  m: {rpm: {x: 1}}\n", "line 2: pools.m.rpm: must be an integer, got a mapping"},
		{"- a\n", "line 1: the document must be a mapping of settings, got a list"},
		{"hello\n", `line 1: the document must be a mapping of settings, got "hello"`},
		{"limits:\n  tenants:\n    acme: {<<: 5}\n", `line 3: limits.tenants.acme: must be a mapping, got "5"`},
		// Both kinds together: structure first, then values.
		{"limits:\n  default: {rmp: 1, rpm: x}\n", "line 2: limits.default.rmp: unknown field (known: rpm, tpm, concurrency, reservation, budget)\nlimits.default.rpm: must be an integer, got \"x\""},

		// YAML syntax and documents.
		{"a: [\n", "line 1: did not find expected node content"},
		{"a: 1\n---\nb: 2\n", "line 2: only one YAML document is allowed"},
		{"a: *nowhere\n", "unknown anchor 'nowhere' referenced"},

		// Variable references.
		{"admin_token: ${X\n", "line 1: unterminated ${ (want ${NAME} or ${NAME:-default})"},
		{"\n\nadmin_token: ${1X}\n", `line 3: invalid variable reference "${1X}" (want ${NAME} or ${NAME:-default})`},
		{"admin_token: ${X-y}\n", `line 1: invalid variable reference "${X-y}" (want ${NAME} or ${NAME:-default})`},
		{"admin_token: ${}\n", `line 1: invalid variable reference "${}" (want ${NAME} or ${NAME:-default})`},
	} {
		_, err := Parse([]byte(tc.yaml), nil)
		if err == nil {
			t.Errorf("Parse(%q) = nil error, want %q", tc.yaml, tc.want)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Parse(%q) error:\n%s\nwant:\n%s", tc.yaml, err, tc.want)
		}
		var e *Error
		if !errors.As(err, &e) || len(e.Msgs) == 0 {
			t.Errorf("Parse(%q) error %T is not an *Error", tc.yaml, err)
		}
	}
}

func TestExpand(t *testing.T) {
	getenv := env(map[string]string{"RPM": "600", "TOKEN": "s3cret", "URL": "https://u.example/v1", "EMPTY": ""})
	for _, tc := range []struct {
		in, want string
	}{
		{"", ""},
		{"no refs $HOME $ {X}", "no refs $HOME $ {X}"},
		{"${TOKEN}", "s3cret"},
		{"a${TOKEN}b${TOKEN}", "as3cretbs3cret"},
		{"${MISSING}", unsetOpen + "MISSING" + unsetClose},
		{"${MISSING:-dflt}", "dflt"},
		{"${EMPTY:-dflt}", "dflt"},
		{"${TOKEN:-dflt}", "s3cret"},
		{"${MISSING:-}", ""},
		{"${MISSING:-a b:c-d $x}", "a b:c-d $x"},
		{"$${TOKEN}", "${TOKEN}"},
		{"$$${TOKEN}", "$${TOKEN}"},
		{"# ${TOKEN}", "# s3cret"},
	} {
		got, err := expand(tc.in, getenv)
		if err != nil || got != tc.want {
			t.Errorf("expand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}

	c, err := Parse([]byte(`
limits:
  tenants:
    acme: {rpm: ${RPM}, tpm: ${TPM:-5000}, concurrency: ${CONC:-}}
upstream:
  base_url: ${URL}
  api_key: ${MISSING:-}
admin_token: "${TOKEN}"   # ${NOT_SET} in a comment is never read
anthropic_upstream:
  base_url: ${ANTHROPIC_URL:-}
`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	// An empty ${VAR:-} leaves a null: the field keeps its default.
	if got, want := c.Limits.Tenants["acme"], (Limits{RPM: 600, TPM: 5000, Concurrency: 10}); got != want {
		t.Errorf("acme = %+v, want %+v", got, want)
	}
	if c.Upstream.BaseURL != "https://u.example/v1" || c.Upstream.APIKey != "" || c.AdminToken != "s3cret" || c.AnthropicUpstream != Default().AnthropicUpstream {
		t.Errorf("upstream %+v, admin_token %q, anthropic %+v", c.Upstream, c.AdminToken, c.AnthropicUpstream)
	}
	// A variable set to nothing inside quotes is an empty string, not a null.
	if _, err := Parse([]byte(`upstream: {base_url: "${EMPTY:-}"}`), getenv); err == nil ||
		err.Error() != `upstream.base_url: must be an http(s) URL, got ""` {
		t.Errorf("quoted empty base_url: %v", err)
	}
}

func TestHelpers(t *testing.T) {
	c := designConfig()
	c.Pools["gpt-4o-*"] = Limits{RPM: 1}
	c.Pools["gpt-4o-mini-*"] = Limits{RPM: 2}
	c.Pools["*"] = Limits{RPM: 3}

	if got := c.TenantLimits("acme"); got != (Limits{RPM: 600, TPM: 2000000, Concurrency: 50}) {
		t.Errorf("TenantLimits(acme) = %+v", got)
	}
	if got := c.TenantLimits("nobody"); got != c.Limits.Default {
		t.Errorf("TenantLimits(nobody) = %+v", got)
	}
	for _, tc := range []struct {
		model, name string
		rpm         int64
		ok          bool
	}{
		{"gpt-4o-mini", "gpt-4o-mini", 10000, true}, // exact beats every pattern
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini-*", 2, true},
		{"gpt-4o-2024-08-06", "gpt-4o-*", 1, true},
		{"gpt-4o", "*", 3, true}, // "gpt-4o-*" needs the '-'
		{"claude", "*", 3, true},
		{"", "", 0, false},
	} {
		name, l, ok := c.Pool(tc.model)
		if name != tc.name || l.RPM != tc.rpm || ok != tc.ok {
			t.Errorf("Pool(%q) = %q, %+v, %v; want %q, rpm %d, %v", tc.model, name, l, ok, tc.name, tc.rpm, tc.ok)
		}
	}
	if name, _, ok := designConfig().Pool("gpt-4o"); ok {
		t.Errorf("Pool(gpt-4o) without patterns = %q", name)
	}
	if tenant, ok := c.Tenant("sk-acme-1"); tenant != "acme" || !ok {
		t.Errorf("Tenant(sk-acme-1) = %q, %v", tenant, ok)
	}
	for _, key := range []string{"sk-unknown", ""} {
		if tenant, ok := c.Tenant(key); tenant != "" || ok {
			t.Errorf("Tenant(%q) = %q, %v", key, tenant, ok)
		}
	}
	if got := c.Anthropic(); got != c.Upstream {
		t.Errorf("Anthropic() = %+v, want upstream", got)
	}
	c.AnthropicUpstream.BaseURL, c.AnthropicUpstream.APIKey = "https://api.anthropic.com/v1", "ak"
	if got := c.Anthropic(); got != c.AnthropicUpstream {
		t.Errorf("Anthropic() = %+v, want anthropic_upstream", got)
	}
}

// TestRoundTrip: a Config marshalled by yaml.v3 parses back to itself.
func TestRoundTrip(t *testing.T) {
	c := designConfig()
	c.Limits.Tenants["beta"] = Limits{RPM: 0, TPM: 5, Concurrency: 0}
	c.Pools["gpt-4o-*"] = Limits{TPM: 1e15}
	c.Fallback = FallbackOpen
	c.ForwardTimeout = 250 * time.Microsecond
	c.ForwardMaxWait, c.PeerLiveness = 3*time.Second, 1500*time.Millisecond
	c.AnthropicUpstream.BaseURL, c.AnthropicUpstream.APIKey = "https://api.anthropic.com/v1", "ak"
	c.ClusterSecret = strings.Repeat("s", 32)
	c.ClusterSecretSecondary = strings.Repeat("o", 40)
	c.Clients = map[string]Client{"tok-1": {Tenants: []string{"acme", "beta"}}, "tok-all": {Tenants: []string{"*"}},
		"gw-1": {Cert: "spiffe://acme/gw-1", Tenants: []string{"acme"}}}
	c.MaxKeys = 5000
	c.HTTP = HTTP{MaxConns: 100, ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, IdleTimeout: 3 * time.Second, WriteTimeout: 4 * time.Second,
		TLS: TLS{CertFile: "/tls/tls.crt", KeyFile: "/tls/tls.key", ClientCAFile: "/tls/ca.crt"}}
	c.Peer = Peer{MaxFrameBytes: 65536, MaxConns: 8}
	c.Upstream.DialTimeout, c.AnthropicUpstream.StreamIdleTimeout = time.Second, 2*time.Minute
	for _, want := range []Config{Default(), c} {
		data, err := yaml.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(data, nil)
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip:\n%s\ngot  %+v\nwant %+v", data, got, want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokenring.yaml")
	if err := os.WriteFile(path, []byte(designYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path, env(map[string]string{"OPENAI_API_KEY": "sk-upstream", "TOKENRING_ADMIN_TOKEN": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, designConfig()) {
		t.Errorf("Load = %+v", c)
	}

	if err := os.WriteFile(path, []byte("fallback: maybe\nlimits: {rpm: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, nil)
	want := path + ": line 2: limits.rpm: unknown field (known: default, tenants, groups, window, lease_ttl, max_prompt_bytes)"
	if err == nil || err.Error() != want {
		t.Errorf("Load error:\n%v\nwant:\n%s", err, want)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestErrorFormat(t *testing.T) {
	e := &Error{File: "f.yaml", Msgs: []string{"a: x", "line 2: b: y"}}
	if got, want := e.Error(), "f.yaml: a: x\nf.yaml: line 2: b: y"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestAliasBomb: merge keys that multiply cost what they hold, not what
// they multiply to, and chains of merges are bounded.
func TestAliasBomb(t *testing.T) {
	bomb := func(levels, fan int) string {
		var b strings.Builder
		b.WriteString("x-bomb:\n  l0: &l0 {rpm: 1}\n")
		for i := 1; i <= levels; i++ {
			b.WriteString("  l" + strconv.Itoa(i) + ": &l" + strconv.Itoa(i) + " {<<: [")
			for j := range fan {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString("*l" + strconv.Itoa(i-1))
			}
			b.WriteString("]}\n")
		}
		b.WriteString("limits:\n  default: *l" + strconv.Itoa(levels) + "\n")
		return b.String()
	}
	start := time.Now()
	c, err := Parse([]byte(bomb(30, 10)), nil) // 10^30 entries if expanded naively
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.Default.RPM != 1 {
		t.Errorf("rpm = %d, want 1", c.Limits.Default.RPM)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Parse(bomb) took %v", d)
	}
	_, err = Parse([]byte(bomb(40, 1)), nil)
	if err == nil || !strings.Contains(err.Error(), "limits.default: merge keys nested more than 32 deep") {
		t.Errorf("Parse(chain of 40) = %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		designYAML, "", "limits:\n  tenants:\n    a: &b {rpm: 5}\n    c: {<<: *b}\n",
		"keys: {a: ${X:-b}}", "$${", "${", "a: *b", "limits: {window: 1e400s}", "pools: {'*': {}}",
		"\xef\xbb\xbflimits: {}", "? [a]\n: b\n", "limits: !!binary aGVsbG8=",
		"prices: {m: {input: '2.50', output: 1e1}}\nlimits: {default: {budget: {usd: 0.1, period: 1h, time_zone: UTC}}}\nweights: {a: 2}\nfair_share: false",
	} {
		f.Add([]byte(s))
	}
	getenv := env(map[string]string{"X": "x", "Y": "{rpm: 1}"})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, getenv)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Msgs) == 0 {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse returned an invalid Config: %v", err)
		}
	})
}

// log.format: logfmt by default, json when asked, anything else refused.
func TestLogFormat(t *testing.T) {
	if f := Default().Log.Format; f != LogFmt {
		t.Errorf("default log.format %q, want logfmt", f)
	}
	c, err := Parse([]byte("log: {format: json}\n"), nil)
	if err != nil || c.Log.Format != LogJSON {
		t.Errorf("log.format: json: %q, %v", c.Log.Format, err)
	}
	if _, err := Parse([]byte("log: {format: xml}\n"), nil); err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Errorf("log.format: xml: %v, want an error naming log.format", err)
	}
}
