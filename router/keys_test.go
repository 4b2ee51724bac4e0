package router

import "testing"

func TestSplitKey(t *testing.T) {
	for _, tc := range []struct {
		key         string
		kind        KeyKind
		name, entry string
	}{
		{TenantKey("a|m:b"), KeyTenant, "a|m:b", ""},
		{ModelKey(TenantKey("a"), "b|m:c"), KeyTenant, "a", "b|m:c"},
		{GroupKey("g"), KeyGroup, "g", ""},
		{ModelKey(GroupKey("g"), "gpt-4o-*"), KeyGroup, "g", "gpt-4o-*"},
		{PoolKey("gpt\x1fm:x"), KeyPool, "gpt\x1fm:x", ""},
		{"x", KeyUnknown, "x", ""},
	} {
		kind, name, entry := SplitKey(tc.key)
		if kind != tc.kind || name != tc.name || entry != tc.entry {
			t.Errorf("SplitKey(%q) = %v %q %q", tc.key, kind, name, entry)
		}
	}
	if err := CheckName("tenant", "a\x1fm:b", true); err == nil {
		t.Error("a tenant name holding the model separator is accepted: keys could collide")
	}
}
