package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// buildAll compiles the demo, tokenringd and fakellm into a temporary
// directory, as make demo's build does into bin/.
func buildAll(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes: not in -short")
	}
	dir := t.TempDir()
	if err := buildBinaries(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "demo"), ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build the demo: %v\n%s", err, out)
	}
	return dir
}

// runDemo runs the demo binary in dir with args, bounded, and returns its
// output (stdout and stderr) and exit code.
func runDemo(t *testing.T, dir string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "demo"), append([]string{"-bin", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case ctx.Err() != nil:
		t.Fatalf("the demo ran over 90s:\n%s", out)
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return "", -1
}

// pidRE finds the processes the demo says it started.
var pidRE = regexp.MustCompile(`(?m)^(\S+)\s+pid (\d+)`)

// assertAllGone checks that every process the demo's output names is gone,
// and returns how many it names.
func assertAllGone(t *testing.T, out string) int {
	t.Helper()
	ms := pidRE.FindAllStringSubmatch(out, -1)
	for _, m := range ms {
		pid, _ := strconv.Atoi(m[2])
		if !gone(pid) {
			t.Errorf("%s (pid %d) outlived the demo", m[1], pid)
		}
	}
	return len(ms)
}

// The demo runs end to end: every step's facts are in its output, it exits
// 0 within its bound, and nothing it started is left.
func TestDemo(t *testing.T) {
	dir := buildAll(t)
	t0 := time.Now()
	out, code := runDemo(t, dir)
	if code != 0 {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
	if took := time.Since(t0); took > 60*time.Second {
		t.Errorf("the demo took %v, want at most 60s", took)
	}
	for _, want := range []string{
		// 1. start
		"fakellm  pid", "n1       pid", "n2       pid", "n3       pid", "every node sees the same 3 members",
		// 2. admits
		`< 200 OK  {"allowed":true`, "requests 0/3, tokens 9550/10000, concurrency 7/10 left",
		// 3. the 429, on the decision API and through the proxy
		`< 429 Too Many Requests  {"allowed":false,"reason":"requests"`, "    Retry-After: ",
		`"code":"rate_limit_exceeded"`, "    Retry-After-Ms: ", "    X-Ratelimit-Limit-Requests: 3",
		"    X-Ratelimit-Remaining-Requests: 0", "    RateLimit-Policy: ", "the upstream was not called",
		// 4. the stream and its settle
		"Content-Type: text/event-stream", `data: {chunk: delta {"content":"Hello"}}`,
		`usage {"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}`, "data: [DONE]",
		"settled to the usage: 100000 - 15 = 99985 tokens left, slot freed",
		// 5. the ring and an owner
		"GET /admin/ring", "3 members own the 271 partitions", "GET /admin/owner?tenant=", "every node agrees",
		// 6. the join
		"n4       pid", "every node sees 4 members", "4 members own the 271 partitions", `"owner":"n4"`,
		"on n4: requests 0/3, tokens 9550/10000, concurrency 7/10 left (unchanged)", "n4 refuses",
		// 7. the stop
		"n4       exited after", "n1       exited after", "fakellm  exited after",
		"all 5 processes stopped; none is left running", "demo done in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if n := assertAllGone(t, out); n != 5 {
		t.Errorf("the output names %d processes, want 5", n)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// A demo that cannot finish fails loudly, with the reason, and still stops
// everything it started. Its tokenringd is a stand-in that never becomes
// ready, so the -timeout is the only way out however fast the machine is.
func TestDemoFailsLoudly(t *testing.T) {
	dir := buildAll(t)
	never := "#!/bin/sh\n# a tokenringd that never answers /readyz\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(dir, "tokenringd"), []byte(never), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := runDemo(t, dir, "-timeout", "1500ms")
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{"demo: FAILED:", "the demo took longer than -timeout 1.5s", "Stop: SIGTERM"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	// fakellm and n1 at least: n1 must be up before the others start.
	if n := assertAllGone(t, out); n < 2 {
		t.Errorf("the output names %d started processes, want fakellm and n1 at least:\n%s", n, out)
	}
}
