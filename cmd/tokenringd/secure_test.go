package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/gossip"
)

const testSecret = "0123456789abcdef0123456789abcdef-test" // 37 bytes

// fakeLookup resolves names from m.
func fakeLookup(m map[string][]string) lookupIP {
	return func(_ context.Context, _, host string) ([]net.IP, error) {
		addrs, ok := m[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		var ips []net.IP
		for _, a := range addrs {
			ips = append(ips, net.ParseIP(a))
		}
		return ips, nil
	}
}

// TestProtectedModeRefuses: a non-loopback -http, -peer or -gossip with no
// client tokens and no cluster secret is a usage error (exit 2) naming the
// listener and the ways out.
func TestProtectedModeRefuses(t *testing.T) {
	lookup := fakeLookup(map[string][]string{"public.test": {"127.0.0.1", "10.0.0.7"}})
	for _, tc := range []struct {
		args    []string
		exposed string
	}{
		{[]string{"-http", "0.0.0.0:0", "-gossip", "127.0.0.1:0"}, "-http 0.0.0.0:0"},
		{[]string{"-http", ":8080", "-gossip", "127.0.0.1:0"}, "-http :8080"},
		{[]string{"-http", "127.0.0.1:0", "-gossip", "[::]:7946"}, "-gossip [::]:7946"},
		{[]string{"-http", "127.0.0.1:0", "-peer", "192.168.1.4:7000", "-gossip", "127.0.0.1:0"}, "-peer 192.168.1.4:7000"},
		{[]string{"-http", "public.test:80", "-gossip", "127.0.0.1:0"}, "-http public.test:80"},
	} {
		f, err := parseFlags(tc.args, env(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		err = checkProtected(context.Background(), f, config.Default(), lookup)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.exposed+" not loopback") ||
			!strings.Contains(err.Error(), "cluster_secret") || !strings.Contains(err.Error(), "clients:") ||
			!strings.Contains(err.Error(), "-insecure") {
			t.Errorf("%v: err %v, want a usage error naming %q and the fixes", tc.args, err, tc.exposed)
		}
	}
	// The whole daemon: exit status 2, before listening on anything. (The
	// context is already done, so that a daemon that wrongly starts stops
	// at once.)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	err := run(ctx, []string{"-http", "0.0.0.0:0", "-gossip", "127.0.0.1:0"}, env(nil), &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "protected mode") {
		t.Errorf("run on 0.0.0.0: exit %d, %q", code, stderr.String())
	}
}

// TestProtectedModeAllows: loopback binds, -insecure (or
// TOKENRING_INSECURE), a cluster secret (config or environment) or client
// tokens each let a node start.
func TestProtectedModeAllows(t *testing.T) {
	lookup := fakeLookup(map[string][]string{"localhost": {"127.0.0.1", "::1"}})
	exposed := []string{"-http", "0.0.0.0:0", "-gossip", "0.0.0.0:0"}
	withClients := config.Default()
	withClients.Clients = map[string]config.Client{"tok": {Tenants: []string{"*"}}}
	withSecret := config.Default()
	withSecret.ClusterSecret = testSecret
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		cfg  config.Config
	}{
		{"loopback", []string{"-http", "127.0.0.1:0", "-peer", "[::1]:0", "-gossip", "localhost:0"}, nil, config.Default()},
		{"-insecure", append(exposed, "-insecure"), nil, config.Default()},
		{"TOKENRING_INSECURE", exposed, map[string]string{"TOKENRING_INSECURE": "true"}, config.Default()},
		{"clients", exposed, nil, withClients},
		{"cluster_secret", exposed, nil, withSecret},
		{"TOKENRING_CLUSTER_SECRET", exposed, map[string]string{"TOKENRING_CLUSTER_SECRET": testSecret}, config.Default()},
	} {
		f, err := parseFlags(tc.args, env(tc.env), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := withEnvSecret(tc.cfg, env(tc.env))
		if err == nil {
			err = checkProtected(context.Background(), f, cfg, lookup)
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestClusterSecretFromEnv(t *testing.T) {
	short := "too-short-secret"
	_, err := withEnvSecret(config.Default(), env(map[string]string{clusterSecretEnv: short}))
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "got 16") || strings.Contains(err.Error(), short) {
		t.Errorf("short secret: %v", err)
	}
	cfg := config.Default()
	cfg.ClusterSecret = strings.Repeat("c", 32)
	got, err := withEnvSecret(cfg, env(map[string]string{clusterSecretEnv: testSecret}))
	if err != nil || got.ClusterSecret != cfg.ClusterSecret {
		t.Errorf("the config's secret must win: %q, %v", got.ClusterSecret, err)
	}
	if s := clusterSecrets(config.Default()); s != nil {
		t.Errorf("clusterSecrets without a secret = %q", s)
	}
	cfg.ClusterSecretSecondary = strings.Repeat("d", 32)
	if s := clusterSecrets(cfg); len(s) != 2 || string(s[0]) != cfg.ClusterSecret || string(s[1]) != cfg.ClusterSecretSecondary {
		t.Errorf("clusterSecrets = %q, want [primary secondary]", s)
	}
}

// TestDaemonGossipUsesSecret: a daemon with TOKENRING_CLUSTER_SECRET
// refuses a gossip member without it, admits one with it, and publishes
// its config's limits hash.
func TestDaemonGossipUsesSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("limits: {default: {rpm: 7}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, logs, _ := startDaemonEnv(t, map[string]string{clusterSecretEnv: testSecret},
		"-config", path, "-name", "d1", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	m := regexp.MustCompile(`msg="tokenringd serving" .*\bgossip=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no gossip address in the logs:\n%s", logs.String())
	}
	member := func(name string, secrets [][]byte) gossip.Config {
		g := gossip.DefaultLocalConfig()
		g.Name, g.Join, g.Secrets = name, []string{m[1]}, secrets
		g.JoinRetries, g.JoinRetryInterval = 1, 50*time.Millisecond
		g.Meta = gossip.Meta{HTTP: "127.0.0.1:1", Peer: "127.0.0.1:2"}
		return g
	}
	if c, err := gossip.Start(member("rogue", nil)); err == nil {
		_ = c.Shutdown()
		t.Fatal("a member without the secret joined")
	}
	c, err := gossip.Start(member("friend", [][]byte{[]byte(testSecret)}))
	if err != nil {
		t.Fatalf("a member with the secret: %v", err)
	}
	defer func() { _ = c.Shutdown() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var names []string
		var hash string
		for _, ms := range c.Members() {
			names = append(names, ms.Name)
			if ms.Name == "d1" {
				hash = ms.Meta.LimitsHash
			}
		}
		if slices.Equal(names, []string{"d1", "friend"}) && hash == cfg.LimitsHash() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v, d1's limits hash %q; want [d1 friend] and %q", names, hash, cfg.LimitsHash())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
