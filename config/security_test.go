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
  tok-a: {tenants: [acme, beta], may_set_limits: true}
  tok-all:
    tenants: ["*"]
max_keys: 2e3
hot_key_rate: 0
http: {max_conns: 50, event_loops: 3, fast_path: false, read_header_timeout: 1s, read_timeout: 2s, idle_timeout: 3s, write_timeout: 4s}
peer: {max_frame_bytes: 65536, max_conns: 7}
upstream: {dial_timeout: 1s, tls_timeout: 2s, response_header_timeout: 3s, stream_idle_timeout: 4s}
anthropic_upstream: {stream_idle_timeout: 9s}
`), env(map[string]string{"SECRET": secret}))
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.ClusterSecret, want.ClusterSecretSecondary = secret, old
	want.Clients = map[string]Client{"tok-a": {Tenants: []string{"acme", "beta"}, MaySetLimits: true}, "tok-all": {Tenants: []string{"*"}}}
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
		{"clients: {tok: {tenant: [a]}}\n", "line 1: clients.<token>.tenant: unknown field (known: tenants, cert, token, may_set_limits)"},
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

// TestClientCertErrors: a clients: entry is known by a token (its key) or
// a certificate (cert:), never both; a cert entry needs
// http.tls.client_ca_file, names its certificate (not empty), alone (no
// two entries with one cert), and is named in errors by its key, while a
// token entry is named by position only. The config with the CA parses.
func TestClientCertErrors(t *testing.T) {
	const ca = "http: {tls: {cert_file: s.crt, key_file: s.key, client_ca_file: ca.crt}}\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"cert without a client CA", "clients: {gw-1: {cert: spiffe://acme/gw-1, tenants: [a]}}\n",
			"clients.gw-1.cert: needs http.tls.client_ca_file: a client certificate is known only once that CA has verified it"},
		{"cert without any TLS", "http: {tls: {cert_file: s.crt, key_file: s.key}}\nclients: {gw-1: {cert: gw-1.acme, tenants: [a]}}\n",
			"clients.gw-1.cert: needs http.tls.client_ca_file: a client certificate is known only once that CA has verified it"},
		{"token and cert", ca + "clients: {gw-1: {cert: spiffe://acme/gw-1, token: s3cret-token, tenants: [a]}}\n",
			"line 2: clients.gw-1: an entry has a token or a cert, never both: a cert entry's key is its name, never a token; give the token an entry of its own"},
		{"a token field", ca + "clients: {s3cret-token: {token: s3cret-token, tenants: [a]}}\n",
			"line 2: clients.<token>.token: a token entry's token is its key: write <token>: {tenants: [...]}"},
		{"empty cert", ca + "clients: {gw-1: {cert: '', tenants: [a]}}\n",
			"clients.gw-1.cert: must not be empty: the certificate's subject common name, a DNS SAN or a URI SAN"},
		{"null cert", ca + "clients: {gw-1: {cert: ~, tenants: [a]}}\n",
			"clients.gw-1.cert: must not be empty: the certificate's subject common name, a DNS SAN or a URI SAN"},
		{"cert not a string", ca + "clients: {gw-1: {cert: [a], tenants: [a]}}\n",
			"line 2: clients.gw-1.cert: must be a string, got a list"},
		{"two entries, one cert", ca + "clients: {gw-1: {cert: gw.acme, tenants: [a]}, gw-2: {cert: gw.acme, tenants: [b]}}\n",
			`clients.gw-2.cert: "gw.acme" is already the cert of clients.gw-1: a certificate names one entry`},
		{"cert entry without tenants", ca + "clients: {gw-1: {cert: gw.acme}}\n", "clients.gw-1.tenants: must be a non-empty list"},
	} {
		_, err := Parse([]byte(tc.yaml), nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: Parse(%q) error:\n%v\nwant:\n%s", tc.name, tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret-token") {
			t.Errorf("%s: the error echoes a token: %v", tc.name, err)
		}
	}
	got, err := Parse([]byte(ca+`clients:
  tok-a: {tenants: [acme]}
  gw-1: {cert: "spiffe://acme/gw-1", tenants: ["*"]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Client{"tok-a": {Tenants: []string{"acme"}}, "gw-1": {Cert: "spiffe://acme/gw-1", Tenants: []string{"*"}}}
	if !reflect.DeepEqual(got.Clients, want) {
		t.Errorf("clients = %+v, want %+v", got.Clients, want)
	}
	// Validate judges a config built in code the same way.
	c := Default()
	c.Clients = map[string]Client{"gw-1": {Cert: "gw.acme", Tenants: []string{"a"}}}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "clients.gw-1.cert: needs http.tls.client_ca_file") {
		t.Errorf("Validate without a client CA: %v", err)
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
