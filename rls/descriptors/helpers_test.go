package descriptors

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// parseFiles parses testdata files together, each named by its base name.
func parseFiles(t testing.TB, paths ...string) *Config {
	t.Helper()
	files := make(map[string][]byte)
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join("testdata", p))
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = b
	}
	c, err := Parse(files)
	if err != nil {
		t.Fatalf("Parse(%v): %v", paths, err)
	}
	return c
}

// parseErr parses testdata files together and returns the error, failing
// when there is none.
func parseErr(t testing.TB, paths ...string) error {
	t.Helper()
	files := make(map[string][]byte)
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join("testdata", p))
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = b
	}
	c, err := Parse(files)
	if err == nil {
		t.Errorf("Parse(%v) accepted, domains %v", paths, c.Domains())
		return errors.New("no error")
	}
	if c != nil {
		t.Errorf("Parse(%v): a Config and an error", paths)
	}
	return err
}

// parseText parses one file given as text.
func parseText(t testing.TB, text string) *Config {
	t.Helper()
	c, err := Parse(map[string][]byte{"test.yaml": []byte(text)})
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, text)
	}
	return c
}

// es builds entries from key, value pairs.
func es(kv ...string) []Entry {
	out := make([]Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// matchCase is one descriptor and what Match should find for it.
type matchCase struct {
	entries []Entry
	rule    string // the matched limit's Rule; "" when none applies
	rpu     uint32 // its RequestsPerUnit
	unit    Unit
	stat    string // its Stat; "" when it is Rule
}

// checkMatches runs Match on every case in domain.
func checkMatches(t *testing.T, c *Config, domain string, cases []matchCase) {
	t.Helper()
	for _, tc := range cases {
		l, _, ok := c.Match(domain, tc.entries)
		if tc.rule == "" {
			if ok {
				t.Errorf("%s %v: matched %s, want no limit", domain, tc.entries, l.Rule)
			}
			continue
		}
		if !ok {
			t.Errorf("%s %v: no limit, want %s", domain, tc.entries, tc.rule)
			continue
		}
		stat := tc.stat
		if stat == "" {
			stat = tc.rule
		}
		if l.Rule != tc.rule || l.RequestsPerUnit != tc.rpu || l.Unit != tc.unit || l.Stat != stat {
			t.Errorf("%s %v: got %s %d/%v stat %q, want %s %d/%v stat %q",
				domain, tc.entries, l.Rule, l.RequestsPerUnit, l.Unit, l.Stat, tc.rule, tc.rpu, tc.unit, stat)
		}
	}
}

// matchKey returns MatchKey's key, failing when nothing matches.
func matchKey(t *testing.T, c *Config, domain string, entries []Entry) string {
	t.Helper()
	_, _, key, ok := c.MatchKey(domain, entries)
	if !ok {
		t.Fatalf("%s %v: no limit", domain, entries)
	}
	return key
}
