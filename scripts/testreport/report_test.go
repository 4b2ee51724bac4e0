package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The testdata files are go test -json output recorded (go 1.26) from a
// small module example.com/tr: pass.json (a package passes, another has
// no tests), skips.json (a test, a subtest and a fuzz seed skip),
// fail.json (t.Error with a multi-line message, printed output, a
// parallel test), build.json (a compile error), panic.json (a nil map
// write in a test), timeout.json (-timeout 2s: the test never ends),
// exit.json (TestMain exits 3 after the tests passed) and setup.json (a
// package directory that does not exist).

const module = "example.com/tr"

// run reports the events of testdata/name read as from stdin (the exit
// status unknown) and returns the output and the exit status.
func run(t *testing.T, name string, allowed allowList, ci bool) (string, int) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	r := newReport(&out, module, allowed, ci)
	r.read(f)
	code := r.finish(-1)
	return out.String(), code
}

// wantLines fails t unless out holds each of lines as a whole line, in
// that order.
func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	rest := "\n" + out
	for _, l := range lines {
		i := strings.Index(rest, "\n"+l+"\n")
		if i < 0 {
			t.Fatalf("no line %q (in order) in:\n%s", l, out)
		}
		rest = rest[i+len(l)+1:]
	}
}

func TestPassing(t *testing.T) {
	out, code := run(t, "pass.json", nil, true)
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	want := "?   \texample.com/tr/notest\t[no test files]\nok  \texample.com/tr/ok\t0.027s\n\nskipped: 0\nPASS\n"
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestFailedTestPrintsItsOutput(t *testing.T) {
	out, code := run(t, "fail.json", nil, false)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out,
		"--- FAIL: TestFail (0.00s)",
		"stdout line",
		"    bad_test.go:3: boom",
		"        more",
		"    bad_test.go:3: after",
		"FAIL\texample.com/tr/bad\t0.038s",
		"failed: 1",
		"    bad TestFail",
		"skipped: 0",
		"FAIL")
	for _, quiet := range []string{"=== RUN", "TestPar1", "TestOK", "--- PASS"} {
		if strings.Contains(out, quiet) {
			t.Errorf("output has %q, which passed or only framed a test:\n%s", quiet, out)
		}
	}
}

func TestBuildFailureIsShownAndFails(t *testing.T) {
	out, code := run(t, "build.json", nil, false)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out,
		"# example.com/tr/build [example.com/tr/build.test]",
		`build/b.go:2:23: cannot use "x" (untyped string constant) as int value in return statement`,
		"FAIL\texample.com/tr/build [build failed]",
		"failed: 1",
		"    build [build failed]",
		"FAIL")
}

func TestPanicIsShownAndFails(t *testing.T) {
	out, code := run(t, "panic.json", nil, false)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out,
		"--- FAIL: TestPanic (0.00s)",
		"    p_test.go:4: about to",
		"panic: assignment to entry in nil map [recovered, repanicked]",
		"\t/tmp/tr/panic/p_test.go:4 +0x54",
		"FAIL\texample.com/tr/panic\t0.006s",
		"    panic TestPanic")
	if strings.Contains(out, "TestFirst") || strings.Contains(out, "TestAfter") {
		t.Errorf("output names a test that passed or never ran:\n%s", out)
	}
}

// A test that never ended (killed by -timeout) is a failure, shown with
// the timeout's panic.
func TestTimeoutShowsTheRunningTest(t *testing.T) {
	out, code := run(t, "timeout.json", nil, false)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out,
		"--- FAIL: TestHang (still running when the package ended)",
		"    h_test.go:3: waiting",
		"panic: test timed out after 2s",
		"FAIL\texample.com/tr/hang\t2.087s",
		"    hang TestHang")
}

// TestMain exiting non-zero after every test passed fails the package.
func TestPackageFailsWithoutAFailedTest(t *testing.T) {
	out, code := run(t, "exit.json", nil, false)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out, "leak found", "FAIL\texample.com/tr/exit\t0.012s", "failed: 1",
		"    exit (the package failed: see its output above)")
}

func TestSetupFailure(t *testing.T) {
	out, code := run(t, "setup.json", nil, false)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out, "stat /tmp/tr/nonexist: directory not found", "FAIL\t./nonexist [setup failed]")
}

func TestSkipsListed(t *testing.T) {
	out, code := run(t, "skips.json", nil, false)
	if code != 0 {
		t.Fatalf("exit %d without -ci, want 0:\n%s", code, out)
	}
	wantLines(t, out,
		"ok  \texample.com/tr/ok\t0.027s",
		"skipped: 3",
		"    ok TestSkip: ok_test.go:4: no thing here: second line  [not in allowed-skips.txt: fails in CI]",
		"    ok TestSub/a: ok_test.go:5: sub skip 1  [not in allowed-skips.txt: fails in CI]",
		"    ok FuzzX/seed#0: ok_test.go:6: seed skip  [not in allowed-skips.txt: fails in CI]",
		"PASS")
	if strings.Contains(out, "notest") && !strings.Contains(out, "[no test files]") {
		t.Errorf("a package without tests counted as a skipped test:\n%s", out)
	}
}

// In CI a skip fails the run unless the list allows it, by name or as a
// subtest of a TestA/* entry.
func TestCISkipNotListedFails(t *testing.T) {
	some, err := parseAllowed("ok TestSkip  needs a thing\nok FuzzX/*  the seeds skip\nother TestSub/a  another package\n")
	if err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "skips.json", some, true)
	if code != 1 {
		t.Fatalf("exit %d with TestSub/a not listed, want 1:\n%s", code, out)
	}
	wantLines(t, out,
		"    ok TestSkip: ok_test.go:4: no thing here: second line",
		"    ok TestSub/a: ok_test.go:5: sub skip 1  [not in allowed-skips.txt: fails in CI]",
		"    ok FuzzX/seed#0: ok_test.go:6: seed skip",
		"CI: 1 skipped tests not in scripts/testreport/allowed-skips.txt: a test must not skip in CI unless listed there (package TestName  reason)",
		"FAIL")

	all, err := parseAllowed("ok TestSkip  needs a thing\nok FuzzX/*  the seeds skip\n./ok TestSub/*  a subtest\n")
	if err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, "skips.json", all, true); code != 0 || strings.Contains(out, "[not in") {
		t.Fatalf("exit %d with every skip listed, want 0:\n%s", code, out)
	}
}

// go test's exit status counts even when its events show no failure, and
// input without a single package result is a failure.
func TestGoStatus(t *testing.T) {
	var out strings.Builder
	r := newReport(&out, module, nil, false)
	f, err := os.Open("testdata/pass.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r.read(f)
	if code := r.finish(2); code != 1 || !strings.Contains(out.String(), "go test exited with status 2") {
		t.Fatalf("exit %d after go test's 2, want 1:\n%s", code, out.String())
	}
	out.Reset()
	r = newReport(&out, module, nil, false)
	r.read(strings.NewReader("go: some error before any test\n"))
	if code := r.finish(-1); code != 1 || !strings.Contains(out.String(), "go: some error before any test\n") {
		t.Fatalf("exit %d on input without results, want 1, the line passed through:\n%s", code, out.String())
	}
}

// exitCode runs the go command it is given: a stand-in that prints a
// recording and exits with a status.
func TestRunsGoTest(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		file   string
		status int
		want   int
	}{{"pass.json", 0, 0}, {"fail.json", 1, 1}, {"build.json", 1, 1}, {"pass.json", 1, 1}} {
		fake := filepath.Join(dir, "go")
		script := "#!/bin/sh\n[ \"$1 $2 $3\" = 'test -json -count=1' ] || { echo \"bad args: $*\" >&2; exit 9; }\ncat " +
			filepath.Join(must(filepath.Abs("testdata")), tc.file) + "\nexit " + string(rune('0'+tc.status)) + "\n"
		if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		code := exitCode([]string{"-go", fake, "-ci=false", "-module", module, "--", "-count=1", "./..."}, strings.NewReader(""), &stdout, &stderr)
		if code != tc.want {
			t.Errorf("%s, go test exiting %d: exit %d, want %d\n%s%s", tc.file, tc.status, code, tc.want, stdout.String(), stderr.String())
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestParseAllowedErrors(t *testing.T) {
	for _, bad := range []string{"node TestX", "node TestX  why\nnode TestX  twice"} {
		if _, err := parseAllowed(bad); err == nil {
			t.Errorf("parseAllowed(%q): no error", bad)
		}
	}
}

// Every entry of the checked-in list names a test that exists: a package
// directory of the module with a test function of that name (a moved or
// renamed test must take its entry along).
func TestAllowedListNamesRealTests(t *testing.T) {
	list, err := parseAllowed(allowedSkips)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	for k := range list {
		name, _, _ := strings.Cut(k.test, "/")
		files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(k.pkg), "*_test.go"))
		found := false
		decl := regexp.MustCompile(`(?m)^func ` + regexp.QuoteMeta(name) + `\(`)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			found = found || decl.Match(b)
		}
		if !found {
			t.Errorf("allowed-skips.txt: %s %s: no func %s in %s/*_test.go", k.pkg, k.test, name, k.pkg)
		}
	}
}
