package descriptors

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// The reference's own tests (test/config/config_test.go), on its files in
// testdata/reference: the same descriptors, the same answers.

func TestReferenceBasicConfig(t *testing.T) {
	c := parseFiles(t, "reference/basic_config.yaml")
	checkMatches(t, c, "test-domain", []matchCase{
		{entries: nil},
		{entries: es("key1", "something")},
		{entries: es("key1", "value1")},
		{entries: es("key2", "value2", "subkey", "subvalue")},
		{entries: es("key5", "value5", "subkey5", "subvalue")},
		{entries: es("key1", "value1", "subkey1", "something"), rule: "test-domain.key1_value1.subkey1", rpu: 5, unit: Second},
		{entries: es("key1", "value1", "subkey1", "subvalue1"), rule: "test-domain.key1_value1.subkey1_subvalue1", rpu: 10, unit: Second},
		{entries: es("key2", "something"), rule: "test-domain.key2", rpu: 20, unit: Minute},
		{entries: es("key2", "value2"), rule: "test-domain.key2_value2", rpu: 30, unit: Minute},
		{entries: es("key2", "value3")}, // a value without a limit: allowed
		{entries: es("key3", "foo"), rule: "test-domain.key3", rpu: 1, unit: Hour},
		{entries: es("key4", "foo"), rule: "test-domain.key4", rpu: 1, unit: Day},
		{entries: es("key6", "foo"), rule: "test-domain.key6", unit: UnitUnknown},
		{entries: es("key7", "unspecified_value"), rule: "test-domain.key7", rpu: 70, unit: Minute, stat: "test-domain.key7_unspecified_value"},
		{entries: es("key7", "another_value"), rule: "test-domain.key7", rpu: 70, unit: Minute, stat: "test-domain.key7_another_value"},
		{entries: es("key5", "value5"), rule: "test-domain.key5_value5", rpu: 15, unit: Day},
		{entries: es("key5", "value5", "subkey5", "subvalue5"), rule: "test-domain.key5_value5.subkey5_subvalue5", rpu: 25, unit: Day},
	})
	if _, _, ok := c.Match("foo_domain", nil); ok {
		t.Error("unknown domain matched")
	}
	l, _, _ := c.Match("test-domain", es("key4", "foo"))
	if l.Name != "key4_rate_limit" {
		t.Errorf("name %q", l.Name)
	}
	l, _, _ = c.Match("test-domain", es("key6", "foo"))
	if !l.Unlimited {
		t.Error("key6 not unlimited")
	}
	if got := OverrideStat("test-domain", es("key1", "value1", "subkey1", "something")); got != "test-domain.key1_value1.subkey1_something" {
		t.Errorf("OverrideStat: %q", got)
	}
}

func TestReferenceShadowMode(t *testing.T) {
	c := parseFiles(t, "reference/shadowmode_config.yaml")
	for _, tc := range []struct {
		entries []Entry
		shadow  bool
	}{
		{es("key1", "value1", "subkey1", "something"), false},
		{es("key1", "value1", "subkey1", "subvalue1"), true},
		{es("key2", "something"), true},
		{es("key2", "value2"), false},
	} {
		l, _, ok := c.Match("test-domain", tc.entries)
		if !ok || l.ShadowMode != tc.shadow {
			t.Errorf("%v: ok %v shadow %v, want %v", tc.entries, ok, ok && l.ShadowMode, tc.shadow)
		}
	}
}

func TestReferenceWildcard(t *testing.T) {
	c := parseFiles(t, "reference/wildcard.yaml")
	checkMatches(t, c, "test-domain", []matchCase{
		{entries: es("noVal", "foo1"), rule: "test-domain.noVal", rpu: 20, unit: Minute},
		{entries: es("wild", "foo1"), rule: "test-domain.wild_foo*", rpu: 20, unit: Minute},
		{entries: es("wild", "foo2"), rule: "test-domain.wild_foo*", rpu: 20, unit: Minute},
		{entries: es("nestedWild", "val1", "wild", "goo2"), rule: "test-domain.nestedWild_val1.wild_goo*", rpu: 20, unit: Minute},
		{entries: es("wild", "bar")},
		{entries: es("noWild", "foo1")},
		{entries: es("midWild", "barab"), rule: "test-domain.midWild_bar*b", rpu: 20, unit: Minute},
		{entries: es("midWild", "bar123b"), rule: "test-domain.midWild_bar*b", rpu: 20, unit: Minute},
		{entries: es("midWild", "barb"), rule: "test-domain.midWild_bar*b", rpu: 20, unit: Minute},
		{entries: es("midWild", "bara")},
		{entries: es("midWild", "xbarb")},
		{entries: es("multiWild", "foo123bar456baz"), rule: "test-domain.multiWild_foo*bar*baz", rpu: 10, unit: Minute},
		{entries: es("multiWild", "foobarbaz"), rule: "test-domain.multiWild_foo*bar*baz", rpu: 10, unit: Minute},
		{entries: es("multiWild", "foo123baz")},
		{entries: es("multiWild", "bar456baz")},
	})
}

func TestReferenceShareThreshold(t *testing.T) {
	c := parseFiles(t, "reference/share_threshold.yaml")
	const d = "test-domain"
	checkMatches(t, c, d, []matchCase{
		{entries: es("files", "files/a.pdf"), rule: d + ".files_files/*", rpu: 100, unit: Minute},
		{entries: es("files", "files/b.csv"), rule: d + ".files_files/*", rpu: 100, unit: Minute},
		{entries: es("route", "api/v1", "method", "GET"), rule: d + ".route_api/*.method", rpu: 60, unit: Minute},
		{entries: es("service", "svc/user", "endpoint", "get"), rule: d + ".service_svc/*.endpoint", rpu: 80, unit: Minute,
			stat: d + ".service_svc/*.endpoint_get"},
		{entries: es("nested", "parent", "files", "nested/file1.txt"), rule: d + ".nested_parent.files_nested/*", rpu: 200, unit: Minute},
		{entries: es("files", "top/file1.txt", "files", "nested/file1.txt"), rule: d + ".files_top/*.files_nested/*", rpu: 300, unit: Minute},
		{entries: es("path", "path/foo", "file", "file/doc1", "type", "pdf"), rule: d + ".path_path/*.file_file/*.type", rpu: 120, unit: Minute},
		{entries: es("user", "user/alice", "resource", "res/file1", "action", "read"), rule: d + ".user_user/*.resource_res/*.action", rpu: 150, unit: Minute},
		{entries: es("file", "test1"), rule: d + ".file_test1", rpu: 50, unit: Minute},
		{entries: es("file", "test2"), rule: d + ".file_test*", rpu: 100, unit: Minute},
		{entries: es("file", "test123"), rule: d + ".file_test*", rpu: 100, unit: Minute},
		{entries: es("midpath", "/api/v1"), rule: d + ".midpath_/api*v1", rpu: 100, unit: Minute},
		{entries: es("midpath", "/api-beta-v1"), rule: d + ".midpath_/api*v1", rpu: 100, unit: Minute},
		{entries: es("midpath", "/api/v2")},
		{entries: es("multiroute", "svcXXXepYYYrpc"), rule: d + ".multiroute_svc*ep*rpc", rpu: 50, unit: Minute},
		{entries: es("multiroute", "svceprpc"), rule: d + ".multiroute_svc*ep*rpc", rpu: 50, unit: Minute},
		{entries: es("multiroute", "svcABCrpc")},
		{entries: es("midroute", "/api/v2"), rule: d + ".midroute_/api*v2", rpu: 80, unit: Minute},
		{entries: es("midroute", "/api-beta-v2"), rule: d + ".midroute_/api*v2", rpu: 80, unit: Minute},
		{entries: es("tenant", "t1prod", "resource", "resAv2"), rule: d + ".tenant_t*prod.resource_res*v2", rpu: 60, unit: Minute},
	})
	// The reference's cache key puts each shared pattern in place of the
	// value (limiter/cache_key.go); MatchKey does in Key's form.
	for _, tc := range []struct {
		entries []Entry
		key     []Entry
	}{
		{es("files", "files/a.pdf"), es("files", "files/*")},
		{es("route", "api/v1", "method", "GET"), es("route", "api/*", "method", "GET")},
		{es("files", "top/x", "files", "nested/y"), es("files", "top/*", "files", "nested/*")},
		{es("path", "path/foo", "file", "file/doc1", "type", "pdf"), es("path", "path/*", "file", "file/doc1", "type", "pdf")},
		{es("user", "user/alice", "resource", "res/file1", "action", "read"), es("user", "user/*", "resource", "res/*", "action", "read")},
		{es("file", "test1"), es("file", "test1")},
		{es("file", "test2"), es("file", "test*")},
		{es("tenant", "t99prod", "resource", "resBBBv2"), es("tenant", "t*prod", "resource", "res*v2")},
	} {
		in := slices.Clone(tc.entries)
		if got, want := matchKey(t, c, d, in), Key(d, tc.key); got != want {
			t.Errorf("%v: key %q, want %q", tc.entries, got, want)
		}
		if !slices.Equal(in, tc.entries) {
			t.Errorf("MatchKey changed its argument: %v", in)
		}
		// The owner of a shared key finds the same limit.
		l, _, _ := c.Match(d, tc.entries)
		if lim, ok := c.LimitsOf(Key(d, tc.key)); !ok || lim != l.Limits() {
			t.Errorf("LimitsOf(%v) = %+v %v, want %+v", tc.key, lim, ok, l.Limits())
		}
	}
}

// TestReferenceStats holds the reference's tests of stats keys built from
// inline configurations (TestDetailedMetric, TestValueToMetric_*,
// TestWildcardStatsBehavior), written as YAML.
func TestReferenceStats(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		entries    []Entry
		stat       string
	}{
		{"detailed, top level only", `
domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {requests_per_unit: 100, unit: minute}
    descriptors:
      - key: key-2
        rate_limit: {requests_per_unit: 5, unit: minute}
`, es("key-1", "value-1"), "nested.key-1_value-1"},
		{"not detailed, top level only", `
domain: nested
descriptors:
  - key: key-1
    rate_limit: {requests_per_unit: 100, unit: minute}
    descriptors:
      - key: key-2
        rate_limit: {requests_per_unit: 5, unit: minute}
`, es("key-1", "value-1"), "nested.key-1"},
		{"detailed, nested", `
domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {requests_per_unit: 100, unit: minute}
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: {requests_per_unit: 5, unit: minute}
`, es("key-1", "value-1", "key-2", "value-2"), "nested.key-1_value-1.key-2_value-2"},
		{"not detailed, nested", `
domain: nested
descriptors:
  - key: key-1
    rate_limit: {requests_per_unit: 100, unit: minute}
    descriptors:
      - key: key-2
        rate_limit: {requests_per_unit: 5, unit: minute}
`, es("key-1", "value-1", "key-2", "value-2"), "nested.key-1.key-2"},
		{"value_to_metric at two levels", `
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {requests_per_unit: 60, unit: minute}
`, es("route", "draw", "http_method", "GET", "subject_id", "123"), "domain.route_draw.http_method_GET.subject_id"},
		{"value_to_metric, empty values", `
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {requests_per_unit: 60, unit: minute}
`, es("route", "", "http_method", "", "subject_id", "123"), "domain.route.http_method.subject_id"},
		{"value_to_metric mid level", `
domain: d
descriptors:
  - key: k1
    descriptors:
      - key: k2
        value_to_metric: true
        descriptors:
          - key: k3
            rate_limit: {requests_per_unit: 1, unit: second}
`, es("k1", "X", "k2", "Y", "k3", "Z"), "d.k1.k2_Y.k3"},
		{"detailed_metric wins over value_to_metric", `
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: {requests_per_unit: 60, unit: minute}
`, es("route", "draw", "http_method", "GET", "subject_id", "123"), "domain.route_draw.http_method_GET.subject_id_123"},
		{"value_to_metric with a configured value", `
domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {requests_per_unit: 30, unit: minute}
`, es("route", "api", "http_method", "POST", "subject_id", "user456"), "test-domain.route_api.http_method_POST.subject_id"},
		{"value_to_metric on a wildcard", `
domain: test-domain
descriptors:
  - key: wild
    value: foo*bar*
    value_to_metric: true
    rate_limit: {requests_per_unit: 20, unit: minute}
`, es("wild", "foo123bar456"), "test-domain.wild_foo123bar456"},
		{"share_threshold wins over value_to_metric", `
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    share_threshold: true
    value_to_metric: true
    rate_limit: {requests_per_unit: 20, unit: minute}
`, es("wild", "foo1"), "test-domain.wild_foo*"},
		{"value_to_metric elsewhere keeps the pattern", `
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: {requests_per_unit: 20, unit: minute}
`, es("wild", "foo1", "other", "bar", "limit", "X"), "test-domain.wild_foo*.other_bar.limit"},
	} {
		c := parseText(t, tc.yaml)
		domain := c.Domains()[0]
		l, _, ok := c.Match(domain, tc.entries)
		if !ok {
			t.Errorf("%s: no limit", tc.name)
			continue
		}
		if l.Stat != tc.stat {
			t.Errorf("%s: stat %q, want %q", tc.name, l.Stat, tc.stat)
		}
	}
}

// TestReferenceExamples loads the reference's example configuration
// (examples/ratelimit/config), as its docker-compose setup does.
func TestReferenceExamples(t *testing.T) {
	c := parseFiles(t, "reference/examples_config.yaml", "reference/examples_example.yaml")
	if got := c.Domains(); !slices.Equal(got, []string{"mongo_cps", "rl"}) {
		t.Fatalf("domains %v", got)
	}
	checkMatches(t, c, "rl", []matchCase{
		{entries: es("category", "account"), rule: "rl.category_account", rpu: 4, unit: Minute},
		{entries: es("source_cluster", "proxy", "destination_cluster", "bkthomps"), rule: "rl.source_cluster_proxy.destination_cluster_bkthomps", rpu: 2, unit: Minute},
		{entries: es("source_cluster", "proxy", "destination_cluster", "other")},
		{entries: es("foo", "x"), rule: "rl.foo", rpu: 2, unit: Minute},
		{entries: es("foo", "x", "bar", "y"), rule: "rl.foo.bar", rpu: 3, unit: Minute},
		{entries: es("foo", "x", "bar", "bkthomps"), rule: "rl.foo.bar_bkthomps", rpu: 1, unit: Minute},
		{entries: es("foo", "x", "bar", "banned"), rule: "rl.foo.bar_banned", rpu: 0, unit: Minute},
		{entries: es("foo", "x", "baz", "y"), rule: "rl.foo.baz", rpu: 1, unit: Second},
		{entries: es("foo", "x", "baz", "shady"), rule: "rl.foo.baz_shady", rpu: 3, unit: Minute},
		{entries: es("foo", "x", "bay", "y"), rule: "rl.foo.bay", unit: UnitUnknown},
		{entries: es("unspec", "a"), rule: "rl.unspec", rpu: 2, unit: Minute, stat: "rl.unspec_a"},
		{entries: es("service", "service_1"), rule: "rl.service_service_1", rpu: 1, unit: Minute},
	})
	l, _, _ := c.Match("rl", es("service", "service_2"))
	if !l.QuotaMode {
		t.Error("quota_mode lost")
	}
	// The example's replaces: category_account replaces bkthomps and
	// fake_name; destination_cluster_override replaces banned_limit.
	match := func(kv ...string) *Limit {
		l, _, ok := c.Match("rl", es(kv...))
		if !ok {
			t.Fatalf("%v: no limit", kv)
		}
		return l
	}
	account := match("category", "account")
	bkthomps := match("foo", "x", "bar", "bkthomps")
	banned := match("foo", "x", "bar", "banned")
	override := match("source_cluster", "proxy", "destination_cluster", "override")
	fake := match("source_cluster", "proxy", "destination_cluster", "fake")
	for _, tc := range []struct {
		limits []*Limit
		kept   []bool
	}{
		{[]*Limit{account, bkthomps}, []bool{true, false}},
		{[]*Limit{bkthomps, account, fake}, []bool{false, true, false}},
		{[]*Limit{banned, override}, []bool{false, true}},
		{[]*Limit{banned, nil, bkthomps}, []bool{true, false, true}},
		{[]*Limit{}, []bool{}},
	} {
		if got := Replace(tc.limits); !slices.Equal(got, tc.kept) {
			t.Errorf("Replace: %v, want %v", got, tc.kept)
		}
	}
}

func TestReferenceMetadataAccepted(t *testing.T) {
	c := parseFiles(t, "reference/metadata.yaml")
	checkMatches(t, c, "test-domain", []matchCase{
		{entries: es("key2", "x"), rule: "test-domain.key2", rpu: 20, unit: Minute},
	})
}

// TestReferenceRefuses loads the reference's files it refuses: the same
// message, with the file and where.
func TestReferenceRefuses(t *testing.T) {
	for _, tc := range []struct {
		files []string
		file  string // the file the error names
		path  string
		msg   string
	}{
		{[]string{"empty_domain.yaml"}, "empty_domain.yaml", "domain", "config file cannot have empty domain"},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, "duplicate_domain.yaml", "domain", "duplicate domain 'test-domain' in config file (first in basic_config.yaml)"},
		{[]string{"empty_key.yaml"}, "empty_key.yaml", "descriptors[0]", "descriptor has empty key"},
		{[]string{"duplicate_key.yaml"}, "duplicate_key.yaml", "descriptors[1]", "duplicate descriptor composite key 'test-domain.key1_value1'"},
		{[]string{"bad_limit_unit.yaml"}, "bad_limit_unit.yaml", "descriptors[0].rate_limit", "invalid rate limit unit 'foo'"},
		{[]string{"replaces_self.yaml"}, "replaces_self.yaml", "descriptors[0].descriptors[0].rate_limit", "replaces should not contain name of same descriptor"},
		{[]string{"replaces_empty.yaml"}, "replaces_empty.yaml", "descriptors[0].descriptors[0].rate_limit", "should not have an empty replaces entry"},
		{[]string{"bad_yaml.yaml"}, "bad_yaml.yaml", "", "error loading config file: yaml: line 3: found unexpected end of stream"},
		{[]string{"misspelled_key.yaml"}, "misspelled_key.yaml", "descriptors[0].ratelimit", "config error, unknown key 'ratelimit'"},
		{[]string{"misspelled_key2.yaml"}, "misspelled_key2.yaml", "descriptors[0].rate_limit.requestsperunit", "config error, unknown key 'requestsperunit'"},
		{[]string{"non_string_key.yaml"}, "non_string_key.yaml", "", "config error, key is not of type string: 0.25"},
		{[]string{"non_map_list.yaml"}, "non_map_list.yaml", "descriptors[0]", "config error, yaml file contains list of type other than map: a"},
		{[]string{"unlimited_with_unit.yaml"}, "unlimited_with_unit.yaml", "descriptors[0].rate_limit", "should not specify rate limit unit when unlimited"},
		// Domains are not merged (the reference's MERGE_DOMAIN_CONFIG off).
		{[]string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, "merge_domain_key2.yaml", "domain", "duplicate domain 'test-domain' in config file (first in merge_domain_key1.yaml)"},
	} {
		var paths []string
		for _, f := range tc.files {
			paths = append(paths, "reference/"+f)
		}
		err := parseErr(t, paths...)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%v: error %v, want an *Error", tc.files, err)
			continue
		}
		if e.File != tc.file || e.Path != tc.path || e.Msg != tc.msg {
			t.Errorf("%v: got file %q path %q msg %q\nwant file %q path %q msg %q", tc.files, e.File, e.Path, e.Msg, tc.file, tc.path, tc.msg)
		}
		if !strings.HasPrefix(e.Error(), tc.file+":") {
			t.Errorf("%v: %q does not start with the file", tc.files, e.Error())
		}
	}
}
