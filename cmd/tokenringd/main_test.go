package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
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
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncWriter{w: &bytes.Buffer{}}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-name", "solo", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local"}, env(nil), logs)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "tokenringd serving") {
		select {
		case err := <-done:
			t.Fatalf("exited early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
