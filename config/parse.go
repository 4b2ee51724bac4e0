package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxFileSize is the largest configuration file Load reads.
const MaxFileSize = 16 << 20

// Load reads the configuration file at path; see Parse. An error from Parse
// is an *Error with File set to path.
func Load(path string, getenv func(string) string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return Config{}, err
	}
	if len(data) > MaxFileSize {
		return Config{}, &Error{File: path, Msgs: []string{fmt.Sprintf("larger than %d bytes", MaxFileSize)}}
	}
	c, err := Parse(data, getenv)
	if e, ok := err.(*Error); ok {
		e.File = path
	}
	return c, err
}

// Parse reads a YAML configuration on top of Default and validates the
// result.
//
// First, ${NAME} and ${NAME:-default} are replaced in the raw text by
// getenv(NAME), or by default when that is empty (a nil getenv returns "" for
// every name), and $${ stands for a literal ${. NAME is a letter or '_'
// followed by letters, digits and '_'; the default runs to the first '}'.
// ${NAME:-} is a deliberately empty default. A ${NAME} without a default
// whose variable is unset or empty is an error naming the field that holds
// it ("admin_token: ${TOKENRING_ADMIN_TOKEN} is not set ..."), except in a
// comment, where it is ignored. The replacement is textual, so a value can
// carry YAML syntax: quote the reference ("${TOKEN}") when the value may
// hold characters special to YAML, and keep untrusted data out of the
// environment.
//
// Then the text is decoded strictly: an unknown field is an error naming its
// path and line, and so are duplicate keys and values of the wrong kind. A
// field absent from the file keeps its value from Default, and so does a
// field whose value is null ("key:" with nothing after it, or an empty
// ${VAR:-}); but a null entry of keys is an empty tenant, which is invalid.
// A tenant's entry in limits.tenants starts from limits.default; a pool's,
// a group's and a models entry's from zero (unlimited). Anchors, aliases and merge keys (<<) work as
// in YAML, and top-level keys starting with "x-" are ignored, to give anchors
// a home ("x-tiers: {gold: &gold {rpm: 600}}"). Durations are Go durations
// with a unit ("60s", "15ms"); counts are integers, with optional '_'
// separators and exponents ("2_000_000", "2e6").
//
// Any problem makes Parse return the zero Config and an *Error listing every
// problem found.
func Parse(data []byte, getenv func(string) string) (Config, error) {
	text, err := expand(string(data), getenv)
	if err != nil {
		return Config{}, err
	}
	dec := yaml.NewDecoder(strings.NewReader(text))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		doc = yaml.Node{}
	case err != nil:
		return Config{}, yamlError(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return Config{}, yamlError(err)
	default:
		return Config{}, &Error{Msgs: []string{fmt.Sprintf("line %d: only one YAML document is allowed", extra.Line)}}
	}

	c := Default()
	d := &decoder{}
	if len(doc.Content) > 0 {
		d.root(doc.Content[0], &c)
	}
	if len(d.errs) > 0 {
		return Config{}, &Error{Msgs: d.errs}
	}
	c.Upstream.BaseURL = strings.TrimRight(c.Upstream.BaseURL, "/")
	c.AnthropicUpstream.BaseURL = strings.TrimRight(c.AnthropicUpstream.BaseURL, "/")
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// yamlError turns a yaml.v3 syntax error into an *Error.
func yamlError(err error) *Error {
	return &Error{Msgs: []string{strings.TrimPrefix(err.Error(), "yaml: ")}}
}

// expand replaces ${NAME}, ${NAME:-default} and $${ in text; see Parse.
func expand(text string, getenv func(string) string) (string, error) {
	if !strings.Contains(text, "${") {
		return text, nil
	}
	var b strings.Builder
	b.Grow(len(text))
	line := 1
	for {
		i := strings.Index(text, "${")
		if i < 0 {
			b.WriteString(text)
			return b.String(), nil
		}
		line += strings.Count(text[:i], "\n")
		if i > 0 && text[i-1] == '$' { // $${ is a literal ${
			b.WriteString(text[:i-1])
			b.WriteString("${")
			text = text[i+2:]
			continue
		}
		b.WriteString(text[:i])
		ref, rest, ok := strings.Cut(text[i+2:], "}")
		if !ok || strings.ContainsAny(ref, "\n") {
			return "", &Error{Msgs: []string{fmt.Sprintf("line %d: unterminated ${ (want ${NAME} or ${NAME:-default})", line)}}
		}
		name, def, hasDef := strings.Cut(ref, ":-")
		if !validName(name) || (!hasDef && name != ref) {
			return "", &Error{Msgs: []string{fmt.Sprintf("line %d: invalid variable reference %q (want ${NAME} or ${NAME:-default})", line, "${"+ref+"}")}}
		}
		v := ""
		if getenv != nil {
			v = getenv(name)
		}
		switch {
		case v == "" && !hasDef:
			v = unsetOpen + name + unsetClose
		case v == "":
			v = def
		}
		b.WriteString(v)
		text = rest
	}
}

// An unset ${NAME} without a default expands to unsetOpen+NAME+unsetClose:
// private-use characters, valid in any YAML scalar, that no real
// configuration holds. The decoder reports the reference when it reads a
// scalar holding it, naming the field; one in a comment is never read.
const (
	unsetOpen  = "\uE000"
	unsetClose = "\uE001"
)

// unsetRef records an error and returns true when v holds an unset ${NAME}.
func (d *decoder) unsetRef(v, path string) bool {
	_, rest, ok := strings.Cut(v, unsetOpen)
	if !ok {
		return false
	}
	name, _, _ := strings.Cut(rest, unsetClose)
	ref := "${" + name + "}"
	if path == "" {
		path = "(top level)"
	}
	d.value(path, fmt.Sprintf("%s is not set (write ${%s:-} for a deliberate empty default)", ref, name))
	return true
}

// validName reports whether s is [A-Za-z_][A-Za-z0-9_]*.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case '0' <= r && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// maxPairs bounds the mapping entries the decoder visits, merge keys
// included, against documents that multiply through aliases.
const maxPairs = 1 << 20

// maxMergeDepth bounds chains of merge keys (a mapping merging one that
// merges another...).
const maxMergeDepth = 32

// decoder walks a yaml.Node tree into a Config, collecting errors. It decodes
// by hand rather than with yaml.v3's reflection so that every error can name
// the field's full path.
type decoder struct {
	errs  []string
	pairs int // mapping entries visited, for maxPairs
}

// structural records a problem with the document's shape, at n's line.
func (d *decoder) structural(n *yaml.Node, path, msg string) {
	if path != "" {
		msg = path + ": " + msg
	}
	d.errs = append(d.errs, fmt.Sprintf("line %d: %s", n.Line, msg))
}

// value records a bad value; the path locates it.
func (d *decoder) value(path, msg string) {
	d.errs = append(d.errs, path+": "+msg)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows aliases.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is absent or a YAML null.
func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

type pair struct{ key, val *yaml.Node }

// entries returns the entries of mapping n with merge keys expanded: keys
// written in n win over merged ones, and earlier merged mappings over later
// ones. It reports non-string and duplicate keys. n must not be null.
func (d *decoder) entries(n *yaml.Node, path string) []pair {
	m := merger{seen: make(map[string]*yaml.Node), visited: make(map[*yaml.Node]bool)}
	d.collect(&m, n, path, 0)
	return m.out
}

// merger accumulates the entries of one mapping.
type merger struct {
	seen    map[string]*yaml.Node // key -> where it was first written
	visited map[*yaml.Node]bool   // mappings already merged in: merging one again adds nothing
	out     []pair
}

func (d *decoder) collect(m *merger, n *yaml.Node, path string, depth int) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && d.unsetRef(n.Value, path) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.structural(n, path, "must be a mapping, got "+kind(n))
		return
	}
	if m.visited[n] || d.pairs > maxPairs {
		return
	}
	if depth > maxMergeDepth {
		d.structural(n, path, fmt.Sprintf("merge keys nested more than %d deep", maxMergeDepth))
		return
	}
	m.visited[n] = true
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		if d.pairs++; d.pairs > maxPairs {
			d.structural(n, path, "too many entries through aliases and merge keys")
			return
		}
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.structural(k, path, "keys must be strings, got "+kind(k))
			continue
		}
		if d.unsetRef(k.Value, path) {
			continue
		}
		if first, dup := m.seen[k.Value]; dup {
			if depth == 0 { // a merged key that is also written here is fine
				d.structural(k, join(path, k.Value), fmt.Sprintf("duplicate key (first at line %d)", first.Line))
			}
			continue
		}
		m.seen[k.Value] = k
		m.out = append(m.out, pair{k, v})
	}
	for _, v := range merges {
		v = resolve(v)
		if v.Kind == yaml.SequenceNode {
			for _, e := range v.Content {
				d.collect(m, e, path, depth+1)
			}
		} else {
			d.collect(m, v, path, depth+1)
		}
	}
}

// fields checks that n is a mapping whose keys are among known and returns
// its values by key; nil when n is null.
func (d *decoder) fields(n *yaml.Node, path string, known ...string) map[string]*yaml.Node {
	if isNull(n) {
		return nil
	}
	f := make(map[string]*yaml.Node)
	for _, p := range d.entries(n, path) {
		found := false
		for _, k := range known {
			found = found || k == p.key.Value
		}
		if !found && path == "" && strings.HasPrefix(p.key.Value, "x-") {
			continue // a home for anchors, as in Compose files
		}
		if !found {
			d.structural(p.key, join(path, p.key.Value), "unknown field (known: "+strings.Join(known, ", ")+")")
			continue
		}
		f[p.key.Value] = p.val
	}
	return f
}

func (d *decoder) root(n *yaml.Node, c *Config) {
	if !isNull(n) && resolve(n).Kind != yaml.MappingNode {
		d.structural(n, "", "the document must be a mapping of settings, got "+kind(resolve(n)))
		return
	}
	f := d.fields(n, "", "limits", "pools", "fallback", "forward_timeout", "forward_max_wait", "peer_liveness",
		"replication", "drain", "keys", "upstream", "admin_token", "default_max_tokens", "queue", "anthropic_upstream",
		"cluster_secret", "cluster_secret_secondary", "clients", "max_keys", "hot_key_rate", "preload_encodings", "http", "peer",
		"grpc", "rls", "log", "tracing", "prices", "fair_share", "weights")
	if l := d.fields(f["limits"], "limits", "default", "tenants", "groups", "window", "lease_ttl", "max_prompt_bytes"); l != nil {
		d.limits(l["default"], "limits.default", &c.Limits.Default)
		c.Limits.Tenants, c.Limits.TenantChains = d.tenants(l["tenants"], "limits.tenants", c.Limits.Default)
		c.Limits.Groups = d.groups(l["groups"], "limits.groups")
		d.duration(l["window"], "limits.window", &c.Limits.Window)
		d.duration(l["lease_ttl"], "limits.lease_ttl", &c.Limits.LeaseTTL)
		var n int64
		if d.int(l["max_prompt_bytes"], "limits.max_prompt_bytes", &n) {
			c.Limits.MaxPromptBytes = clampInt(n)
		}
	}
	c.Pools = d.limitsMap(f["pools"], "pools", Limits{})
	var fallback string
	if d.string(f["fallback"], "fallback", &fallback) {
		c.Fallback = Fallback(fallback)
	}
	d.duration(f["forward_timeout"], "forward_timeout", &c.ForwardTimeout)
	d.duration(f["forward_max_wait"], "forward_max_wait", &c.ForwardMaxWait)
	d.duration(f["peer_liveness"], "peer_liveness", &c.PeerLiveness)
	if r := d.fields(f["replication"], "replication", "interval", "mode", "copies"); r != nil {
		d.duration(r["interval"], "replication.interval", &c.Replication.Interval)
		var copies int64
		if d.int(r["copies"], "replication.copies", &copies) {
			c.Replication.Copies = int(min(max(copies, -1), 1<<20)) // out of range stays out of range, for Validate to name
		}
		var mode string
		if d.string(r["mode"], "replication.mode", &mode) {
			c.Replication.Mode = ReplicationMode(mode)
		}
	}
	d.duration(f["drain"], "drain", &c.Drain)
	c.Keys, c.KeyAccounts = d.keys(f["keys"], "keys")
	d.upstream(f["upstream"], "upstream", &c.Upstream)
	d.string(f["admin_token"], "admin_token", &c.AdminToken)
	d.int(f["default_max_tokens"], "default_max_tokens", &c.DefaultMaxTokens)
	if q := d.fields(f["queue"], "queue", "max_waiters", "aging"); q != nil {
		var w int64
		if d.int(q["max_waiters"], "queue.max_waiters", &w) {
			c.Queue.MaxWaiters = int(w)
		}
		d.duration(q["aging"], "queue.aging", &c.Queue.Aging)
	}
	d.upstream(f["anthropic_upstream"], "anthropic_upstream", &c.AnthropicUpstream)
	d.bool(f["preload_encodings"], "preload_encodings", &c.PreloadEncodings)
	d.security(f, c)
	d.rls(f, c)
	d.log(f, c)
	d.tracing(f, c)
	d.prices(f["prices"], c)
	d.bool(f["fair_share"], "fair_share", &c.FairShare)
	c.Weights = d.weights(f["weights"])
}

// limits decodes a limits mapping onto l: absent fields keep l's values.
func (d *decoder) limits(n *yaml.Node, path string, l *Limits) {
	f := d.fields(n, path, "rpm", "tpm", "concurrency", "reservation", "budget")
	d.int(f["rpm"], path+".rpm", &l.RPM)
	d.int(f["tpm"], path+".tpm", &l.TPM)
	d.int(f["concurrency"], path+".concurrency", &l.Concurrency)
	d.reservation(f["reservation"], path+".reservation", &l.Reservation)
	d.budget(f["budget"], path+".budget", &l.Budget)
}

// reservation decodes a reservation onto r; Validate checks its value,
// but for an empty one, which would read as absent.
func (d *decoder) reservation(n *yaml.Node, path string, r *Reservation) {
	var v string
	switch {
	case !d.string(n, path, &v):
	case v == "":
		d.value(path, fmt.Sprintf("must be %s or %s, got %q", ReserveEstimate, ReserveMaxTokens, v))
	default:
		*r = Reservation(v)
	}
}

// limitsMap decodes a mapping of name -> limits, each entry on top of base;
// nil when there are no entries.
func (d *decoder) limitsMap(n *yaml.Node, path string, base Limits) map[string]Limits {
	if isNull(n) {
		return nil
	}
	var m map[string]Limits
	for _, p := range d.entries(n, path) {
		l := base
		d.limits(p.val, join(path, p.key.Value), &l)
		if m == nil {
			m = make(map[string]Limits)
		}
		m[p.key.Value] = l
	}
	return m
}

// keys decodes the "keys:" mapping: each API key's value is its tenant, or
// a mapping {tenant, openai_organization, openai_project}; a null value is
// an empty tenant (which Validate refuses).
func (d *decoder) keys(n *yaml.Node, path string) (map[string]string, map[string]KeyAccount) {
	if isNull(n) {
		return nil, nil
	}
	var tenants map[string]string
	var accounts map[string]KeyAccount
	for _, p := range d.entries(n, path) {
		at := join(path, p.key.Value)
		var tenant string
		if v := resolve(p.val); v != nil && v.Kind == yaml.MappingNode {
			f := d.fields(v, at, "tenant", "openai_organization", "openai_project")
			d.string(f["tenant"], at+".tenant", &tenant)
			var a KeyAccount
			d.string(f["openai_organization"], at+".openai_organization", &a.OpenAIOrganization)
			d.string(f["openai_project"], at+".openai_project", &a.OpenAIProject)
			if a != (KeyAccount{}) {
				if accounts == nil {
					accounts = make(map[string]KeyAccount)
				}
				accounts[p.key.Value] = a
			}
		} else {
			d.string(p.val, at, &tenant)
		}
		if tenants == nil {
			tenants = make(map[string]string)
		}
		tenants[p.key.Value] = tenant
	}
	return tenants, accounts
}

func (d *decoder) upstream(n *yaml.Node, path string, u *Upstream) {
	f := d.fields(n, path, "base_url", "api_key", "dial_timeout", "tls_timeout", "response_header_timeout", "stream_idle_timeout")
	d.string(f["base_url"], path+".base_url", &u.BaseURL)
	d.string(f["api_key"], path+".api_key", &u.APIKey)
	d.duration(f["dial_timeout"], path+".dial_timeout", &u.DialTimeout)
	d.duration(f["tls_timeout"], path+".tls_timeout", &u.TLSTimeout)
	d.duration(f["response_header_timeout"], path+".response_header_timeout", &u.ResponseHeaderTimeout)
	d.duration(f["stream_idle_timeout"], path+".stream_idle_timeout", &u.StreamIdleTimeout)
}

// scalar returns n's text, or false after recording an error when n is not a
// scalar, or false when n is null.
func (d *decoder) scalar(n *yaml.Node, path, want string) (string, bool) {
	if isNull(n) {
		return "", false
	}
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.structural(n, path, "must be "+want+", got "+kind(n))
		return "", false
	}
	if d.unsetRef(n.Value, path) {
		return "", false
	}
	return n.Value, true
}

// string decodes a scalar as written (so "0123" stays "0123") and reports
// whether it set *s.
func (d *decoder) string(n *yaml.Node, path string, s *string) bool {
	v, ok := d.scalar(n, path, "a string")
	if ok {
		*s = v
	}
	return ok
}

// bool decodes true or false (as YAML 1.2 writes them, in any case).
func (d *decoder) bool(n *yaml.Node, path string, b *bool) {
	v, ok := d.scalar(n, path, "true or false")
	if !ok {
		return
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		*b = true
	case "false":
		*b = false
	default:
		d.value(path, fmt.Sprintf("must be true or false, got %q", v))
	}
}

func (d *decoder) duration(n *yaml.Node, path string, t *time.Duration) {
	v, ok := d.scalar(n, path, "a duration")
	if !ok {
		return
	}
	dur, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		msg := fmt.Sprintf("invalid duration %q", v)
		if _, err := strconv.ParseFloat(v, 64); err == nil {
			msg += ` (a number needs a unit, e.g. "60s")`
		}
		d.value(path, msg)
		return
	}
	*t = dur
}

// int decodes an integer ("2000000", "2_000_000", "2e6") and reports whether
// it set *i. Values beyond int64 are reported here; range checks are
// Validate's.
func (d *decoder) int(n *yaml.Node, path string, i *int64) bool {
	v, ok := d.scalar(n, path, "an integer")
	if !ok {
		return false
	}
	s := strings.ReplaceAll(strings.TrimSpace(v), "_", "")
	if x, err := strconv.ParseInt(s, 10, 64); err == nil {
		*i = x
		return true
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62:
		*i = int64(f)
		return true
	case (err == nil || errors.Is(err, strconv.ErrRange)) && f > MaxLimit:
		d.value(path, fmt.Sprintf("must be <= 1e15, got %s", v))
	case (err == nil || errors.Is(err, strconv.ErrRange)) && f < -MaxLimit:
		d.value(path, fmt.Sprintf("must be >= 0, got %s", v))
	default:
		d.value(path, fmt.Sprintf("must be an integer, got %q", v))
	}
	return false
}
