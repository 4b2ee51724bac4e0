package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// FuzzParse: Parse never panics, and returns a Config or an *Error naming
// the file, never both; a Config answers Match, MatchKey and LimitsOf alike
// and hashes the same when parsed again.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/reference", "testdata/readme"} {
		names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			f.Fatal(err)
		}
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, "key1\xffvalue1\xffsubkey1\xffx")
		}
	}
	f.Add([]byte(tenants), "tenant\xfft1\xffrequest_id\xffr")
	f.Add([]byte("a: &a [*a]"), "")
	f.Add([]byte("domain: d\ndescriptors: &l\n  - key: a\n    descriptors: *l\n"), "a\xffb\xffa\xffb")
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    <<: {value: '*', rate_limit: {unit: day}}\n"), "a\xffx")
	f.Fuzz(func(t *testing.T, content []byte, query string) {
		c, err := Parse(map[string][]byte{"f.yaml": content})
		if err != nil {
			var e *Error
			if c != nil || !errors.As(err, &e) || e.File != "f.yaml" || !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("Parse: %v, %v", c, err)
			}
			return
		}
		again, err := Parse(map[string][]byte{"g.yaml": content})
		if err != nil || again.Hash() != c.Hash() {
			t.Fatalf("parsed again: %v, hash %s then %s", err, c.Hash(), again.Hash())
		}
		entries := entriesFrom([]byte(query))
		for _, domain := range c.Domains() {
			l, rid, ok := c.Match(domain, entries)
			l2, rid2, key, ok2 := c.MatchKey(domain, entries)
			if ok != ok2 || rid != rid2 || ok && (l.Rule != l2.Rule || l.Stat != l2.Stat) {
				t.Fatalf("Match and MatchKey differ on %q %q", domain, entries)
			}
			if !ok {
				continue
			}
			if !strings.HasPrefix(l.Rule, domain+".") || !strings.HasPrefix(l.Stat, domain+".") {
				t.Fatalf("rule %q stat %q outside domain %q", l.Rule, l.Stat, domain)
			}
			lim, lok := c.LimitsOf(key)
			if lok && lim != l.Limits() || !lok && !l.DeniesAll() && !hasSharedLiteral(key) {
				t.Fatalf("LimitsOf(%q) = %+v %v for %+v", key, lim, lok, *l)
			}
		}
	})
}

// hasSharedLiteral reports whether key holds a '*', which a shared pattern
// written as a value brings: such a key can match otherwise than the
// request that made it when the pattern's key part differs from the
// entry's (the reference's composite keys join key and value with '_').
func hasSharedLiteral(key string) bool { return strings.Contains(key, "*") }

func TestLoad(t *testing.T) {
	// A Kubernetes ConfigMap mount: the files are links into ..data, a link
	// to a hidden, timestamped directory.
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	must(t, os.Mkdir(data, 0o755))
	for name, src := range map[string]string{"config.yaml": "reference/examples_config.yaml", "example.yml": "reference/examples_example.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", src))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(data, name), b, 0o644))
	}
	must(t, os.WriteFile(filepath.Join(data, "notes.txt"), []byte("not yaml ["), 0o644))
	must(t, os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")))
	for _, name := range []string{"config.yaml", "example.yml", "notes.txt"} {
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	must(t, os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("not yaml ["), 0o644))
	must(t, os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755))
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "mongo_cps,rl" {
		t.Fatalf("domains %s", got)
	}
	if c.Hash() != parseFiles(t, "reference/examples_config.yaml", "reference/examples_example.yaml").Hash() {
		t.Error("Load and Parse hash differently")
	}
	// An error names the file by its name in the directory.
	must(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: x\ndescriptors: [a]\n"), 0o644))
	_, err = Load(dir)
	var e *Error
	if !errors.As(err, &e) || e.File != "bad.yaml" {
		t.Errorf("Load: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Error("Load of a missing directory")
	}
	// A dangling link is an error, not a file skipped.
	must(t, os.Remove(filepath.Join(dir, "bad.yaml")))
	must(t, os.Symlink("nowhere.yaml", filepath.Join(dir, "dangling.yaml")))
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "dangling.yaml") {
		t.Errorf("Load with a dangling link: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestHash(t *testing.T) {
	base := parseFiles(t, "reference/basic_config.yaml", "reference/examples_example.yaml")
	h := base.Hash()
	if len(h) != 64 {
		t.Fatalf("hash %q", h)
	}
	// Names, comments, layout and order of files and siblings do not count.
	b1, _ := os.ReadFile("testdata/reference/basic_config.yaml")
	b2, _ := os.ReadFile("testdata/reference/examples_example.yaml")
	other, err := Parse(map[string][]byte{"z.yaml": b1, "a.yml": append([]byte("# another comment\n"), b2...)})
	if err != nil || other.Hash() != h {
		t.Errorf("renamed files: %v, hash %s, want %s", err, other.Hash(), h)
	}
	same := func(a, b string) bool { return parseText(t, a).Hash() == parseText(t, b).Hash() }
	const one = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n"
	if !same(one, "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {requests_per_unit: 2, unit: SECOND}\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n") {
		t.Error("sibling order or layout changed the hash")
	}
	for _, changed := range []string{
		strings.Replace(one, "requests_per_unit: 2", "requests_per_unit: 3", 1),
		strings.Replace(one, "unit: second, requests_per_unit: 2", "unit: minute, requests_per_unit: 2", 1),
		strings.Replace(one, "key: b\n", "key: b\n    shadow_mode: true\n", 1),
		strings.Replace(one, "key: b\n", "key: b\n    value_to_metric: true\n", 1),
		strings.Replace(one, "requests_per_unit: 2}", "requests_per_unit: 2, name: n}", 1),
		strings.Replace(one, "requests_per_unit: 2}", "requests_per_unit: 2, concurrency: 1, request_id_key: r}", 1),
		strings.Replace(one, "domain: d", "domain: e", 1),
		strings.Replace(one, "key: b", "key: c", 1),
	} {
		if same(one, changed) {
			t.Errorf("a change kept the hash:\n%s", changed)
		}
	}
	// Wildcards match in file order, so their order counts.
	const w1 = "domain: d\ndescriptors:\n  - {key: a, value: 'x*', rate_limit: {unit: second, requests_per_unit: 1}}\n  - {key: a, value: '*y', rate_limit: {unit: second, requests_per_unit: 2}}\n"
	const w2 = "domain: d\ndescriptors:\n  - {key: a, value: '*y', rate_limit: {unit: second, requests_per_unit: 2}}\n  - {key: a, value: 'x*', rate_limit: {unit: second, requests_per_unit: 1}}\n"
	if same(w1, w2) {
		t.Error("wildcard order did not change the hash")
	}
	l1, _, _ := parseText(t, w1).Match("d", es("a", "xy"))
	l2, _, _ := parseText(t, w2).Match("d", es("a", "xy"))
	if l1.RequestsPerUnit != 1 || l2.RequestsPerUnit != 2 {
		t.Errorf("first wildcard in file order: %d, %d", l1.RequestsPerUnit, l2.RequestsPerUnit)
	}
	if empty, _ := Parse(nil); empty.Hash() == h || len(empty.Domains()) != 0 {
		t.Error("empty config")
	}
}

// TestConcurrentMatch runs the matching methods from several goroutines on
// one Config (go test -race).
func TestConcurrentMatch(t *testing.T) {
	c := parseFiles(t, "reference/share_threshold.yaml", "readme/example8.yaml")
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, _, key, ok := c.MatchKey("test-domain", es("route", "api/v1", "method", "GET")); !ok {
					t.Error("no match")
				} else if _, ok := c.LimitsOf(key); !ok {
					t.Error("LimitsOf")
				}
				c.Match("example8", es("key1", "v"))
			}
		}()
	}
	wg.Wait()
}

// TestMatchAllocs: matching a plain descriptor allocates nothing.
func TestMatchAllocs(t *testing.T) {
	c := parseFiles(t, "reference/basic_config.yaml")
	entries := es("key1", "value1", "subkey1", "subvalue1")
	if n := testing.AllocsPerRun(100, func() { c.Match("test-domain", entries) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}
