package descriptors

import (
	"slices"
	"testing"
)

// The worked examples of the reference's README ("Configuration",
// "Examples"), entry by entry: testdata/readme holds their files.

func TestReadmeExample1(t *testing.T) {
	c := parseFiles(t, "readme/example1.yaml")
	checkMatches(t, c, "mongo_cps", []matchCase{
		{entries: es("database", "users"), rule: "mongo_cps.database_users", rpu: 500, unit: Second},
		{entries: es("database", "default"), rule: "mongo_cps.database_default", rpu: 500, unit: Second},
		{entries: es("database", "orders")},                   // no key-only rule
		{entries: es("database", "users", "collection", "x")}, // longer than the tree
		{entries: es("Database", "users")},                    // case-sensitive
	})
	if _, _, ok := c.Match("other", es("database", "users")); ok {
		t.Error("a domain not configured matched")
	}
}

func TestReadmeExample2(t *testing.T) {
	c := parseFiles(t, "readme/example2.yaml")
	checkMatches(t, c, "messaging", []matchCase{
		// The nested key-only rule: any number, 5 a day each.
		{entries: es("message_type", "marketing", "to_number", "2061111111"), rule: "messaging.message_type_marketing.to_number", rpu: 5, unit: Day},
		{entries: es("message_type", "marketing", "to_number", "2062222222"), rule: "messaging.message_type_marketing.to_number", rpu: 5, unit: Day},
		// The top-level key-only rule: 100 a day per number.
		{entries: es("to_number", "2061111111"), rule: "messaging.to_number", rpu: 100, unit: Day},
		// The placeholder has no limit of its own.
		{entries: es("message_type", "marketing")},
		{entries: es("message_type", "transactional", "to_number", "2061111111")},
	})
	// Each number is its own counter.
	k1 := matchKey(t, c, "messaging", es("message_type", "marketing", "to_number", "2061111111"))
	k2 := matchKey(t, c, "messaging", es("message_type", "marketing", "to_number", "2062222222"))
	k3 := matchKey(t, c, "messaging", es("to_number", "2061111111"))
	if k1 == k2 || k1 == k3 || k2 == k3 {
		t.Errorf("keys not distinct: %q %q %q", k1, k2, k3)
	}
	if want := Key("messaging", es("message_type", "marketing", "to_number", "2061111111")); k1 != want {
		t.Errorf("key %q, want %q", k1, want)
	}
	// The README's request of two descriptors: both limits apply.
	var limits []*Limit
	for _, d := range [][]Entry{es("message_type", "marketing", "to_number", "2061111111"), es("to_number", "2061111111")} {
		l, _, ok := c.Match("messaging", d)
		if !ok {
			t.Fatalf("%v: no limit", d)
		}
		limits = append(limits, l)
	}
	if kept := Replace(limits); !slices.Equal(kept, []bool{true, true}) {
		t.Errorf("Replace: %v", kept)
	}
}

func TestReadmeExample3(t *testing.T) {
	c := parseFiles(t, "readme/example3.yaml")
	checkMatches(t, c, "edge_proxy_per_ip", []matchCase{
		{entries: es("remote_address", "50.0.0.1"), rule: "edge_proxy_per_ip.remote_address", rpu: 10, unit: Second},
		// The most specific match first: key_value before key.
		{entries: es("remote_address", "50.0.0.5"), rule: "edge_proxy_per_ip.remote_address_50.0.0.5", rpu: 0, unit: Second},
	})
	l, _, _ := c.Match("edge_proxy_per_ip", es("remote_address", "50.0.0.5"))
	if !l.DeniesAll() {
		t.Error("requests_per_unit: 0 does not deny all")
	}
	if _, ok := c.LimitsOf(Key("edge_proxy_per_ip", es("remote_address", "50.0.0.5"))); ok {
		t.Error("LimitsOf reported limits for a deny-all limit")
	}
	if got, want := SanitizeStat(l.Stat), "edge_proxy_per_ip.remote_address_50_0_0_5"; got != want {
		t.Errorf("SanitizeStat: %q, want %q", got, want)
	}
	l, _, _ = c.Match("edge_proxy_per_ip", es("remote_address", "50.0.0.1"))
	if l.DeniesAll() {
		t.Error("10/s denies all")
	}
}

func TestReadmeExample4(t *testing.T) {
	// The request's tuples must reach the configured depth, no more, no less.
	a := parseFiles(t, "readme/example4a.yaml")
	checkMatches(t, a, "example4", []matchCase{
		{entries: es("key", "value", "subkey", "subvalue")},
		{entries: es("key", "value"), rule: "example4.key_value", rpu: 300, unit: Second},
	})
	b := parseFiles(t, "readme/example4b.yaml")
	checkMatches(t, b, "example4", []matchCase{
		{entries: es("key", "value", "subkey", "subvalue"), rule: "example4.key_value.subkey", rpu: 300, unit: Second},
		{entries: es("key", "value")},
		{entries: es("key", "value", "subkey", "subvalue", "more", "x")},
	})
}

func TestReadmeExample5(t *testing.T) {
	c := parseFiles(t, "readme/example5.yaml")
	checkMatches(t, c, "internal", []matchCase{
		{entries: es("ldap", "x"), rule: "internal.ldap", unit: UnitUnknown},
		{entries: es("azure", "x"), rule: "internal.azure", rpu: 100, unit: Minute},
	})
	l, _, _ := c.Match("internal", es("ldap", "x"))
	if !l.Unlimited || l.DeniesAll() {
		t.Errorf("ldap: Unlimited %v DeniesAll %v", l.Unlimited, l.DeniesAll())
	}
	lim, ok := c.LimitsOf(Key("internal", es("ldap", "x")))
	if !ok || lim.Requests != 0 || lim.Tokens != 0 || lim.Concurrency != 0 {
		t.Errorf("LimitsOf unlimited: %+v %v", lim, ok)
	}
}

func TestReadmeExample6(t *testing.T) {
	c := parseFiles(t, "readme/example6.yaml")
	checkMatches(t, c, "example6", []matchCase{
		{entries: es("service", "auth-service", "user", "user-a"), rule: "example6.service.user_user-a", rpu: 10, unit: Second},
		{entries: es("service", "auth-service", "user", "user-b"), rule: "example6.service.user_user-b", rpu: 20, unit: Second},
		{entries: es("service", "auth-service", "user", "user-c")},
	})
	a, _, _ := c.Match("example6", es("service", "auth-service", "user", "user-a"))
	b, _, _ := c.Match("example6", es("service", "auth-service", "user", "user-b"))
	if !a.ShadowMode || b.ShadowMode {
		t.Errorf("shadow mode: user-a %v user-b %v", a.ShadowMode, b.ShadowMode)
	}
}

func TestReadmeExample7(t *testing.T) {
	c := parseFiles(t, "readme/example7.yaml")
	checkMatches(t, c, "example7", []matchCase{
		{entries: es("key_1", "value_1", "user", "bkthomps"), rule: "example7.key_1_value_1.user_bkthomps", rpu: 5, unit: Second},
		{entries: es("key_2", "value_2", "user", "bkthomps"), rule: "example7.key_2_value_2.user_bkthomps", rpu: 10, unit: Second},
		// One descriptor of three entries matches nothing.
		{entries: es("key_1", "value_1", "key_2", "value_2", "user", "bkthomps")},
	})
	one, _, _ := c.Match("example7", es("key_1", "value_1", "user", "bkthomps"))
	two, _, _ := c.Match("example7", es("key_2", "value_2", "user", "bkthomps"))
	if one.Name != "specific_limit" || !slices.Equal(two.Replaces, []string{"specific_limit"}) {
		t.Errorf("name %q, replaces %q", one.Name, two.Replaces)
	}
	// Both descriptors in one request: 10/s, the 5/s limit replaced.
	if kept := Replace([]*Limit{one, two}); !slices.Equal(kept, []bool{false, true}) {
		t.Errorf("Replace(both) = %v, want [false true]", kept)
	}
	// Alone, the 5/s limit applies.
	if kept := Replace([]*Limit{one, nil}); !slices.Equal(kept, []bool{true, false}) {
		t.Errorf("Replace(one) = %v, want [true false]", kept)
	}
}

func TestReadmeExample8(t *testing.T) {
	c := parseFiles(t, "readme/example8.yaml")
	checkMatches(t, c, "example8", []matchCase{
		// detailed_metric: each unlisted value gets its own stats key.
		{entries: es("key1", "unspecified_value"), rule: "example8.key1", rpu: 10, unit: Minute, stat: "example8.key1_unspecified_value"},
		{entries: es("key1", "unspecified_value2"), rule: "example8.key1", rpu: 10, unit: Minute, stat: "example8.key1_unspecified_value2"},
		{entries: es("key1", "value1"), rule: "example8.key1_value1", rpu: 20, unit: Minute},
	})
}

func TestReadmeExample9(t *testing.T) {
	a := parseFiles(t, "readme/example9a.yaml")
	checkMatches(t, a, "example9", []matchCase{
		{entries: es("key1", "value1"), rule: "example9.key1_value*", rpu: 20, unit: Minute},
		{entries: es("key1", "value2"), rule: "example9.key1_value*", rpu: 20, unit: Minute},
		{entries: es("key1", "valueXYZ"), rule: "example9.key1_value*", rpu: 20, unit: Minute},
		{entries: es("key1", "value"), rule: "example9.key1_value*", rpu: 20, unit: Minute}, // '*' matches nothing too
		{entries: es("key1", "other")},
	})
	// Without share_threshold each value is its own counter.
	if matchKey(t, a, "example9", es("key1", "value1")) == matchKey(t, a, "example9", es("key1", "value2")) {
		t.Error("values under a wildcard without share_threshold share a key")
	}
	b := parseFiles(t, "readme/example9b.yaml")
	checkMatches(t, b, "example9", []matchCase{
		{entries: es("path", "/api/123/action"), rule: "example9.path_/api/*/action", rpu: 20, unit: Minute},
		{entries: es("path", "/api/user-id/action"), rule: "example9.path_/api/*/action", rpu: 20, unit: Minute},
		{entries: es("path", "/api/123/other")},
	})
	c := parseFiles(t, "readme/example9c.yaml")
	checkMatches(t, c, "example9", []matchCase{
		{entries: es("route", "/api/v1/resource/123/action"), rule: "example9.route_/api/*/resource/*/action", rpu: 20, unit: Minute},
		{entries: es("route", "/api/v2/resource/456/action"), rule: "example9.route_/api/*/resource/*/action", rpu: 20, unit: Minute},
		{entries: es("route", "/api/v2/resource/456")},
		{entries: es("route", "/api/v2/other/456/action")},
	})
}

func TestReadmeExample10(t *testing.T) {
	a := parseFiles(t, "readme/example10a.yaml")
	rule := "example10.route.http_method.subject_id"
	checkMatches(t, a, "example10", []matchCase{
		{entries: es("route", "api", "http_method", "GET", "subject_id", "123"), rule: rule, rpu: 60, unit: Minute,
			stat: "example10.route_api.http_method_GET.subject_id"},
		{entries: es("route", "web", "http_method", "POST", "subject_id", "456"), rule: rule, rpu: 60, unit: Minute,
			stat: "example10.route_web.http_method_POST.subject_id"},
	})
	b := parseFiles(t, "readme/example10b.yaml")
	checkMatches(t, b, "example10_wildcard", []matchCase{
		{entries: es("user", "alice", "action", "readfile", "resource", "documents"), rule: "example10_wildcard.user.action_read*.resource",
			rpu: 100, unit: Minute, stat: "example10_wildcard.user_alice.action_readfile.resource"},
	})
}

func TestReadmeExample11(t *testing.T) {
	a := parseFiles(t, "readme/example11a.yaml")
	checkMatches(t, a, "example11", []matchCase{
		{entries: es("files", "files/a.pdf"), rule: "example11.files_files/*", rpu: 10, unit: Hour},
		{entries: es("files", "files/b.csv"), rule: "example11.files_files/*", rpu: 10, unit: Hour},
		{entries: es("files_no_share", "files_no_share/a.pdf"), rule: "example11.files_no_share_files_no_share/*", rpu: 10, unit: Hour},
	})
	// share_threshold: one counter for every value the wildcard matches.
	shared := Key("example11", es("files", "files/*"))
	for _, v := range []string{"files/a.pdf", "files/b.csv", "files/c.txt"} {
		if k := matchKey(t, a, "example11", es("files", v)); k != shared {
			t.Errorf("files=%s: key %q, want the shared %q", v, k, shared)
		}
	}
	if matchKey(t, a, "example11", es("files_no_share", "files_no_share/a.pdf")) ==
		matchKey(t, a, "example11", es("files_no_share", "files_no_share/b.csv")) {
		t.Error("share_threshold: false shares a key")
	}
	// The owner of the shared key finds its limit.
	if lim, ok := a.LimitsOf(shared); !ok || lim.Requests != 10 || lim.Window != Hour.Duration() {
		t.Errorf("LimitsOf(%q) = %+v, %v", shared, lim, ok)
	}
	// The README says "example11_metrics.route_api.method_GET"; the reference's
	// code (and its test TestShareThreshold, "share_threshold with metrics")
	// gives the pattern, '*' included, and the key alone for method.
	b := parseFiles(t, "readme/example11b.yaml")
	checkMatches(t, b, "example11_metrics", []matchCase{
		{entries: es("route", "api/v1", "method", "GET"), rule: "example11_metrics.route_api/*.method", rpu: 60, unit: Minute},
	})
}
