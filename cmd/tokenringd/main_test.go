package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
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
	// One real request: an acquire on the default limits is admitted, with
	// a lease, the reservation and one request and one slot counted.
	m := regexp.MustCompile(`msg="tokenringd serving" .*\bhttp=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no http address in the serving log:\n%s", logs.String())
	}
	resp, err := http.Post("http://"+m[1]+"/v1/acquire", "application/json",
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
