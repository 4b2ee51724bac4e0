package descriptors

import (
	"slices"
	"strings"

	"github.com/tokenring/tokenring/limiter"
)

// Entry is one entry of a request's descriptor.
type Entry struct{ Key, Value string }

// Config is a parsed configuration: its domains' descriptor trees. It is
// immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node // by domain; each a root without key or limit
	hash    string           // digest(domains)
}

// node is one descriptor of a domain's tree (or a domain's root).
type node struct {
	key       string           // composite key: "key" or "key_value"
	children  map[string]*node // by composite key
	wildcards []wildcard       // the children whose composite key holds '*', in file order
	limit     *Limit           // nil when the descriptor has no rate_limit

	valueToMetric  bool
	shareThreshold bool // and key holds '*' (checked at load)
}

// wildcard is a child whose composite key is a pattern.
type wildcard struct {
	key   string   // the composite key, e.g. "path_/api/*/action"
	parts []string // key split at each '*'
}

// matches reports whether s matches the pattern split into parts at each
// '*', where '*' stands for any run of bytes, the empty one included: the
// reference's wildcardMatch.
func matches(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// step is how the walk matched one entry.
type step struct {
	n        *node
	wildcard bool // n matched "key_value" as a pattern
	exact    bool // n matched on the value: "key_value" exactly, or as a pattern
}

// maxSteps is the descriptor length the walk handles without allocating.
const maxSteps = 8

// found is a walk's outcome.
type found struct {
	limit        *Limit
	covered      int    // entries[:covered] are the limit's: all, or all but the request id
	requestID    string // the request-id entry's value
	hasRequestID bool
}

// walk matches entries in domain, appending each level's step to steps,
// and returns what applies: the reference's GetLimit, and the request-id
// rule of the package doc.
func (c *Config) walk(domain string, entries []Entry, steps []step) (found, []step, bool) {
	level := c.domains[domain]
	if level == nil {
		return found{}, steps, false
	}
	for i, e := range entries {
		s, ok := level.child(e)
		if !ok {
			break
		}
		steps = append(steps, s)
		l := s.n.limit
		if i == len(entries)-1 {
			if l == nil {
				break
			}
			return found{limit: l, covered: i + 1}, steps, true
		}
		if l != nil && l.RequestIDKey != "" && i+2 == len(entries) && entries[i+1].Key == l.RequestIDKey {
			return found{limit: l, covered: i + 1, requestID: entries[i+1].Value, hasRequestID: true}, steps, true
		}
		if len(s.n.children) == 0 {
			break
		}
		level = s.n
	}
	return found{}, steps, false
}

// child returns the child of n entry e matches: "key_value" exactly, else
// the first wildcard child whose pattern matches "key_value", else "key".
func (n *node) child(e Entry) (step, bool) {
	composite := e.Key + "_" + e.Value
	if c := n.children[composite]; c != nil {
		return step{n: c, exact: true}, true
	}
	for _, w := range n.wildcards {
		if matches(w.parts, composite) {
			return step{n: n.children[w.key], wildcard: true, exact: true}, true
		}
	}
	if c := n.children[e.Key]; c != nil {
		return step{n: c}, true
	}
	return step{}, false
}

// Match returns the limit that applies to the descriptor entries in domain,
// as the reference's GetLimit finds it (see the package doc), and, when the
// limit has a RequestIDKey and entries end with an entry of that key just
// after the limit's level, that entry's value. ok is false when no limit
// applies. The Limit is the configuration's, or a copy with this request's
// Stat when detailed_metric, value_to_metric or share_threshold make it
// differ from Rule; it must not be modified.
func (c *Config) Match(domain string, entries []Entry) (l *Limit, requestID string, ok bool) {
	var buf [maxSteps]step
	f, steps, ok := c.walk(domain, entries, buf[:0])
	if !ok {
		return nil, "", false
	}
	return f.withStat(domain, entries, steps), f.requestID, true
}

// MatchKey is Match, and also returns the limiter key of the match: Key of
// domain and the limit's entries (the request-id entry left out), with the
// value of each entry matched by a share_threshold wildcard replaced by the
// wildcard's pattern (its composite key without "key_"), so that all the
// values it matches count against one key, as in the reference's cache key.
func (c *Config) MatchKey(domain string, entries []Entry) (l *Limit, requestID, key string, ok bool) {
	var buf [maxSteps]step
	f, steps, ok := c.walk(domain, entries, buf[:0])
	if !ok {
		return nil, "", "", false
	}
	covered, copied := entries[:f.covered], false
	for i, s := range steps {
		if s.wildcard && s.n.shareThreshold {
			if !copied { // the caller's entries are not ours to change
				covered, copied = slices.Clone(covered), true
			}
			covered[i].Value = sharedValue(s.n, covered[i].Key)
		}
	}
	return f.withStat(domain, entries, steps), f.requestID, Key(domain, covered), true
}

// sharedValue is the value that stands for every value n's pattern
// matches, for an entry of key key: the reference's share_threshold pattern.
func sharedValue(n *node, key string) string {
	return strings.TrimPrefix(n.key, key+"_")
}

// LimitsOf returns the limits of a limiter key (Key's form; MatchKey's),
// for the member that owns it: the limit its domain and entries match, as
// limiter limits (Limit.Limits). A key holds no request-id entry, so a
// limit with a RequestIDKey applies when its level is the key's last entry;
// a key whose last entry Match would take as a request id is not a limit's
// key. ok is false when the key is not Key's form, when no limit applies,
// and when the limit DeniesAll, which no limiter.Limits can say.
func (c *Config) LimitsOf(key string) (limiter.Limits, bool) {
	domain, entries, ok := ParseKey(key)
	if !ok {
		return limiter.Limits{}, false
	}
	var buf [maxSteps]step
	f, _, ok := c.walk(domain, entries, buf[:0])
	if !ok || f.hasRequestID || f.limit.DeniesAll() {
		return limiter.Limits{}, false
	}
	return f.limit.Limits(), true
}

// withStat returns f's limit with its Stat for this request: the
// reference's naming, from its GetLimit.
func (f found) withStat(domain string, entries []Entry, steps []step) *Limit {
	l := f.limit
	entries = entries[:f.covered]
	plain := !l.DetailedMetric
	for i, s := range steps {
		if s.wildcard || s.n.valueToMetric || (s.exact && entries[i].Value == "") {
			plain = false
		}
	}
	if plain {
		return l // every level's part is its composite key: Stat is Rule
	}
	stat := statOf(domain, entries, steps, l.DetailedMetric)
	if stat == l.Stat {
		return l
	}
	cp := *l
	cp.Stat = stat
	return &cp
}

// statOf builds the reference's stats key for entries, matched by steps,
// whose limit has detailed_metric when detailed.
func statOf(domain string, entries []Entry, steps []step, detailed bool) string {
	shared := false
	for _, s := range steps {
		shared = shared || (s.wildcard && s.n.shareThreshold)
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		s := steps[i]
		b.WriteByte('.')
		b.WriteString(e.Key)
		var value string
		switch {
		case s.wildcard && s.n.shareThreshold:
			value = sharedValue(s.n, e.Key)
		case detailed && !shared:
			b.WriteByte('_') // even before an empty value
			b.WriteString(e.Value)
			continue
		case detailed:
			value = e.Value
		case s.wildcard && s.n.valueToMetric:
			value = e.Value
		case s.wildcard:
			value = strings.TrimPrefix(s.n.key, e.Key+"_")
		case s.exact, s.n.valueToMetric:
			value = e.Value
		}
		if value != "" {
			b.WriteByte('_')
			b.WriteString(value)
		}
	}
	return b.String()
}

// Domains returns the configuration's domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// OverrideStat returns the stats key the reference gives a descriptor that
// carries its own limit (Envoy's descriptor limit override, which replaces
// the configuration's when the domain is known): the domain and each entry
// as "key_value", or "key" when the value is empty, joined by dots.
func OverrideStat(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	b.WriteByte('.')
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
