package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// targetRE finds the tests, benchmarks and fuzz targets the Makefile names
// (-fuzz Name, -run 'Name$') with the package they are run in.
var targetRE = regexp.MustCompile(`(?:-fuzz (Fuzz\w+)|-run '(Test\w+)\$\$') [^.]*?(\./[\w/]+?)/?(?:\s|$)`)

// The Makefile names only tests and fuzz targets that exist in the package
// it runs them in: a test that moved would otherwise match nothing and pass
// without running (go test -run and -fuzz do not complain).
func TestMakefileNamesRealTests(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, m := range targetRE.FindAllStringSubmatch(string(mk), -1) {
		name, pkg := m[1]+m[2], m[3]
		found++
		files, _ := filepath.Glob(filepath.Join("../..", pkg, "*_test.go"))
		defined := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "func "+name+"(") {
				defined = true
				break
			}
		}
		if !defined {
			t.Errorf("the Makefile runs %s in %s, which defines no such test", name, pkg)
		}
	}
	if found < 20 {
		t.Fatalf("found %d targets in the Makefile: the pattern no longer reads it", found)
	}
}
