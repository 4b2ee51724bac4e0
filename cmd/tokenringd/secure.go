package main

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/tokenring/tokenring/config"
)

// clusterSecretEnv is the environment variable tokenringd reads the cluster
// secret from when the config leaves cluster_secret empty. It is not a
// flag, so the secret never shows in ps.
const clusterSecretEnv = "TOKENRING_CLUSTER_SECRET"

// withEnvSecret returns cfg with cluster_secret taken from
// TOKENRING_CLUSTER_SECRET when the config leaves it empty, checked like
// the config's own (at least config.MinSecretLen bytes; the secret itself
// is never echoed).
func withEnvSecret(cfg config.Config, getenv func(string) string) (config.Config, error) {
	if cfg.ClusterSecret != "" {
		return cfg, nil
	}
	s := getenv(clusterSecretEnv)
	if s == "" {
		return cfg, nil
	}
	if len(s) < config.MinSecretLen {
		return cfg, fmt.Errorf("%w: %s: must be at least %d bytes, got %d", errUsage, clusterSecretEnv, config.MinSecretLen, len(s))
	}
	cfg.ClusterSecret = s
	return cfg, nil
}

// protect applies TOKENRING_CLUSTER_SECRET to cfg and checks protected
// mode (checkProtected) with the system resolver.
func protect(ctx context.Context, f flags, cfg config.Config, getenv func(string) string) (config.Config, error) {
	cfg, err := withEnvSecret(cfg, getenv)
	if err != nil {
		return cfg, err
	}
	return cfg, checkProtected(ctx, f, cfg, net.DefaultResolver.LookupIP)
}

// clusterSecrets returns the secrets every subsystem accepts, the one to
// send and sign with first: [cluster_secret, cluster_secret_secondary],
// without the secondary when it is empty; nil without a cluster secret.
func clusterSecrets(cfg config.Config) [][]byte {
	if cfg.ClusterSecret == "" {
		return nil
	}
	s := [][]byte{[]byte(cfg.ClusterSecret)}
	if cfg.ClusterSecretSecondary != "" {
		s = append(s, []byte(cfg.ClusterSecretSecondary))
	}
	return s
}

// lookupIP resolves a host name to its addresses.
type lookupIP func(ctx context.Context, network, host string) ([]net.IP, error)

// checkProtected is protected mode, port by port: a non-loopback -peer or
// -gossip needs a cluster secret (without one the peer protocol and gossip
// are plaintext and unauthenticated), a non-loopback -http or -grpc (or
// grpc.addr) needs its callers authenticated (httpAuthenticated). Unless -insecure, a node with
// any port exposed without its guard refuses to start with a usage error
// naming each such port and its fix. An empty host, 0.0.0.0 and :: are
// every interface: not loopback.
func checkProtected(ctx context.Context, f flags, cfg config.Config, lookup lookupIP) error {
	if f.insecure {
		return nil
	}
	var exposed []string
	for _, l := range []struct {
		flag, addr string
		guarded    bool
		fix        string
	}{
		{"-http", f.http, httpAuthenticated(cfg), "set client tokens under clients: or a client CA (http.tls.client_ca_file)"},
		{"-peer", f.peer, cfg.ClusterSecret != "", "set cluster_secret in the config (or " + clusterSecretEnv + ")"},
		{"-gossip", f.gossip, cfg.ClusterSecret != "", "set cluster_secret in the config (or " + clusterSecretEnv + ")"},
		{"-grpc", grpcAddr(f, cfg), httpAuthenticated(cfg), "set client tokens under clients: or a client CA (http.tls.client_ca_file)"},
	} {
		if l.addr == "" || l.guarded {
			continue // -peer's default: 127.0.0.1, a free port
		}
		loop, err := isLoopback(ctx, l.addr, lookup)
		if err != nil {
			return fmt.Errorf("%w: %s %s: %v", errUsage, l.flag, l.addr, err)
		}
		if !loop {
			exposed = append(exposed, fmt.Sprintf("%s %s is not loopback and unauthenticated: %s", l.flag, l.addr, l.fix))
		}
	}
	if len(exposed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: protected mode: %s; or pass -insecure (TOKENRING_INSECURE=true) to run unprotected",
		errUsage, strings.Join(exposed, "; "))
}

// httpAuthenticated reports whether the decision API authenticates its
// callers, which a non-loopback -http needs: clients: entries (tokens or
// certificates), or a TLS client CA, which refuses every connection
// without a certificate it issued (with clients: empty, any such
// certificate may act for every tenant).
func httpAuthenticated(cfg config.Config) bool {
	return len(cfg.Clients) > 0 || cfg.HTTP.TLS.ClientCAFile != ""
}

// isLoopback reports whether every address addr ("host:port") binds to is
// a loopback one. An empty host, 0.0.0.0 and :: are every interface; a
// host name is loopback only when every address it resolves to is.
func isLoopback(ctx context.Context, addr string, lookup lookupIP) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	ips, err := lookup(ctx, "ip", host)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return false, nil
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false, nil
		}
	}
	return true, nil
}
