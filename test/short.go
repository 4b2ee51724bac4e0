package test

import "testing"

// needFull skips t under -short (make test-short): t is one of the slow
// multi-process tests, which start real tokenringd processes (and, some of
// them, haproxy, redis-server, Node.js or network namespaces) and take
// seconds to minutes each. Call it first thing in every such test.
func needFull(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping in -short mode: starts real tokenringd processes (a multi-process test); run without -short")
	}
}
