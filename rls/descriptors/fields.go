package descriptors

// The typed reading of a file (after checkKeys): the fields the format
// defines, as the reference's YamlRoot, YamlDescriptor and YamlRateLimit.

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// root reads the top mapping: the reference's YamlRoot.
func (r *reader) root(m *yaml.Node) (*fileDoc, error) {
	ps, err := r.pairs(m, "")
	if err != nil {
		return nil, err
	}
	doc := &fileDoc{}
	for _, p := range ps {
		switch p.key {
		case "domain":
			err = r.decode(p.value, p.key, &doc.domain)
			doc.domainLine = p.keyAt.Line
		case "descriptors":
			doc.descriptors, err = r.descriptors(p.value, p.key)
		}
		if err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// descriptors reads a list of descriptors (null is an empty list).
func (r *reader) descriptors(v *yaml.Node, path string) ([]descDoc, error) {
	v, err := r.deref(v, path)
	if err != nil {
		return nil, err
	}
	if isNull(v) {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, r.errorf(v, path, "cannot unmarshal %s into a list of descriptors", kindName(v))
	}
	out := make([]descDoc, 0, len(v.Content))
	for i, e := range v.Content {
		d, err := r.descriptor(e, index(path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// descriptor reads one descriptor mapping.
func (r *reader) descriptor(n *yaml.Node, path string) (descDoc, error) {
	d := descDoc{path: path}
	n, err := r.deref(n, path)
	if err != nil {
		return d, err
	}
	d.line = n.Line
	if err := r.enter(n, path); err != nil {
		return d, err
	}
	defer r.leave()
	if n.Kind != yaml.MappingNode {
		return d, r.errorf(n, path, "cannot unmarshal %s into a descriptor", kindName(n))
	}
	ps, err := r.pairs(n, path)
	if err != nil {
		return d, err
	}
	for _, p := range ps {
		at := join(path, p.key)
		switch p.key {
		case "key":
			err = r.decode(p.value, at, &d.key)
		case "value":
			err = r.decode(p.value, at, &d.value)
		case "rate_limit":
			d.rateLimit, err = r.rateLimit(p.value, at)
		case "descriptors":
			d.descriptors, err = r.descriptors(p.value, at)
		case "shadow_mode":
			err = r.decodeBool(p.value, at, &d.shadowMode)
		case "quota_mode":
			err = r.decodeBool(p.value, at, &d.quotaMode)
		case "detailed_metric":
			err = r.decodeBool(p.value, at, &d.detailedMetric)
		case "value_to_metric":
			err = r.decodeBool(p.value, at, &d.valueToMetric)
		case "share_threshold":
			err = r.decodeBool(p.value, at, &d.shareThreshold)
		case "metadata":
			var md map[string]any // checked for its shape only, as the reference decodes it
			err = r.decode(p.value, at, &md)
		}
		if err != nil {
			return d, err
		}
	}
	return d, nil
}

// rateLimit reads a rate_limit mapping; null is no rate_limit.
func (r *reader) rateLimit(v *yaml.Node, path string) (*rateLimitDoc, error) {
	v, err := r.deref(v, path)
	if err != nil {
		return nil, err
	}
	if isNull(v) {
		return nil, nil
	}
	if v.Kind != yaml.MappingNode {
		return nil, r.errorf(v, path, "cannot unmarshal %s into a rate_limit", kindName(v))
	}
	ps, err := r.pairs(v, path)
	if err != nil {
		return nil, err
	}
	rl := &rateLimitDoc{path: path, line: v.Line}
	for _, p := range ps {
		at := join(path, p.key)
		switch p.key {
		case "requests_per_unit":
			err = r.decode(p.value, at, &rl.requestsPerUnit)
		case "unit":
			err = r.decode(p.value, at, &rl.unit)
		case "unlimited":
			err = r.decodeBool(p.value, at, &rl.unlimited)
		case "name":
			err = r.decode(p.value, at, &rl.name)
		case "replaces":
			rl.replaces, err = r.replaces(p.value, at)
		case "tokens_per_unit":
			err = r.decode(p.value, at, &rl.tokensPerUnit)
		case "concurrency":
			err = r.decode(p.value, at, &rl.concurrency)
		case "request_id_key":
			err = r.decode(p.value, at, &rl.requestIDKey)
		}
		if err != nil {
			return nil, err
		}
	}
	return rl, nil
}

// replaces reads a replaces list: the name of each mapping, "" where it has
// none.
func (r *reader) replaces(v *yaml.Node, path string) ([]string, error) {
	v, err := r.deref(v, path)
	if err != nil {
		return nil, err
	}
	if isNull(v) {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, r.errorf(v, path, "cannot unmarshal %s into a list of replaces", kindName(v))
	}
	names := make([]string, len(v.Content))
	for i, e := range v.Content {
		at := index(path, i)
		e, err := r.deref(e, at)
		if err != nil {
			return nil, err
		}
		if isNull(e) {
			continue
		}
		if e.Kind != yaml.MappingNode {
			return nil, r.errorf(e, at, "cannot unmarshal %s into a replaces entry", kindName(e))
		}
		ps, err := r.pairs(e, at)
		if err != nil {
			return nil, err
		}
		if j := find(ps, "name"); j >= 0 {
			if err := r.decode(ps[j].value, join(at, "name"), &names[i]); err != nil {
				return nil, err
			}
		}
	}
	return names, nil
}

// decode decodes scalar field v into dst as yaml.v3 decodes a typed field.
func (r *reader) decode(v *yaml.Node, path string, dst any) error {
	n, err := r.deref(v, path)
	if err != nil {
		return err
	}
	if err := n.Decode(dst); err != nil {
		msg := err.Error()
		if te, ok := err.(*yaml.TypeError); ok && len(te.Errors) > 0 {
			msg = te.Errors[0]
			if _, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(msg, "line ") {
				msg = rest
			}
		}
		return r.errorf(n, path, "%s", msg)
	}
	return nil
}

// decodeBool decodes boolean field v into dst as yaml.v2 does: true, false
// and YAML 1.1's yes, no, on, off, y, n in their cases, unquoted (yaml.v3
// would also take a quoted "yes").
func (r *reader) decodeBool(v *yaml.Node, path string, dst *bool) error {
	n, err := r.deref(v, path)
	if err != nil {
		return err
	}
	const quoted = yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
	if n.Kind == yaml.ScalarNode && n.ShortTag() == tagStr && n.Style&quoted != 0 {
		return r.errorf(n, path, "cannot unmarshal !!str `%s` into bool", n.Value)
	}
	return r.decode(n, path, dst)
}
