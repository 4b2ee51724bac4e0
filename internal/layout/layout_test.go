package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Module is the module path the table's names are relative to.
const module = "github.com/tokenring/tokenring"

// anything marks a package that may import every package of ours: the
// binaries, the multi-process tests and the scripts, which wire the
// others together.
var anything = []string{"cmd/", "test", "scripts/", "deploy"}

// Allowed lists, for every library package of ours, the packages of ours
// it may import (by path relative to Module). A package missing from the
// table fails the test until it is placed in it.
var allowed = map[string][]string{
	// Pure, or nearly: they import nothing of ours.
	"limiter":              nil,
	"ring":                 nil,
	"config":               nil,
	"prompt":               nil,
	"internal/alarm":       nil,
	"internal/fdreserve":   nil,
	"internal/idleconn":    nil,
	"internal/jsonwire":    nil,
	"internal/lazyctx":     nil,
	"internal/loopback":    nil,
	"internal/layout":      nil,
	"internal/testclock":   nil,
	"internal/promtest":    nil,
	"internal/testcert":    nil,
	"node/internal/wire":   nil,
	"node/internal/shrink": nil,
	"test/fakeupstream":    nil,
	"internal/redistest":   {"internal/loopback"},
	"internal/http1":       {"internal/alarm", "internal/fdreserve", "internal/idleconn"},
	"gossip":               {"internal/fdreserve"},
	// OpenTelemetry: the spans and their propagation, and apart the
	// exporter tokenringd builds.
	"tracing":      nil,
	"tracing/otlp": {"config", "tracing"},
	// A member: the pure custody machine and the peer protocol below the
	// parts that use it, the shell (node) above them.
	"node/custody": {"node/internal/wire", "ring"},
	"node/peer":    {"limiter", "node/internal/wire"},
	"node/allot":   {"limiter", "node/internal/wire", "node/peer"},
	"node/replica": {"limiter", "node/internal/shrink", "node/internal/wire", "node/peer", "ring"},
	"node": {"gossip", "internal/lazyctx", "limiter", "node/allot", "node/custody",
		"node/internal/shrink", "node/peer", "node/replica", "ring", "tracing"},
	// The front door: the decision across keys, and the HTTP shapes above it.
	"fallback":  {"limiter"},
	"router":    {"fallback", "internal/lazyctx", "limiter", "node", "prompt", "ring", "tracing"},
	"api":       {"internal/http1", "internal/jsonwire", "limiter", "node", "prompt", "router"},
	"proxy":     {"internal/alarm", "internal/http1", "internal/jsonwire", "limiter", "node", "prompt", "router", "tracing"},
	"admin":     {"limiter", "node", "ring", "router"},
	"frontdoor": {"admin", "api", "fallback", "internal/http1", "limiter", "proxy", "router", "tracing"},
	"client":    {"internal/idleconn", "internal/jsonwire"},
	// Envoy's rate limit service: a gRPC front door over the router.
	"rls": {"api", "limiter", "node", "rls/descriptors", "router"},
	// The reference rate limit service's configuration files, pure.
	"rls/descriptors": {"limiter"},
}

// imports returns, for every directory of the module holding non-test Go
// files, the packages of ours those files import (relative to Module).
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if _, ok := out[rel]; !ok {
			out[rel] = nil
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if ours, ok := strings.CutPrefix(p, module+"/"); ok && !slices.Contains(out[rel], ours) {
				out[rel] = append(out[rel], ours)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wiring(pkg string) bool {
	for _, a := range anything {
		if pkg == strings.TrimSuffix(a, "/") || (strings.HasSuffix(a, "/") && strings.HasPrefix(pkg, a)) {
			return true
		}
	}
	return false
}

func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found: %v", err)
	}
	found := imports(t, root)
	if len(found) < len(allowed) {
		t.Fatalf("read %d packages, fewer than the %d the table names", len(found), len(allowed))
	}
	for pkg, imps := range found {
		if wiring(pkg) {
			continue
		}
		allowed, ok := allowed[pkg]
		if !ok {
			t.Errorf("%s is not in the table in layout_test.go: place it in the table (and in ARCHITECTURE.md)", pkg)
			continue
		}
		for _, imp := range imps {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s, which the table in layout_test.go does not allow", pkg, imp)
			}
		}
	}
	for pkg := range allowed {
		if _, ok := found[pkg]; !ok {
			t.Errorf("the table in layout_test.go names %s, which holds no Go files", pkg)
		}
	}
}

// TestTableIsAcyclic checks the table itself: no package may reach itself
// through the edges it allows.
func TestTableIsAcyclic(t *testing.T) {
	var visit func(pkg string, path []string)
	visit = func(pkg string, path []string) {
		if slices.Contains(path, pkg) {
			t.Fatalf("the table allows a cycle: %s", strings.Join(append(path, pkg), " → "))
		}
		for _, next := range allowed[pkg] {
			visit(next, append(path, pkg))
		}
	}
	for pkg := range allowed {
		visit(pkg, nil)
	}
}
