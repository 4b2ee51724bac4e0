package config

import (
	"crypto/sha256"
	"math"

	"encoding/binary"
	"encoding/hex"
	"fmt"
	"go.yaml.in/yaml/v3"
	"time"
)

// MaxEventLoops bounds http.event_loops.
const MaxEventLoops = 256

// MaxConnsLimit bounds http.max_conns and peer.max_conns.
const MaxConnsLimit = 1 << 20

// MaxFrameLimit bounds peer.max_frame_bytes (64 MiB); the smallest is 4 KiB.
const (
	MaxFrameLimit = 64 << 20
	MinFrameLimit = 4 << 10
)

// Client is one entry of the "clients:" section: a caller of the decision
// API and the tenants it may act for. An entry is known by exactly one
// credential: its token (the entry's key, sent as "Authorization: Bearer
// <token>"), or, when Cert is set, a TLS client certificate; the key of a
// cert entry is only its name and is never accepted as a token.
type Client struct {
	// Tenants are the tenants the client may act for; "*" is every
	// tenant. Not empty; no name is empty.
	Tenants []string `yaml:"tenants"`
	// Cert, when not empty, is the identity of the client's certificate,
	// matched exactly against the verified leaf's subject common name, its
	// DNS SANs and its URI SANs (e.g. "spiffe://acme/gw-1"). Needs
	// http.tls.client_ca_file; no two entries have the same Cert.
	Cert string `yaml:"cert,omitempty"`
	// MaySetLimits lets the client send limits with its acquires (the
	// tenant's "limits" and its "parents"), which the keys' owners apply
	// in place of the file's. Default false: such an acquire is a 403.
	MaySetLimits bool `yaml:"may_set_limits,omitempty"`
}

// TLS is the "http.tls:" section. CertFile and KeyFile are PEM files,
// both set or neither; they are read again when they change (cert-manager
// rewrites them in place or swaps a symlink), at most once a second.
// ClientCAFile, when set, is a PEM bundle of CAs: every client must then
// present a certificate one of them issued, and clients: entries may name
// one (Client.Cert).
type TLS struct {
	CertFile     string `yaml:"cert_file,omitempty"`
	KeyFile      string `yaml:"key_file,omitempty"`
	ClientCAFile string `yaml:"client_ca_file,omitempty"`
}

// Enabled reports whether t serves TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// upstreamTimeouts checks the timeouts of an upstream section.
func (e *errorList) upstreamTimeouts(path string, u Upstream) {
	e.duration(path+".dial_timeout", u.DialTimeout, 1, MaxDuration)
	e.duration(path+".tls_timeout", u.TLSTimeout, 1, MaxDuration)
	e.duration(path+".response_header_timeout", u.ResponseHeaderTimeout, 1, MaxDuration)
	e.duration(path+".stream_idle_timeout", u.StreamIdleTimeout, 1, MaxDuration)
}

// validateSecurity checks the cluster secrets, clients, max_keys and the
// http and peer bounds. A secret is never echoed, only its length.
func (c Config) validateSecurity(errs *errorList) {
	secret := func(path, s string) {
		if s != "" && len(s) < MinSecretLen {
			errs.add(path, fmt.Sprintf("must be at least %d bytes, got %d", MinSecretLen, len(s)))
		}
	}
	secret("cluster_secret", c.ClusterSecret)
	secret("cluster_secret_secondary", c.ClusterSecretSecondary)
	if c.ClusterSecretSecondary != "" && c.ClusterSecret == "" {
		errs.add("cluster_secret_secondary", "only valid when cluster_secret is set")
	}
	c.validateClients(errs)
	errs.count("max_keys", int64(c.MaxKeys), 1)
	errs.count("hot_key_rate", int64(c.HotKeyRate), 0)
	if c.HTTP.MaxConns < 0 || c.HTTP.MaxConns > MaxConnsLimit {
		errs.add("http.max_conns", fmt.Sprintf("must be between 0 (automatic) and %d, got %d", MaxConnsLimit, c.HTTP.MaxConns))
	}
	if c.HTTP.EventLoops < -1 || c.HTTP.EventLoops > MaxEventLoops {
		errs.add("http.event_loops", fmt.Sprintf("must be between -1 (none) and %d (0: automatic), got %d", MaxEventLoops, c.HTTP.EventLoops))
	}
	errs.duration("http.read_header_timeout", c.HTTP.ReadHeaderTimeout, 1, MaxDuration)
	errs.duration("http.read_timeout", c.HTTP.ReadTimeout, 1, MaxDuration)
	errs.duration("http.idle_timeout", c.HTTP.IdleTimeout, 1, MaxDuration)
	errs.duration("http.write_timeout", c.HTTP.WriteTimeout, 1, MaxDuration)
	if t := c.HTTP.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		errs.add("http.tls", "cert_file and key_file go together: set both or neither")
	} else if t.ClientCAFile != "" && t.CertFile == "" {
		errs.add("http.tls.client_ca_file", "needs cert_file and key_file: client certificates are asked for over TLS only")
	}
	if f := c.Peer.MaxFrameBytes; f < MinFrameLimit || f > MaxFrameLimit {
		errs.add("peer.max_frame_bytes", fmt.Sprintf("must be between %d and %d, got %d", MinFrameLimit, MaxFrameLimit, f))
	}
	if m := c.Peer.MaxConns; m < 1 || m > MaxConnsLimit {
		errs.add("peer.max_conns", fmt.Sprintf("must be between 1 and %d, got %d", MaxConnsLimit, m))
	}
}

// validateClients checks the clients: entries: a token entry's key is a
// credential, named in errors by position ("<token>"), never by value; a
// cert entry is named by its key, which is only a name. A cert entry needs
// http.tls.client_ca_file (no certificate is verified without it), and no
// two entries name the same certificate.
func (c Config) validateClients(errs *errorList) {
	certs := map[string]string{} // cert -> the entry naming it
	for _, key := range sortedKeys(c.Clients) {
		cl := c.Clients[key]
		at := "clients.<token>"
		switch {
		case cl.Cert == "" && key == "":
			errs.add("clients", "client token must not be empty")
			continue
		case cl.Cert != "" && key == "":
			errs.add("clients", "the name of a cert entry must not be empty")
			continue
		case cl.Cert != "":
			at = "clients." + key
			if c.HTTP.TLS.ClientCAFile == "" {
				errs.add(at+".cert", "needs http.tls.client_ca_file: a client certificate is known only once that CA has verified it")
			}
			if other, dup := certs[cl.Cert]; dup {
				errs.add(at+".cert", fmt.Sprintf("%q is already the cert of clients.%s: a certificate names one entry", cl.Cert, other))
			}
			certs[cl.Cert] = key
		}
		if len(cl.Tenants) == 0 {
			errs.add(at+".tenants", "must be a non-empty list")
		}
		for _, t := range cl.Tenants {
			if t == "" {
				errs.add(at+".tenants", "tenant name must not be empty")
			}
		}
	}
}

// LimitsHash returns the first 16 hex digits of a SHA-256 over a canonical
// encoding of everything that decides admissions: limits.default,
// limits.tenants, limits.window, limits.lease_ttl, pools,
// default_max_tokens, the chains, budgets and prices. Configs equal in those have equal hashes whatever the
// order of their maps; members of a cluster publish it so that a member
// with other limits shows up.
func (c Config) LimitsHash() string {
	h := sha256.New()
	var buf [8]byte
	num := func(v int64) {
		binary.BigEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	str := func(s string) { // length-prefixed, so no two lists collide
		num(int64(len(s)))
		h.Write([]byte(s))
	}
	limits := func(l Limits) {
		num(l.RPM)
		num(l.TPM)
		num(l.Concurrency)
		hashReservation(num, l.Reservation)
		hashBudget(num, str, l.Budget)
	}
	limitsMap := func(m map[string]Limits) {
		num(int64(len(m)))
		for _, k := range sortedKeys(m) {
			str(k)
			limits(m[k])
		}
	}
	str("tokenring limits v1")
	limits(c.Limits.Default)
	limitsMap(c.Limits.Tenants)
	num(int64(c.Limits.Window / time.Nanosecond))
	num(int64(c.Limits.LeaseTTL / time.Nanosecond))
	limitsMap(c.Pools)
	num(c.DefaultMaxTokens)
	c.hashChains(h)
	c.hashPrices(num, str)
	c.hashFairness(num, str)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// security decodes cluster_secret, cluster_secret_secondary, clients,
// max_keys, hot_key_rate, http and peer.
func (d *decoder) security(f map[string]*yaml.Node, c *Config) {
	d.string(f["cluster_secret"], "cluster_secret", &c.ClusterSecret)
	d.string(f["cluster_secret_secondary"], "cluster_secret_secondary", &c.ClusterSecretSecondary)
	c.Clients = d.clients(f["clients"], "clients")
	var n int64
	if d.int(f["max_keys"], "max_keys", &n) {
		c.MaxKeys = clampInt(n)
	}
	if d.int(f["hot_key_rate"], "hot_key_rate", &n) {
		c.HotKeyRate = clampInt(n)
	}
	if h := d.fields(f["http"], "http", "max_conns", "event_loops", "fast_path", "read_header_timeout", "read_timeout", "idle_timeout", "write_timeout", "tls"); h != nil {
		if t := d.fields(h["tls"], "http.tls", "cert_file", "key_file", "client_ca_file"); t != nil {
			d.string(t["cert_file"], "http.tls.cert_file", &c.HTTP.TLS.CertFile)
			d.string(t["key_file"], "http.tls.key_file", &c.HTTP.TLS.KeyFile)
			d.string(t["client_ca_file"], "http.tls.client_ca_file", &c.HTTP.TLS.ClientCAFile)
		}
		if d.int(h["max_conns"], "http.max_conns", &n) {
			c.HTTP.MaxConns = clampInt(n)
		}
		if d.int(h["event_loops"], "http.event_loops", &n) {
			c.HTTP.EventLoops = clampInt(n)
		}
		d.bool(h["fast_path"], "http.fast_path", &c.HTTP.FastPath)
		d.duration(h["read_header_timeout"], "http.read_header_timeout", &c.HTTP.ReadHeaderTimeout)
		d.duration(h["read_timeout"], "http.read_timeout", &c.HTTP.ReadTimeout)
		d.duration(h["idle_timeout"], "http.idle_timeout", &c.HTTP.IdleTimeout)
		d.duration(h["write_timeout"], "http.write_timeout", &c.HTTP.WriteTimeout)
	}
	if p := d.fields(f["peer"], "peer", "max_frame_bytes", "max_conns"); p != nil {
		if d.int(p["max_frame_bytes"], "peer.max_frame_bytes", &n) {
			c.Peer.MaxFrameBytes = clampInt(n)
		}
		if d.int(p["max_conns"], "peer.max_conns", &n) {
			c.Peer.MaxConns = clampInt(n)
		}
	}
}

// clampInt converts a decoded count to int, saturating so that Validate
// reports a value beyond int's range as out of range rather than wrapped.
func clampInt(n int64) int {
	switch {
	case n > math.MaxInt32:
		return math.MaxInt32
	case n < math.MinInt32:
		return math.MinInt32
	}
	return int(n)
}

// clients decodes the "clients:" mapping of token -> {tenants: [...]} and
// name -> {cert: ..., tenants: [...]}.
func (d *decoder) clients(n *yaml.Node, path string) map[string]Client {
	if isNull(n) {
		return nil
	}
	var m map[string]Client
	for _, p := range d.entries(n, path) {
		// A token entry's path names no token: tokens are credentials.
		at := join(path, "<token>")
		var cl Client
		if f := d.fields(p.val, at, "tenants", "cert", "token", "may_set_limits"); f != nil {
			if f["cert"] != nil {
				at = join(path, p.key.Value) // a cert entry's key is only a name
				d.clientCert(f, at, &cl)
			} else if f["token"] != nil {
				d.structural(f["token"], at+".token", "a token entry's token is its key: write <token>: {tenants: [...]}")
			}
			cl.Tenants = d.clientTenants(f["tenants"], at+".tenants")
			d.bool(f["may_set_limits"], at+".may_set_limits", &cl.MaySetLimits)
		}
		if m == nil {
			m = make(map[string]Client)
		}
		m[p.key.Value] = cl
	}
	return m
}

// clientCert decodes the cert of the clients: entry at (fields f) into
// cl: not empty, and the entry then has no token.
func (d *decoder) clientCert(f map[string]*yaml.Node, at string, cl *Client) {
	if (isNull(f["cert"]) || d.string(f["cert"], at+".cert", &cl.Cert)) && cl.Cert == "" {
		d.value(at+".cert", "must not be empty: the certificate's subject common name, a DNS SAN or a URI SAN")
	}
	if f["token"] != nil {
		d.structural(f["token"], at, "an entry has a token or a cert, never both: a cert entry's key is its name, never a token; give the token an entry of its own")
	}
}

// clientTenants decodes a clients: entry's tenants list n (nil when absent).
func (d *decoder) clientTenants(n *yaml.Node, path string) []string {
	if isNull(n) {
		return nil
	}
	t := resolve(n)
	if t.Kind != yaml.SequenceNode {
		d.structural(t, path, "must be a list, got "+kind(t))
		return nil
	}
	var tenants []string
	for _, e := range t.Content {
		var name string
		if isNull(e) || d.string(e, path, &name) {
			tenants = append(tenants, name)
		}
	}
	return tenants
}
