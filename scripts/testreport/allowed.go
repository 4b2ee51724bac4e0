package main

import (
	"fmt"
	"strings"
)

// allowList is the skips CI accepts: reasons by package and test name.
type allowList map[skipKey]string

// skipKey names one test: its package (relative to the module) and its
// full name (TestA/sub, or TestA/* for every subtest of TestA).
type skipKey struct{ pkg, test string }

// parseAllowed parses the allowed-skips list: one `package TestName
// reason` a line; blank lines and lines starting with # are ignored. Every
// entry needs a reason, and no entry may be listed twice.
func parseAllowed(list string) (allowList, error) {
	out := allowList{}
	for i, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: %q: want `package TestName  reason`", i+1, line)
		}
		k := skipKey{pkg: strings.TrimPrefix(f[0], "./"), test: f[1]}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("line %d: %s %s listed twice", i+1, k.pkg, k.test)
		}
		out[k] = strings.Join(f[2:], " ")
	}
	return out, nil
}

// allows reports whether the list holds test of pkg (relative to the
// module), by its name or as a subtest of a TestA/* (or TestA/b/*) entry.
func (a allowList) allows(pkg, test string) bool {
	if _, ok := a[skipKey{pkg, test}]; ok {
		return true
	}
	for i := range len(test) {
		if test[i] == '/' {
			if _, ok := a[skipKey{pkg, test[:i] + "/*"}]; ok {
				return true
			}
		}
	}
	return false
}
