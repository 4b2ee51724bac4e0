package descriptors

import (
	"errors"
	"strings"
	"testing"
)

// TestRefuses parses each refused shape and checks the error names the file,
// the line, where in the file and the descriptor, and says what is wrong.
func TestRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		path, desc string
		msg        string // Error.Msg, or its start when it ends in "..."
	}{
		{"not yaml", "domain: [", 0, "", "", "error loading config file: yaml: ..."},
		{"top is a list", "- a\n- b\n", 1, "", "", "error loading config file: cannot unmarshal !!seq into a mapping"},
		{"top is a string", "hello\n", 1, "", "", "error loading config file: cannot unmarshal !!str into a mapping"},
		{"empty file", "", 0, "domain", "", "config file cannot have empty domain"},
		{"only a comment", "# nothing\n", 0, "domain", "", "config file cannot have empty domain"},
		{"null domain", "domain:\ndescriptors: []\n", 1, "domain", "", "config file cannot have empty domain"},
		{"unknown top key", "domain: d\ndescriptor: []\n", 2, "descriptor", "", "config error, unknown key 'descriptor'"},
		{"unknown nested key", `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1, burst: 2}
`, 6, "descriptors[0].descriptors[0].rate_limit.burst", "", "config error, unknown key 'burst'"},
		{"non-string key", "domain: d\n5: x\n", 2, "", "", "config error, key is not of type string: 5"},
		{"list of strings", "domain: d\ndescriptors: [a, b]\n", 2, "descriptors[0]", "", "config error, yaml file contains list of type other than map: a"},
		{"replaces of strings", `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1, replaces: [x]}
`, 4, "descriptors[0].rate_limit.replaces[0]", "", "config error, yaml file contains list of type other than map: x"},
		{"float", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n", 4,
			"descriptors[0].rate_limit.requests_per_unit", "", "error checking config: 1.5 is not a string, integer, boolean or null"},
		{"huge integer", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 18446744073709551615}\n", 4,
			"descriptors[0].rate_limit.requests_per_unit", "", "error checking config: ..."},
		{"negative requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", 4,
			"descriptors[0].rate_limit.requests_per_unit", "", "cannot unmarshal !!int `-1` into uint32"},
		{"requests beyond uint32", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", 4,
			"descriptors[0].rate_limit.requests_per_unit", "", "cannot unmarshal !!int `4294967296` into uint32"},
		{"quoted number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: '5'}\n", 4,
			"descriptors[0].rate_limit.requests_per_unit", "", "cannot unmarshal !!str `5` into uint32"},
		{"descriptors a mapping", "domain: d\ndescriptors: {key: a}\n", 2, "descriptors", "", "cannot unmarshal !!map into a list of descriptors"},
		{"rate_limit a string", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: fast\n", 4, "descriptors[0].rate_limit", "", "cannot unmarshal !!str into a rate_limit"},
		{"key a list", "domain: d\ndescriptors:\n  - key: [a]\n", 3, "descriptors[0].key[0]", "", "config error, yaml file contains list of type other than map: a"},
		{"key a mapping", "domain: d\ndescriptors:\n  - key: {name: a}\n", 3, "descriptors[0].key", "", "cannot unmarshal !!map into string"},
		{"metadata a string", "domain: d\ndescriptors:\n  - key: a\n    metadata: x\n", 4, "descriptors[0].metadata", "", "cannot unmarshal !!str `x` into map[string]interface {}"},
		{"an alias holding itself", "domain: d\ndescriptors: &l\n  - key: a\n    descriptors: *l\n", 3, "descriptors[0].descriptors[0]...", "",
			"error loading config file: nested deeper than 100 levels (an alias holding itself?)"},
		{"quoted boolean", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: 'yes'\n", 4, "descriptors[0].shadow_mode", "", "cannot unmarshal !!str `yes` into bool"},
		{"key twice", "domain: d\ndomain: e\n", 2, "domain", "", `mapping key "domain" already defined at line 1`},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", 3, "descriptors[0]", "", "descriptor has empty key"},
		{"duplicate key_value", `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        value: v
      - key: b
        value: v
`, 7, "descriptors[0].descriptors[1]", "d.a.b_v", "duplicate descriptor composite key 'd.a.b_v'"},
		{"duplicate composite through '_'", `
domain: d
descriptors:
  - key: a_b
  - key: a
    value: b
`, 4, "descriptors[1]", "d.a_b", "duplicate descriptor composite key 'd.a_b'"},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n", 5, "descriptors[0].rate_limit", "d.a", "invalid rate limit unit ''"},
		{"unknown unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n", 4,
			"descriptors[0].rate_limit", "d.a", "invalid rate limit unit 'fortnight'"},
		{"unit UNKNOWN", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: unknown, requests_per_unit: 5}\n", 4,
			"descriptors[0].rate_limit", "d.a", "invalid rate limit unit 'unknown'"},
		{"unit with unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: Minute, unlimited: true}\n", 4,
			"descriptors[0].rate_limit", "d.a", "should not specify rate limit unit when unlimited"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", 4,
			"descriptors[0].rate_limit", "d.a", "should not have an empty replaces entry"},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", 4,
			"descriptors[0].rate_limit", "d.a", "should not have an empty replaces entry"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n", 4,
			"descriptors[0].rate_limit", "d.a", "replaces should not contain name of same descriptor"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: v\n    share_threshold: true\n", 3,
			"descriptors[0]", "d.a_v", "share_threshold can only be used with wildcard values (containing '*'), but found key 'a_v'"},
		// tokenring's extensions.
		{"extension outside rate_limit", "domain: d\ndescriptors:\n  - key: a\n    concurrency: 3\n", 4, "descriptors[0].concurrency", "",
			"config error, unknown key 'concurrency' (a tokenring extension: only in a rate_limit)"},
		{"tokens without request id", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, tokens_per_unit: 1000}\n", 4,
			"descriptors[0].rate_limit", "d.a", "tokens_per_unit and concurrency need request_id_key, ..."},
		{"concurrency without request id", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, concurrency: 2}\n", 4,
			"descriptors[0].rate_limit", "d.a", "tokens_per_unit and concurrency need request_id_key, ..."},
		{"negative tokens", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, tokens_per_unit: -5, request_id_key: rid}\n", 4,
			"descriptors[0].rate_limit", "d.a", "tokens_per_unit -5 is negative"},
		{"negative concurrency", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, concurrency: -1, request_id_key: rid}\n", 4,
			"descriptors[0].rate_limit", "d.a", "concurrency -1 is negative"},
		{"tokens not a number", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, tokens_per_unit: lots, request_id_key: rid}\n", 4,
			"descriptors[0].rate_limit.tokens_per_unit", "", "cannot unmarshal !!str `lots` into int64"},
		{"unlimited with tokens", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, tokens_per_unit: 5, request_id_key: rid}\n", 4,
			"descriptors[0].rate_limit", "d.a", "an unlimited rate_limit cannot have tokens_per_unit, concurrency or request_id_key"},
		{"request id key is a child's", `
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: minute, concurrency: 5, request_id_key: rid}
    descriptors:
      - key: rid
        rate_limit: {unit: minute, requests_per_unit: 1}
`, 4, "descriptors[0].rate_limit", "d.tenant", "request_id_key 'rid' is also the key of a nested descriptor (descriptors[0].descriptors[0])"},
	} {
		_, err := Parse(map[string][]byte{"tenants.yaml": []byte(strings.TrimPrefix(tc.yaml, "\n"))})
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: error %v, want an *Error", tc.name, err)
			continue
		}
		msgOK, pathOK := e.Msg == tc.msg, e.Path == tc.path
		if prefix, ok := strings.CutSuffix(tc.msg, "..."); ok {
			msgOK = strings.HasPrefix(e.Msg, prefix)
		}
		if prefix, ok := strings.CutSuffix(tc.path, "..."); ok {
			pathOK = strings.HasPrefix(e.Path, prefix)
		}
		if e.File != "tenants.yaml" || e.Line != tc.line || !pathOK || e.Descriptor != tc.desc || !msgOK {
			t.Errorf("%s:\ngot  %q line %d path %q desc %q msg %q\nwant line %d path %q desc %q msg %q",
				tc.name, e.File, e.Line, e.Path, e.Descriptor, e.Msg, tc.line, tc.path, tc.desc, tc.msg)
		}
		if !strings.HasPrefix(err.Error(), "tenants.yaml") || !strings.Contains(err.Error(), e.Path) {
			t.Errorf("%s: %q lacks the file or path", tc.name, err)
		}
	}
}

// TestAccepts parses what the reference accepts although it may look wrong.
func TestAccepts(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
	}{
		{"replaces naming nothing", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ghost}]}\n"},
		{"two limits, one name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, name: n}\n"},
		{"no requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n"},
		{"unlimited with requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n"},
		{"unlimited with a bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: fortnight}\n"},
		{"a known key in the wrong place", "domain: d\nunit: second\ndescriptors:\n  - key: a\n    domain: e\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n"},
		{"metadata of anything", "domain: d\ndescriptors:\n  - key: a\n    metadata: {x: [1, 2.5, {y: z}], 3: w}\n    rate_limit: {unit: second, requests_per_unit: 1}\n"},
		{"values of any scalar type", "domain: 2001-12-14\ndescriptors:\n  - key: 5\n    value: true\n    rate_limit: {unit: SECOND, requests_per_unit: 0x10}\n"},
		{"YAML 1.1 booleans", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: yes\n    rate_limit: {unit: second, requests_per_unit: 1, unlimited: off}\n"},
		{"null lists", "domain: d\ndescriptors:\n"},
		{"a second document", "domain: d\n---\nfoo: [\n"},
	} {
		c, err := Parse(map[string][]byte{"f.yaml": []byte(tc.yaml)})
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if len(c.Domains()) != 1 {
			t.Errorf("%s: domains %v", tc.name, c.Domains())
		}
	}
	// Anchors, aliases and merge keys.
	c := parseText(t, `
domain: d
descriptors:
  - key: a
    rate_limit: &five {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: *five
  - key: c
    rate_limit:
      <<: *five
      requests_per_unit: 7
  - key: e
    rate_limit:
      requests_per_unit: 7
      <<: [*five, {requests_per_unit: 9, unit: day}]
`)
	checkMatches(t, c, "d", []matchCase{
		{entries: es("a", "1"), rule: "d.a", rpu: 5, unit: Minute},
		{entries: es("b", "1"), rule: "d.b", rpu: 5, unit: Minute},
		{entries: es("c", "1"), rule: "d.c", rpu: 7, unit: Minute},
		// yaml.v2's order: a merge key overrides the keys written before
		// it, and the first of its mappings wins.
		{entries: es("e", "1"), rule: "d.e", rpu: 5, unit: Minute},
	})
	// Scalars are read as written: 0x10 is 16, value 007 is "007".
	c = parseText(t, "domain: d\ndescriptors:\n  - key: a\n    value: 007\n    rate_limit: {unit: hour, requests_per_unit: 0x10}\n")
	checkMatches(t, c, "d", []matchCase{{entries: es("a", "007"), rule: "d.a_007", rpu: 16, unit: Hour}})
}
