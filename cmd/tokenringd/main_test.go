package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/prompt"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagsFromEnv(t *testing.T) {
	f, err := parseFlags([]string{"-name", "cli"}, env(map[string]string{
		"TOKENRING_NAME":            "env-name",
		"TOKENRING_JOIN":            "127.0.0.1:7001,127.0.0.1:7002",
		"TOKENRING_HTTP":            "127.0.0.1:9999",
		"TOKENRING_PEER_BATCH_WAIT": "250us",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if f.name != "cli" || f.join != "127.0.0.1:7001,127.0.0.1:7002" || f.http != "127.0.0.1:9999" || f.batchWait != 250*time.Microsecond {
		t.Fatalf("flags %+v: the command line must win over env, env over defaults", f)
	}
	if f.gossip != "127.0.0.1:7946" || f.batchMax != 1000 {
		t.Fatalf("defaults lost: %+v", f)
	}
}

func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"-nope"}},
		{args: []string{"extra"}},
		{env: map[string]string{"TOKENRING_PEER_BATCH_MAX": "many"}},
		{args: []string{"-peer-batch-max", "0"}},
	} {
		if _, err := parseFlags(tc.args, env(tc.env), &bytes.Buffer{}); !errors.Is(err, errUsage) {
			t.Errorf("%v %v: err %v, want a usage error", tc.args, tc.env, err)
		}
	}
}

// The daemon refuses to start on a bad config and names the field.
func TestBadConfigRefusesToStart(t *testing.T) {
	for _, tc := range []struct{ yaml, field string }{
		{"limits:\n  default: {rpm: -5}\n", "limits.default.rpm"},
		{"limits:\n  window: 5x\n", "limits.window"},
		{"fallback: maybe\n", "fallback"},
		{"limitz: {}\n", "limitz"},
	} {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		err := run(context.Background(), []string{"-config", path, "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, env(nil), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("config %q: err %v, want one naming %s", tc.yaml, err, tc.field)
		}
	}
}

// With no config the daemon starts on built-in defaults, serves, and stops
// cleanly when its context ends (SIGTERM in production).
func TestRunsOnDefaultsAndStops(t *testing.T) {
	base, _, stop := startDaemon(t, "-name", "solo", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	// One real request: an acquire on the default limits is admitted, with
	// a lease, the reservation and one request and one slot counted.
	resp, err := http.Post(base+"/v1/acquire", "application/json",
		strings.NewReader(`{"tenant":"acme","prompt_tokens":10,"max_tokens":5}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: %d %s %v", resp.StatusCode, body, err)
	}
	var got struct {
		Allowed        bool   `json:"allowed"`
		Lease          string `json:"lease"`
		ReservedTokens int64  `json:"reserved_tokens"`
		Limits         struct {
			Requests, Tokens, Concurrency struct{ Limit, Remaining int64 }
		} `json:"limits"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("acquire answer %s: %v", body, err)
	}
	l := got.Limits
	if !got.Allowed || got.Lease == "" || got.ReservedTokens != 15 ||
		l.Requests.Limit != config.DefaultRPM || l.Requests.Remaining != config.DefaultRPM-1 ||
		l.Tokens.Limit != config.DefaultTPM || l.Tokens.Remaining != config.DefaultTPM-15 ||
		l.Concurrency.Limit != config.DefaultConcurrency || l.Concurrency.Remaining != config.DefaultConcurrency-1 {
		t.Fatalf("acquire on the defaults answered %s, want allowed with a lease, 15 tokens reserved, one request and one slot counted", body)
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// syncWriter is a log sink safe to read while the daemon writes.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// redisLogs is where go-redis logs in these tests: main's quietRedis at the
// default level, as tokenringd runs.
var redisLogs syncWriter

func TestMain(m *testing.M) {
	redisLogs.w = &bytes.Buffer{}
	quietRedis(nil, env(nil), &redisLogs)
	goleak.VerifyTestMain(m)
}

// go-redis's lines go through slog at debug: shown with -log-level debug,
// dropped otherwise.
func TestRedisLogsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	redisLogger{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts\n", 5)
	if got := buf.String(); !strings.Contains(got, `level=DEBUG msg="redis: connection pool: failed to dial after 5 attempts"`) {
		t.Fatalf("logged %q", got)
	}
	buf.Reset()
	redisLogger{slog.New(slog.NewTextHandler(&buf, nil))}.Printf(context.Background(), "dropped")
	if buf.Len() != 0 {
		t.Fatalf("logged %q at the default level", buf.String())
	}
}

// -h prints the usage once and exits 0, with no "help requested" error;
// a bad flag is still a usage error, exit 2.
func TestHelpExitsZero(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), []string{arg}, env(nil), &out)
		if code := exitCode(err, &errOut); code != 0 || errOut.Len() != 0 {
			t.Errorf("%s: exit %d, printed %q; want 0 and nothing more", arg, code, errOut.String())
		}
		if got := strings.Count(out.String(), "Usage of tokenringd"); got != 1 || !strings.Contains(out.String(), "-gossip addr") {
			t.Errorf("%s: usage printed %d times:\n%s", arg, got, out.String())
		}
		if strings.Contains(out.String()+errOut.String(), "help requested") {
			t.Errorf("%s: prints %q", arg, "help requested")
		}
	}
	var errOut bytes.Buffer
	if code := exitCode(run(context.Background(), []string{"-nope"}, env(nil), io.Discard), &errOut); code != 2 || !strings.Contains(errOut.String(), "tokenringd: usage") {
		t.Errorf("-nope: exit %d, printed %q; want 2 and the error", code, errOut.String())
	}
}

// startDaemon runs tokenringd with args in the test and returns its HTTP
// base URL, its logs, and stop, which ends it (as SIGTERM does) and returns
// what run returned; the cleanup stops it if the test did not, and checks
// it stopped cleanly.
func startDaemon(t *testing.T, args ...string) (string, *syncWriter, func() error) {
	t.Helper()
	return startDaemonEnv(t, nil, args...)
}

// startDaemonEnv is startDaemon with environ as the environment.
func startDaemonEnv(t *testing.T, environ map[string]string, args ...string) (string, *syncWriter, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncWriter{w: &bytes.Buffer{}}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, env(environ), logs) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "tokenringd serving") {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("exited early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// logfmt, or json (-log-format json).
	m := regexp.MustCompile(`msg="tokenringd serving" .*\bhttp=(\S+)|"msg":"tokenringd serving".*?"http":"([^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no http address in the serving log:\n%s", logs.String())
	}
	return "http://" + m[1] + m[2], logs, stop
}

// Every label on /metrics has a value: after allowed and refused acquires
// (and a bad request), no series carries an empty label ( x="" ).
func TestMetricsHaveNoEmptyLabels(t *testing.T) {
	base, _, _ := startDaemon(t, "-name", "m", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	post := func(body string) int {
		resp, err := http.Post(base+"/v1/acquire", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	codes := map[int]int{}
	for range config.DefaultConcurrency + 2 { // the last two are refused: no slot left
		codes[post(`{"tenant":"acme","prompt_tokens":10,"max_tokens":5}`)]++
	}
	codes[post(`{"tenant":"","prompt_tokens":-1}`)]++
	if codes[http.StatusOK] != config.DefaultConcurrency || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("answers by status %v, want %d admitted and 2 refused", codes, config.DefaultConcurrency)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tokenring_decisions_total{fallback="false",reason="none",result="allowed",side="none"} 10`,
		`tokenring_decisions_total{fallback="false",reason="concurrency",result="refused",side="tenant"} 2`,
		"\ntokenring_http_conns_refused_total 0\n",
		"\ntokenring_http_conns_open ",
		"\ntokenring_limits_mismatch_members 0\n",
		// every acquire and the bad request, each decided here at once
		fmt.Sprintf("\ntokenring_http_loop_answers_total %d\n", config.DefaultConcurrency+3),
		`tokenring_http_loop_handovers_total{why="declined"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "#") && strings.Contains(line, `=""`) {
			t.Errorf("empty label: %s", line)
		}
	}
}

// Redis is only a checkpoint: with -redis pointing at nothing the node is
// ready and admits, warns about the failing checkpoint once (not every
// round), and logs nothing about it after "stopped".
func TestReadyWithUnreachableRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs *syncWriter
	t.Run("serve", func(t *testing.T) {
		var base string
		base, logs, _ = startDaemon(t, "-name", "r", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local", "-redis", "redis://"+dead)
		waitReadyAt(t, base) // with Redis down
		resp, err := http.Post(base+"/v1/acquire", "application/json", strings.NewReader(`{"tenant":"acme","prompt_tokens":1}`))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("acquire with Redis down: %v %v", resp, err)
		}
		resp.Body.Close()
		time.Sleep(500 * time.Millisecond) // five replication rounds, each failing to checkpoint
	})
	if redisLogs.String() != "" {
		t.Errorf("go-redis logged at the default level:\n%s", redisLogs.String())
	}
	out := logs.String()
	if n := strings.Count(out, "checkpoint failed"); n != 1 {
		t.Errorf("%d checkpoint warnings, want 1:\n%s", n, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "msg=stopped") {
		t.Errorf("last line %q, want stopped:\n%s", last, out)
	}
}

func TestHotKeyRateZeroTurnsSlicesOff(t *testing.T) {
	for in, want := range map[int]int{0: -1, 1: 1, 500: 500} {
		if got := hotKeyRate(in); got != want {
			t.Errorf("hotKeyRate(%d) = %d, want %d (node: negative is off)", in, got, want)
		}
	}
}

// The tiktoken tables are loaded at startup only under preload_encodings;
// by default a node that is never asked to count a prompt never holds them.
func TestEncodingsLoadAtStartupOnlyIfPreloaded(t *testing.T) {
	for _, preload := range []bool{false, true} {
		cfg := config.Default()
		cfg.PreloadEncodings = preload
		c, err := newCounter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{prompt.Cl100kBase, prompt.O200kBase} {
			if got := c.Loaded(name); got != preload {
				t.Errorf("preload_encodings %v: %s loaded %v at startup", preload, name, got)
			}
		}
	}
}
