// Command testreport runs `go test -json` (or reads its output on stdin)
// and prints what a developer needs, about as plain `go test` would: the
// output of every failed test, build errors, one line per package (ok,
// FAIL, ? with its time), and then a summary: the failed tests, and
// "skipped: N" with every skipped test and its skip message.
//
//	go run ./scripts/testreport -- -race -count=1 ./...
//	go test -json ./limiter/ | go run ./scripts/testreport
//
// With arguments (after --, or after the flags), it runs `$GO test -json
// ARGS` itself, so that its exit status is right with no pipeline:
//
//	0  every test passed (or skipped, see below) and go test exited 0;
//	1  a test or a package failed, a package did not build, go test
//	   exited non-zero, or (with -ci) a test skipped that is not listed in
//	   allowed-skips.txt;
//	2  a usage error, an unreadable allowed-skips list, or go test could
//	   not be started.
//
// In CI (-ci, by default when the environment has CI=true) a skip is a
// failure unless allowed-skips.txt (embedded; -allowed to read another
// file) lists it, with the reason it may skip there: one skip a line,
//
//	package TestName  reason
//
// where package is the import path relative to the module (node, test,
// cmd/tokenringd) and TestName the full name of the test (a subtest as
// TestA/sub; TestA/* for every subtest of TestA). A CI run must not skip
// silently: a test that needs a tool skips on a laptop without it, and CI
// installs the tool (.ci/run).
//
// Without arguments it reads the events on stdin; then nothing tells it
// go test's own exit status, and it fails if the input held no package's
// result at all. `make test` runs it.
package main

import (
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
)

//go:embed allowed-skips.txt
var allowedSkips string

func main() {
	os.Exit(exitCode(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// exitCode runs the command with args and returns its exit status.
func exitCode(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("testreport", flag.ContinueOnError)
	flags.SetOutput(stderr)
	goCmd := flags.String("go", "go", "the go command to run go test with")
	ci := flags.Bool("ci", os.Getenv("CI") == "true", "fail on a skip not in the allowed list (default: the environment has CI=true)")
	allowedFile := flags.String("allowed", "", "read the allowed skips from this `file` instead of the embedded allowed-skips.txt")
	module := flags.String("module", "", "the module path, trimmed from package names (default: read from ./go.mod)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	list := allowedSkips
	if *allowedFile != "" {
		b, err := os.ReadFile(*allowedFile)
		if err != nil {
			fmt.Fprintf(stderr, "testreport: %v\n", err)
			return 2
		}
		list = string(b)
	}
	allowed, err := parseAllowed(list)
	if err != nil {
		fmt.Fprintf(stderr, "testreport: allowed skips: %v\n", err)
		return 2
	}
	if *module == "" {
		*module = modulePath("go.mod")
	}
	r := newReport(stdout, *module, allowed, *ci)
	if flags.NArg() == 0 {
		r.read(stdin)
		return r.finish(-1)
	}
	return runGoTest(r, *goCmd, flags.Args(), stderr)
}

// runGoTest runs goCmd test -json args, reports its events and returns the
// exit status. go test's stderr goes to stderr as it comes. An interrupt
// (Ctrl-C) reaches go test, which stops its tests and reports them; this
// process waits for that and prints its summary.
func runGoTest(r *report, goCmd string, args []string, stderr io.Writer) int {
	cmd := exec.Command(goCmd, append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "testreport: %v\n", err)
		return 2
	}
	r.read(out)
	status := 0
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintf(stderr, "testreport: %s test: %v\n", goCmd, err)
			return 2
		}
		status = exit.ExitCode()
		if status < 0 { // killed by a signal
			status = 128
		}
	}
	return r.finish(status)
}

// modulePath returns the module path declared in the go.mod at path, or ""
// if there is none.
func modulePath(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
