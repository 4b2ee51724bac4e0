package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), with the build
// events go test adds (build-output, build-fail: ImportPath, and a
// package's fail with FailedBuild).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string
	FailedBuild string
}

// testState is one test (or subtest) of a package, as its events came.
type testState struct {
	name    string
	output  []string // Output chunks, in order (a chunk may end mid-line)
	result  string   // pass, fail or skip; "" while it runs
	elapsed float64
}

// pkgState is one package under test.
type pkgState struct {
	tests   map[string]*testState
	order   []*testState // by their run events: a parent before its subtests
	output  []string     // the package's own output, its summary line aside
	summary string       // go test's line for it: "ok  \tpkg\t1.2s", "FAIL\tpkg ...", "?   \tpkg\t[no test files]"
	done    bool
}

// skip is one skipped test, for the summary.
type skip struct {
	pkg, test, msg string
	allowed        bool
}

// report follows the events of one go test run and prints them.
type report struct {
	w        io.Writer
	module   string
	allowed  allowList
	ci       bool
	pkgs     map[string]*pkgState
	started  []string // package paths, in the order they started
	failed   []string // "pkg TestName" of every failed or unfinished test, and the packages failed without one
	pkgFails []string // packages that failed (build failures included)
	builds   int      // build-fail events
	skips    []skip
	results  int // package results seen
}

func newReport(w io.Writer, module string, allowed allowList, ci bool) *report {
	return &report{w: w, module: module, allowed: allowed, ci: ci, pkgs: map[string]*pkgState{}}
}

// read reports every event of r until its end. A line that is not an
// event is printed as it is.
func (r *report) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.event(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(r.w, "testreport: reading go test's output: %v\n", err)
		r.pkgFails = append(r.pkgFails, "(go test's output unreadable)")
	}
}

// event handles one event.
func (r *report) event(e event) {
	switch e.Action {
	case "build-output": // the compiler's messages, printed as go test would
		fmt.Fprint(r.w, e.Output)
		return
	case "build-fail":
		r.builds++
		return
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		r.pkgEvent(p, e)
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &testState{name: e.Test}
		p.tests[e.Test] = t
		p.order = append(p.order, t)
	}
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
	case "pass", "fail", "skip":
		t.result, t.elapsed = e.Action, e.Elapsed
		if e.Action == "pass" {
			t.output = nil // never printed: a failed package prints its failed tests only
		}
		if e.Action == "skip" {
			rel := r.rel(e.Package)
			r.skips = append(r.skips, skip{pkg: rel, test: t.name, msg: skipMessage(t), allowed: r.allowed.allows(rel, t.name)})
		}
	}
}

func (r *report) pkg(name string) *pkgState {
	p := r.pkgs[name]
	if p == nil {
		p = &pkgState{tests: map[string]*testState{}}
		r.pkgs[name] = p
		r.started = append(r.started, name)
	}
	return p
}

// pkgEvent handles an event of the package itself: its output, and its
// result, when the package's lines are printed.
func (r *report) pkgEvent(p *pkgState, e event) {
	switch e.Action {
	case "output":
		switch line := strings.TrimRight(e.Output, "\n"); {
		case line == "PASS" || line == "FAIL":
		case strings.HasPrefix(line, "ok  \t"), strings.HasPrefix(line, "FAIL\t"), strings.HasPrefix(line, "?   \t"):
			p.summary = e.Output
		default:
			p.output = append(p.output, e.Output)
		}
	case "pass", "skip": // skip: a package without tests
		p.done = true
		r.results++
		r.printSummary(p, e, "ok  ")
	case "fail":
		p.done = true
		r.results++
		r.pkgFails = append(r.pkgFails, r.rel(e.Package))
		before := len(r.failed)
		r.printFailures(p, e.Package)
		r.printSummary(p, e, "FAIL")
		if len(r.failed) == before { // no test failed: the build, TestMain, the binary's exit
			why := "(the package failed: see its output above)"
			if e.FailedBuild != "" {
				why = "[build failed]"
			}
			r.failed = append(r.failed, r.rel(e.Package)+" "+why)
		}
	}
}

func (r *report) printSummary(p *pkgState, e event, word string) {
	if p.summary == "" {
		p.summary = fmt.Sprintf("%s\t%s\t%.3fs\n", word, e.Package, e.Elapsed)
	}
	fmt.Fprint(r.w, p.summary)
}

// printFailures prints, for a failed package, every failed test and every
// test still running when it ended (a panic, a timeout) with its output,
// then the package's own output.
func (r *report) printFailures(p *pkgState, pkg string) {
	for _, t := range p.order {
		var head string
		switch t.result {
		case "fail":
			head = fmt.Sprintf("--- FAIL: %s (%.2fs)", t.name, t.elapsed)
		case "":
			head = fmt.Sprintf("--- FAIL: %s (still running when the package ended)", t.name)
		default:
			continue
		}
		r.failed = append(r.failed, r.rel(pkg)+" "+t.name)
		fmt.Fprintf(r.w, "%s%s\n", strings.Repeat("    ", strings.Count(t.name, "/")), head)
		for _, line := range testLines(t) {
			fmt.Fprintln(r.w, line)
		}
	}
	fmt.Fprint(r.w, strings.Join(p.output, ""))
}

// testLines is t's output by lines, without the lines go test frames it
// with (=== RUN, --- FAIL: and the like), which the report writes its own.
func testLines(t *testState) []string {
	text := strings.TrimSuffix(strings.Join(t.output, ""), "\n")
	if text == "" {
		return nil
	}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		s := strings.TrimSpace(line)
		if framing.MatchString(s) {
			continue
		}
		if ownResult(s, t.name) {
			continue
		}
		out = append(out, line)
	}
	return out
}

// ownResult reports whether line is test name's own --- PASS, FAIL or
// SKIP line.
func ownResult(line, name string) bool {
	for _, word := range []string{"--- PASS: ", "--- FAIL: ", "--- SKIP: "} {
		if strings.HasPrefix(line, word+name+" (") {
			return true
		}
	}
	return false
}

// framing is go test -v's lines that say which test runs.
var framing = regexp.MustCompile(`^=== (RUN|PAUSE|CONT|NAME)\s`)

// logLine is the first line of a t.Log, t.Error or t.Skip message.
var logLine = regexp.MustCompile(`^\s+[^\s:]+\.go:\d+: `)

// skipMessage is the last message t logged (t.Skip's reason), with its
// continuation lines, on one line.
func skipMessage(t *testState) string {
	lines := testLines(t)
	from := -1
	for i, line := range lines {
		if logLine.MatchString(line) {
			from = i
		}
	}
	if from < 0 {
		if len(lines) == 0 {
			return "(no message)"
		}
		from = len(lines) - 1
	}
	var parts []string
	for _, line := range lines[from:] {
		if s := strings.TrimSpace(line); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " ")
}

// rel is pkg relative to the module ("." for the module's root).
func (r *report) rel(pkg string) string {
	if r.module == "" {
		return pkg
	}
	if pkg == r.module {
		return "."
	}
	return strings.TrimPrefix(pkg, r.module+"/")
}

// finish prints the summary (failed tests, skipped tests) and returns the
// exit status. goStatus is go test's exit status, -1 when not known (the
// events were read from stdin).
func (r *report) finish(goStatus int) int {
	var unfinished []string
	for _, name := range r.started {
		if !r.pkgs[name].done {
			unfinished = append(unfinished, r.rel(name))
		}
	}
	bad := len(r.failed) > 0 || len(r.pkgFails) > 0 || r.builds > 0 || len(unfinished) > 0
	fmt.Fprintln(r.w)
	if len(r.failed) > 0 {
		fmt.Fprintf(r.w, "failed: %d\n", len(r.failed))
		for _, f := range r.failed {
			fmt.Fprintf(r.w, "    %s\n", f)
		}
	}
	if len(unfinished) > 0 {
		fmt.Fprintf(r.w, "packages with no result (go test stopped): %s\n", strings.Join(unfinished, " "))
	}
	notAllowed := r.printSkips()
	switch {
	case goStatus > 0 && !bad:
		fmt.Fprintf(r.w, "go test exited with status %d without a failed test or package: see its messages above\n", goStatus)
		bad = true
	case goStatus < 0 && r.results == 0:
		fmt.Fprintln(r.w, "no package's result in the input: go test did not run")
		bad = true
	}
	if r.ci && notAllowed > 0 {
		fmt.Fprintf(r.w, "CI: %d skipped tests not in scripts/testreport/allowed-skips.txt: a test must not skip in CI unless listed there (package TestName  reason)\n", notAllowed)
		bad = true
	}
	if bad {
		fmt.Fprintln(r.w, "FAIL")
		return 1
	}
	fmt.Fprintln(r.w, "PASS")
	return 0
}

// printSkips prints "skipped: N" and every skipped test with its message,
// and returns how many are not in the allowed list.
func (r *report) printSkips() (notAllowed int) {
	sort.SliceStable(r.skips, func(i, j int) bool { return r.skips[i].pkg < r.skips[j].pkg })
	fmt.Fprintf(r.w, "skipped: %d\n", len(r.skips))
	for _, s := range r.skips {
		mark := ""
		if !s.allowed {
			notAllowed++
			mark = "  [not in allowed-skips.txt: fails in CI]"
		}
		fmt.Fprintf(r.w, "    %s %s: %s%s\n", s.pkg, s.test, s.msg, mark)
	}
	return notAllowed
}
