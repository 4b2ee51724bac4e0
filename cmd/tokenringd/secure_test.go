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

// TestProtectedModePerPort: each port is judged by its own guard: a
// non-loopback -peer or -gossip needs cluster_secret, a non-loopback -http
// client tokens or a client CA (server TLS alone is no guard); a port
// exposed without its guard is a usage error (exit 2) naming that port and
// its fix, and only that port; -insecure (or TOKENRING_INSECURE)
// overrides; 0.0.0.0, :: and an empty host are not loopback, nor is a name
// resolving to any non-loopback address.
func TestProtectedModePerPort(t *testing.T) {
	lookup := fakeLookup(map[string][]string{"public.test": {"127.0.0.1", "10.0.0.7"}, "localhost": {"127.0.0.1", "::1"}})
	clients := config.Default()
	clients.Clients = map[string]config.Client{"tok": {Tenants: []string{"*"}}}
	secret := config.Default()
	secret.ClusterSecret = testSecret
	both := secret
	both.Clients = clients.Clients
	clientCA := config.Default() // mutual TLS: every caller holds a certificate the CA issued
	clientCA.HTTP.TLS = config.TLS{CertFile: "tls.crt", KeyFile: "tls.key", ClientCAFile: "ca.crt"}
	serverTLS := config.Default() // TLS without a client CA authenticates nobody
	serverTLS.HTTP.TLS = config.TLS{CertFile: "tls.crt", KeyFile: "tls.key"}
	grpcAddr := config.Default()
	grpcAddr.GRPC.Addr = ":8081"
	const fixSecret, fixClients = "set cluster_secret in the config (or TOKENRING_CLUSTER_SECRET)", "set client tokens under clients: or a client CA (http.tls.client_ca_file)"
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		cfg     config.Config
		exposed []string // "-flag addr" refused, each with its fix; none: starts
		fixes   []string
	}{
		{"all loopback", []string{"-http", "127.0.0.1:0", "-peer", "[::1]:0", "-gossip", "localhost:0"}, nil, config.Default(), nil, nil},
		{"http 0.0.0.0", []string{"-http", "0.0.0.0:0", "-gossip", "127.0.0.1:0"}, nil, config.Default(), []string{"-http 0.0.0.0:0"}, []string{fixClients}},
		{"http empty host", []string{"-http", ":8080", "-gossip", "127.0.0.1:0"}, nil, config.Default(), []string{"-http :8080"}, []string{fixClients}},
		{"http name with a public address", []string{"-http", "public.test:80", "-gossip", "127.0.0.1:0"}, nil, config.Default(), []string{"-http public.test:80"}, []string{fixClients}},
		{"gossip ::", []string{"-http", "127.0.0.1:0", "-gossip", "[::]:7946"}, nil, config.Default(), []string{"-gossip [::]:7946"}, []string{fixSecret}},
		{"peer private", []string{"-http", "127.0.0.1:0", "-peer", "192.168.1.4:7000", "-gossip", "127.0.0.1:0"}, nil, config.Default(), []string{"-peer 192.168.1.4:7000"}, []string{fixSecret}},
		// The case: tokens, no secret, peer and gossip on every interface.
		{"clients guard http only", []string{"-http", "0.0.0.0:0", "-peer", "0.0.0.0:0", "-gossip", "0.0.0.0:0"}, nil, clients,
			[]string{"-peer 0.0.0.0:0", "-gossip 0.0.0.0:0"}, []string{fixSecret, fixSecret}},
		{"secret guards peer and gossip only", []string{"-http", "0.0.0.0:0", "-peer", "0.0.0.0:0", "-gossip", "0.0.0.0:0"}, nil, secret,
			[]string{"-http 0.0.0.0:0"}, []string{fixClients}},
		{"env secret guards peer and gossip", []string{"-http", "127.0.0.1:0", "-peer", "0.0.0.0:0", "-gossip", "0.0.0.0:0"},
			map[string]string{"TOKENRING_CLUSTER_SECRET": testSecret}, config.Default(), nil, nil},
		{"both guards", []string{"-http", "0.0.0.0:0", "-peer", "0.0.0.0:0", "-gossip", "0.0.0.0:0"}, nil, both, nil, nil},
		{"client CA guards http", []string{"-http", "0.0.0.0:0", "-gossip", "127.0.0.1:0"}, nil, clientCA, nil, nil},
		{"server TLS alone does not", []string{"-http", "0.0.0.0:0", "-gossip", "127.0.0.1:0"}, nil, serverTLS, []string{"-http 0.0.0.0:0"}, []string{fixClients}},
		{"clients and loopback cluster ports", []string{"-http", "0.0.0.0:0", "-peer", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, nil, clients, nil, nil},
		{"-insecure", []string{"-http", "0.0.0.0:0", "-peer", "0.0.0.0:0", "-gossip", "0.0.0.0:0", "-insecure"}, nil, config.Default(), nil, nil},
		{"TOKENRING_INSECURE", []string{"-http", "0.0.0.0:0", "-gossip", "0.0.0.0:0"}, map[string]string{"TOKENRING_INSECURE": "true"}, config.Default(), nil, nil},
		{"grpc 0.0.0.0", []string{"-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-grpc", "0.0.0.0:8081"}, nil, config.Default(), []string{"-grpc 0.0.0.0:8081"}, []string{fixClients}},
		{"grpc.addr", []string{"-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, nil, grpcAddr, []string{"-grpc :8081"}, []string{fixClients}},
		{"clients guard grpc", []string{"-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-grpc", "0.0.0.0:8081"}, nil, clients, nil, nil},
	} {
		f, err := parseFlags(tc.args, env(tc.env), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := withEnvSecret(tc.cfg, env(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		err = checkProtected(context.Background(), f, cfg, lookup)
		if len(tc.exposed) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want it to start", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "protected mode") || !strings.Contains(err.Error(), "-insecure") {
			t.Errorf("%s: err %v, want a protected mode usage error", tc.name, err)
			continue
		}
		for i, e := range tc.exposed {
			if want := e + " is not loopback and unauthenticated: " + tc.fixes[i]; !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err %v, want it to say %q", tc.name, err, want)
			}
		}
		for _, flag := range []string{"-http", "-peer", "-gossip", "-grpc"} {
			named := strings.Count(err.Error(), flag+" ")
			want := 0
			for _, e := range tc.exposed {
				if strings.HasPrefix(e, flag+" ") {
					want++
				}
			}
			if named != want {
				t.Errorf("%s: err %v names %s %d times, want %d", tc.name, err, flag, named, want)
			}
		}
	}
}

// TestProtectedModeExits: the whole daemon exits with status 2 before
// listening on anything. (The context is already done, so that a daemon
// that wrongly starts stops at once.)
func TestProtectedModeExits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stderr bytes.Buffer
	err := run(ctx, []string{"-http", "0.0.0.0:0", "-gossip", "127.0.0.1:0"}, env(nil), &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "protected mode") {
		t.Errorf("run on 0.0.0.0: exit %d, %q", code, stderr.String())
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
