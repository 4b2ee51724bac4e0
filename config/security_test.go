package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSecurityFields(t *testing.T) {
	secret := strings.Repeat("k", 32)
	old := strings.Repeat("o", 33)
	got, err := Parse([]byte(`
cluster_secret: ${SECRET}
cluster_secret_secondary: "`+old+`"
clients:
  tok-a: {tenants: [acme, beta]}
  tok-all:
    tenants: ["*"]
max_keys: 2e3
hot_key_rate: 0
http: {max_conns: 50, event_loops: 3, read_header_timeout: 1s, read_timeout: 2s, idle_timeout: 3s, write_timeout: 4s}
peer: {max_frame_bytes: 65536, max_conns: 7}
upstream: {dial_timeout: 1s, tls_timeout: 2s, response_header_timeout: 3s, stream_idle_timeout: 4s}
anthropic_upstream: {stream_idle_timeout: 9s}
`), env(map[string]string{"SECRET": secret}))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.ClusterSecret, want.ClusterSecretSecondary = secret, old
	want.Clients = map[string]Client{"tok-a": {Tenants: []string{"acme", "beta"}}, "tok-all": {Tenants: []string{"*"}}}
	want.MaxKeys = 2000
	want.HotKeyRate = 0 // slices off
	want.HTTP = HTTP{MaxConns: 50, EventLoops: 3, ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, IdleTimeout: 3 * time.Second, WriteTimeout: 4 * time.Second}
	want.Peer = Peer{MaxFrameBytes: 65536, MaxConns: 7}
	want.Upstream.DialTimeout, want.Upstream.TLSTimeout = time.Second, 2*time.Second
	want.Upstream.ResponseHeaderTimeout, want.Upstream.StreamIdleTimeout = 3*time.Second, 4*time.Second
	want.AnthropicUpstream.StreamIdleTimeout = 9 * time.Second
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestParseSecurityErrors(t *testing.T) {
	short := "short-secret-17by" // 17 bytes; must never be echoed
	for _, tc := range []struct{ yaml, want string }{
		{"cluster_secret: " + short + "\n", "cluster_secret: must be at least 32 bytes, got 17"},
		{"cluster_secret_secondary: " + strings.Repeat("x", 32) + "\n", "cluster_secret_secondary: only valid when cluster_secret is set"},
		{"cluster_secret: " + strings.Repeat("x", 32) + "\ncluster_secret_secondary: " + short + "\n", "cluster_secret_secondary: must be at least 32 bytes, got 17"},
		{"clients: {tok: {tenants: []}}\n", "clients.<token>.tenants: must be a non-empty list"},
		{"clients: {tok: {}}\n", "clients.<token>.tenants: must be a non-empty list"},
		{"clients: {tok: {tenants: [a, '']}}\n", "clients.<token>.tenants: tenant name must not be empty"},
		{"clients: {'': {tenants: [a]}}\n", "clients: client token must not be empty"},
		{"clients: {tok: {tenants: a}}\n", `line 1: clients.<token>.tenants: must be a list, got "a"`},
		{"clients: {tok: {tenant: [a]}}\n", "line 1: clients.<token>.tenant: unknown field (known: tenants)"},
		{"max_keys: 0\n", "max_keys: must be >= 1, got 0"},
		{"hot_key_rate: -5\n", "hot_key_rate: must be >= 0, got -5"},
		{"http: {max_conns: -1}\n", "http.max_conns: must be between 0 (automatic) and 1048576, got -1"},
		{"http: {event_loops: -2}\n", "http.event_loops: must be between -1 (none) and 256 (0: automatic), got -2"},
		{"http: {event_loops: 257}\n", "http.event_loops: must be between -1 (none) and 256 (0: automatic), got 257"},
		{"http: {read_timeout: 0s}\n", "http.read_timeout: must be > 0"},
		{"peer: {max_frame_bytes: 10}\n", "peer.max_frame_bytes: must be between 4096 and 67108864, got 10"},
		{"peer: {max_conns: 0}\n", "peer.max_conns: must be between 1 and 1048576, got 0"},
		{"upstream: {dial_timeout: -1s}\n", "upstream.dial_timeout: must be > 0"},
		{"anthropic_upstream: {tls_timeout: 48h}\n", "anthropic_upstream.tls_timeout: must be <= 24h0m0s, got 48h0m0s"},
	} {
		_, err := Parse([]byte(tc.yaml), nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) error:\n%v\nwant:\n%s", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), short) {
			t.Errorf("Parse(%q) error echoes the secret: %v", tc.yaml, err)
		}
	}
}

// TestUnsetVariable: an unset ${NAME} without a default is an error naming
// the field; ${NAME:-} is a deliberate empty; a comment's reference is not
// read.
func TestUnsetVariable(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"admin_token: ${TOKENRING_ADMIN_TOKEN}\n", "admin_token: ${TOKENRING_ADMIN_TOKEN} is not set (write ${TOKENRING_ADMIN_TOKEN:-} for a deliberate empty default)"},
		{"limits:\n  tenants:\n    acme: {rpm: ${RPM}}\n", "limits.tenants.acme.rpm: ${RPM} is not set (write ${RPM:-} for a deliberate empty default)"},
		{"keys: {${KEY}: acme}\n", "keys: ${KEY} is not set (write ${KEY:-} for a deliberate empty default)"},
		{"upstream: ${UP}\n", "upstream: ${UP} is not set (write ${UP:-} for a deliberate empty default)"},
		{"upstream: {base_url: 'http://h/${PATH_PART}'}\n", "upstream.base_url: ${PATH_PART} is not set (write ${PATH_PART:-} for a deliberate empty default)"},
		{"limits:\n  tenants:\n    ${TENANT}: {rpm: 1}\n", "limits.tenants: ${TENANT} is not set (write ${TENANT:-} for a deliberate empty default)"},
		{"clients: {${TOKEN}: {tenants: [a]}}\n", "clients: ${TOKEN} is not set (write ${TOKEN:-} for a deliberate empty default)"},
		{"clients: {tok: {tenants: [${T}]}}\n", "clients.<token>.tenants: ${T} is not set (write ${T:-} for a deliberate empty default)"},
	} {
		_, err := Parse([]byte(tc.yaml), env(map[string]string{"EMPTY": ""}))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) error:\n%v\nwant:\n%s", tc.yaml, err, tc.want)
		}
	}
	c, err := Parse([]byte("# ${IN_COMMENT}\nadmin_token: ${UNSET:-}  # ${ALSO}\n"), nil)
	if err != nil || c.AdminToken != "" {
		t.Errorf("comment and ${UNSET:-}: %+v, %v", c.AdminToken, err)
	}
}

func TestLimitsHash(t *testing.T) {
	a := designConfig()
	a.Limits.Tenants["beta"] = Limits{RPM: 1, TPM: 2, Concurrency: 3}
	a.Pools["gpt-*"] = Limits{RPM: 4}
	// The same maps built in another order hash the same.
	b := designConfig()
	b.Pools = map[string]Limits{"gpt-*": {RPM: 4}, "gpt-4o-mini": a.Pools["gpt-4o-mini"]}
	b.Limits.Tenants = map[string]Limits{"beta": {RPM: 1, TPM: 2, Concurrency: 3}, "acme": a.Limits.Tenants["acme"]}
	// Fields that do not decide admissions do not count.
	b.AdminToken, b.Fallback, b.ClusterSecret = "other", FallbackOpen, strings.Repeat("s", 32)
	ha := a.LimitsHash()
	if len(ha) != 16 || strings.Trim(ha, "0123456789abcdef") != "" {
		t.Fatalf("LimitsHash = %q, want 16 hex digits", ha)
	}
	if hb := b.LimitsHash(); hb != ha {
		t.Errorf("equal limits: %s != %s", hb, ha)
	}
	for name, edit := range map[string]func(*Config){
		"default":        func(c *Config) { c.Limits.Default.TPM++ },
		"tenant":         func(c *Config) { c.Limits.Tenants["beta"] = Limits{RPM: 1, TPM: 2, Concurrency: 4} },
		"tenant renamed": func(c *Config) { c.Limits.Tenants["betb"] = c.Limits.Tenants["beta"]; delete(c.Limits.Tenants, "beta") },
		"window":         func(c *Config) { c.Limits.Window++ },
		"lease_ttl":      func(c *Config) { c.Limits.LeaseTTL *= 2 },
		"pool":           func(c *Config) { c.Pools["gpt-*"] = Limits{TPM: 4} },
		"pool moved": func(c *Config) {
			c.Pools = map[string]Limits{"gpt-*": {RPM: 4}}
			c.Limits.Tenants["gpt-4o-mini"] = a.Pools["gpt-4o-mini"]
		},
		"default_max_tokens": func(c *Config) { c.DefaultMaxTokens = 1 },
	} {
		c := designConfig()
		c.Limits.Tenants["beta"] = Limits{RPM: 1, TPM: 2, Concurrency: 3}
		c.Pools["gpt-*"] = Limits{RPM: 4}
		edit(&c)
		if c.LimitsHash() == ha {
			t.Errorf("%s changed but the hash did not", name)
		}
	}
}
