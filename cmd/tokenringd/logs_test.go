package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkJSONLines: every line of logs is a JSON object with time, level
// and msg; it returns them.
func checkJSONLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Errorf("not a JSON line: %v\n%s", err, sc.Text())
			continue
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := l[k].(string); !ok {
				t.Errorf("line without a string %q: %s", k, sc.Text())
			}
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		t.Fatal("no log lines")
	}
	return lines
}

// -log-format json (or log.format: json) writes every line, from the
// start to the stop, as a JSON object with slog's time, level and msg and
// the key-value fields the logfmt lines carry (the serving line's http,
// peer and gossip addresses; the child loggers' component).
func TestJSONLogs(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfgFile, []byte("log: {format: json}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"flag":   {"-log-format", "json"},
		"config": {"-config", cfgFile},
	} {
		t.Run(name, func(t *testing.T) {
			args = append(args, "-name", "solo", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
			base, logs, stop := startDaemon(t, args...)
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err := stop(); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			var serving, stopped, component bool
			for _, l := range checkJSONLines(t, logs.String()) {
				switch l["msg"] {
				case "tokenringd serving":
					serving = l["level"] == "INFO" && l["http"] != nil && l["peer"] != nil && l["gossip"] != nil
				case "stopped":
					stopped = true
				}
				component = component || l["component"] != nil
			}
			if !serving || !stopped || !component {
				t.Errorf("want an INFO serving line with http, peer and gossip (%v), a stopped line (%v) and a component field (%v):\n%s", serving, stopped, component, logs)
			}
		})
	}
}

// The default stays logfmt; an unknown format is a usage error, from the
// flag or the config.
func TestLogFormats(t *testing.T) {
	_, logs, stop := startDaemon(t, "-name", "solo", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(logs.String(), "\n"); !strings.HasPrefix(first, "time=") {
		t.Errorf("default log line is not logfmt: %s", first)
	}
	err := run(context.Background(), []string{"-log-format", "xml", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, env(nil), io.Discard)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "log.format") {
		t.Errorf("-log-format xml: %v, want a usage error naming log.format", err)
	}
	cfgFile := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfgFile, []byte("log: {format: xml}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"-config", cfgFile, "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "log.format") {
		t.Errorf("log.format: xml: %v, want an error naming log.format", err)
	}
}
