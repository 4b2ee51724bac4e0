package descriptors

import (
	"fmt"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// A file's YAML is read in two passes over its node tree, as the reference
// reads it (ConfigFileContentToYaml): checkKeys is its validateYamlKeys,
// then the typed reading (root, descriptor, rateLimit) takes the fields the
// format defines and ignores the other known keys, as yaml.v2's
// unmarshalling into YamlRoot does. The node tree, rather than a generic
// decode, keeps each value's line and its text as written (a value 007 is
// "007", as the reference reads it into a string).

// The YAML tags the reader tells apart (yaml.Node.ShortTag).
const (
	tagStr       = "!!str"
	tagInt       = "!!int"
	tagBool      = "!!bool"
	tagNull      = "!!null"
	tagTimestamp = "!!timestamp"
	tagBinary    = "!!binary"
	tagMerge     = "!!merge"
)

// knownKey reports whether key is one of the reference's validKeys: a
// mapping anywhere in a file may use these and no others (metadata's
// content is not checked).
func knownKey(key string) bool {
	switch key {
	case "domain", "key", "value", "descriptors", "rate_limit", "unit",
		"requests_per_unit", "unlimited", "shadow_mode", "quota_mode", "name",
		"replaces", "detailed_metric", "value_to_metric", "share_threshold",
		"metadata":
		return true
	}
	return false
}

// extensionKey reports whether key is one of tokenring's keys, allowed
// only in a rate_limit mapping.
func extensionKey(key string) bool {
	switch key {
	case "tokens_per_unit", "concurrency", "request_id_key":
		return true
	}
	return false
}

// maxVisits bounds the nodes a file's reading visits, aliases expanded, so
// that a few lines of nested aliases cannot make it take exponential time.
// It is far above any real configuration's count.
const maxVisits = 1 << 20

// fileDoc is one file as read: the reference's YamlRoot.
type fileDoc struct {
	domain      string
	domainLine  int
	descriptors []descDoc
}

// descDoc is one descriptor as read: the reference's YamlDescriptor.
type descDoc struct {
	path, key, value string
	line             int
	rateLimit        *rateLimitDoc
	descriptors      []descDoc
	shadowMode       bool
	quotaMode        bool
	detailedMetric   bool
	valueToMetric    bool
	shareThreshold   bool
}

// rateLimitDoc is one rate_limit as read: the reference's YamlRateLimit and
// tokenring's extensions.
type rateLimitDoc struct {
	path            string
	line            int
	requestsPerUnit uint32
	unit            string
	unlimited       bool
	name            string
	replaces        []string
	tokensPerUnit   int64
	concurrency     int64
	requestIDKey    string
}

// maxDepth bounds the nesting of mappings and lists a file's reading
// follows: an alias may name a node that holds it, which would otherwise
// nest without end. It is far above any real configuration's depth.
const maxDepth = 100

// reader reads one file. It is used once and then dropped.
type reader struct {
	file   string
	visits int // nodes visited, against maxVisits
	depth  int // mappings entered and not left, against maxDepth
}

// enter counts a nested mapping at n and path, refusing one too deep; the
// caller calls leave when done with it.
func (r *reader) enter(n *yaml.Node, path string) error {
	r.depth++
	if r.depth > maxDepth {
		return r.errorf(n, path, "error loading config file: nested deeper than %d levels (an alias holding itself?)", maxDepth)
	}
	return nil
}

func (r *reader) leave() { r.depth-- }

// readFile parses and checks one file's content; the error is an *Error.
func readFile(file string, content []byte) (doc *fileDoc, err error) {
	r := &reader{file: file}
	var top yaml.Node
	if err := yaml.Unmarshal(content, &top); err != nil {
		return nil, &Error{File: file, Msg: "error loading config file: " + err.Error()}
	}
	root := &top
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root, err = r.deref(root, ""); err != nil {
		return nil, err
	}
	switch {
	case root.Kind == 0 || root.Kind == yaml.DocumentNode || isNull(root):
		return &fileDoc{}, nil // an empty file: no domain, refused by the load
	case root.Kind != yaml.MappingNode:
		return nil, r.errorf(root, "", "error loading config file: cannot unmarshal %s into a mapping", kindName(root))
	}
	if err := r.checkKeys(root, "", false); err != nil {
		return nil, err
	}
	r.visits = 0
	return r.root(root)
}

// errorf returns an *Error at node n (which may be nil) and path.
func (r *reader) errorf(n *yaml.Node, path, format string, args ...any) *Error {
	e := &Error{File: r.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// deref follows n's aliases to the node they name, counting the visit.
func (r *reader) deref(n *yaml.Node, path string) (*yaml.Node, error) {
	r.visits++
	if r.visits > maxVisits {
		return nil, r.errorf(n, path, "error loading config file: document contains excessive aliasing")
	}
	for i := 0; n.Kind == yaml.AliasNode; i++ {
		if n.Alias == nil || i > 1000 {
			return nil, r.errorf(n, path, "error loading config file: unresolved alias")
		}
		n = n.Alias
	}
	return n, nil
}

// pair is one key and its value in a mapping.
type pair struct {
	key    string
	keyAt  *yaml.Node
	value  *yaml.Node
	merged bool // brought by a merge key
}

// pairs returns mapping m's keys and values in order, merge keys ("<<")
// expanded as yaml.v2 expands them: in the order written, each key set
// last wins, so a merged key overrides a key written before the merge key
// and is overridden by one written after it. A key that is not a string is
// refused with the reference's message, and so is a key written twice
// (which the reference, keeping the last, accepts).
func (r *reader) pairs(m *yaml.Node, path string) ([]pair, error) {
	var ps pairSet
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, err := r.deref(m.Content[i], path)
		if err != nil {
			return nil, err
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == tagMerge {
			from, err := r.merged(m.Content[i+1], path)
			if err != nil {
				return nil, err
			}
			for _, p := range from {
				p.merged = true
				ps.set(p)
			}
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != tagStr {
			return nil, r.errorf(k, path, "config error, key is not of type string: %s", describe(k))
		}
		if j := ps.find(k.Value); j >= 0 && !ps.list[j].merged {
			return nil, r.errorf(k, join(path, k.Value), "mapping key %q already defined at line %d", k.Value, ps.list[j].keyAt.Line)
		}
		ps.set(pair{key: k.Value, keyAt: k, value: m.Content[i+1]})
	}
	return ps.list, nil
}

// merged returns the pairs a merge key's value brings: those of a mapping,
// or of each mapping of a list, the earlier mapping's first.
func (r *reader) merged(v *yaml.Node, path string) ([]pair, error) {
	if err := r.enter(v, path); err != nil {
		return nil, err
	}
	defer r.leave()
	v, err := r.deref(v, path)
	if err != nil {
		return nil, err
	}
	var from []*yaml.Node
	switch v.Kind {
	case yaml.MappingNode:
		from = []*yaml.Node{v}
	case yaml.SequenceNode:
		from = v.Content
	}
	if len(from) == 0 {
		return nil, r.errorf(v, path, "error loading config file: map merge requires map or sequence of maps as the value")
	}
	var ps pairSet
	for _, m := range from {
		m, err := r.deref(m, path)
		if err != nil {
			return nil, err
		}
		if m.Kind != yaml.MappingNode {
			return nil, r.errorf(m, path, "error loading config file: map merge requires map or sequence of maps as the value")
		}
		more, err := r.pairs(m, path)
		if err != nil {
			return nil, err
		}
		for _, p := range more {
			if ps.find(p.key) < 0 { // an earlier mapping wins, as in yaml.v2
				ps.set(p)
			}
		}
	}
	return ps.list, nil
}

// pairSet is a mapping's pairs in order, with an index once they are many.
type pairSet struct {
	list []pair
	at   map[string]int // key -> index in list, made past smallMapping pairs
}

// smallMapping is the most pairs a pairSet searches without an index.
const smallMapping = 16

// find returns the index of key in the set, or -1.
func (s *pairSet) find(key string) int {
	if s.at != nil {
		if i, ok := s.at[key]; ok {
			return i
		}
		return -1
	}
	return find(s.list, key)
}

// set replaces the pair of p's key, or appends p.
func (s *pairSet) set(p pair) {
	if i := s.find(p.key); i >= 0 {
		s.list[i] = p
		return
	}
	s.list = append(s.list, p)
	switch {
	case s.at != nil:
		s.at[p.key] = len(s.list) - 1
	case len(s.list) > smallMapping:
		s.at = make(map[string]int, 2*len(s.list))
		for i, q := range s.list {
			s.at[q.key] = i
		}
	}
}

// find returns the index of key in ps, or -1.
func find(ps []pair, key string) int {
	for i := range ps {
		if ps[i].key == key {
			return i
		}
	}
	return -1
}

// checkKeys is the reference's validateYamlKeys: every key of mapping m is a
// knownKey (or, in a rate_limit, an extensionKey); every list value holds
// mappings, each checked the same way; every other value is a mapping
// (checked), a string, an integer, a boolean or null.
func (r *reader) checkKeys(m *yaml.Node, path string, inRateLimit bool) error {
	if err := r.enter(m, path); err != nil {
		return err
	}
	defer r.leave()
	ps, err := r.pairs(m, path)
	if err != nil {
		return err
	}
	for _, p := range ps {
		at := join(path, p.key)
		if !knownKey(p.key) {
			if extensionKey(p.key) && !inRateLimit {
				return r.errorf(p.keyAt, at, "config error, unknown key '%s' (a tokenring extension: only in a rate_limit)", p.key)
			}
			if !extensionKey(p.key) {
				return r.errorf(p.keyAt, at, "config error, unknown key '%s'", p.key)
			}
		}
		if p.key == "metadata" {
			continue // arbitrary content, as in the reference
		}
		v, err := r.deref(p.value, at)
		if err != nil {
			return err
		}
		switch v.Kind {
		case yaml.SequenceNode:
			for i, e := range v.Content {
				e, err := r.deref(e, at)
				if err != nil {
					return err
				}
				if e.Kind != yaml.MappingNode {
					return r.errorf(e, index(at, i), "config error, yaml file contains list of type other than map: %s", describe(e))
				}
				if err := r.checkKeys(e, index(at, i), false); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			if err := r.checkKeys(v, at, p.key == "rate_limit"); err != nil {
				return err
			}
		case yaml.ScalarNode:
			if !leaf(v) {
				return r.errorf(v, at, "error checking config: %s is not a string, integer, boolean or null", describe(v))
			}
		}
	}
	return nil
}

// leaf reports whether scalar n is a value the reference's check accepts:
// what yaml.v2 decodes to a string, an int, a bool or nil (a timestamp and
// binary data are strings to it; an integer beyond int64 is a uint64, and a
// float a float64, which it refuses).
func leaf(n *yaml.Node) bool {
	switch n.ShortTag() {
	case tagStr, tagBool, tagNull, tagTimestamp, tagBinary:
		return true
	case tagInt:
		var i int64
		return n.Decode(&i) == nil
	}
	return false
}

// isNull reports whether n is a null scalar.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull
}

// kindName names n's kind as yaml does in its errors ("!!seq", "!!str").
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "!!map"
	case yaml.SequenceNode:
		return "!!seq"
	}
	return n.ShortTag()
}

// describe renders node n for an error: a scalar's text, or its kind.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case isNull(n):
		return "null"
	}
	return n.Value
}

// join appends key to a path of keys.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a list index to a path.
func index(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
