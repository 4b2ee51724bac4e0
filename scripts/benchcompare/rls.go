package main

// Envoy's external rate limit service, side by side: envoyproxy/ratelimit
// itself (its service_cmd, built from its Go module by scripts/rlsref) on
// a redis-server of its own, and tokenringd's gRPC server, reading the same
// config file and driven by the same load (`tokenring load -system rls`:
// gRPC ShouldRateLimit, its requests made from that file). The
// reference's CPU is its own and its redis-server's.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// rlsConfigYAML is the config both servers read, in envoyproxy/ratelimit's
// format: per-tenant limits, a wildcard tier and the default, each tenant
// a counter of its own, and per-route limits over all tenants. The load
// sends two descriptors a call, (tenant, NAME) and (route, PATH): half the
// tenants are ent-* (`tokenring load` spreads them over the tenant key's
// rules), each route half the calls. Embeddings' 2,000 a second and the
// other tenants' 60 a minute are what a run of a few seconds exceeds, the
// more the faster it goes.
const rlsConfigYAML = `domain: llm-gateway
descriptors:
  # Enterprise tenants: each its own 60,000 requests a minute.
  - key: tenant
    value: "ent-*"
    rate_limit: {unit: minute, requests_per_unit: 60000}
  # Every other tenant: each its own 60 a minute.
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60}
  # Each route, all tenants together.
  - key: route
    value: /v1/chat/completions
    rate_limit: {unit: second, requests_per_unit: 20000}
  - key: route
    value: /v1/embeddings
    rate_limit: {unit: second, requests_per_unit: 2000}
`

// rlsTenants and rlsConns are the load's tenants and gRPC connections
// (the workers, -workers, take the connections in turn).
const (
	rlsTenants = 1000
	rlsConns   = 4
)

// rlsSubdir and rlsAppDir place the config file under the reference's
// RUNTIME_ROOT: it reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
const (
	rlsSubdir = "ratelimit"
	rlsAppDir = "config"
)

// tokenringRLSConfig is tokenringd's config file for its RLS runs: limits
// its own API's calls never reach, and its gRPC service reading the
// directory of the reference's config files.
func tokenringRLSConfig(filesDir string) string {
	return limitsYAML + fmt.Sprintf("rls:\n  config_dir: %s\n", filesDir)
}

// tokenringServesRLS reports whether bin's tokenringd has its gRPC server
// (its usage lists -grpc).
func tokenringServesRLS(bin string) bool {
	out, _ := exec.Command(filepath.Join(bin, "tokenringd"), "-h").CombinedOutput()
	return strings.Contains(string(out), "-grpc")
}

// rlsBench is the stage's files and the reference's servers.
type rlsBench struct {
	o     options
	root  string // the reference's RUNTIME_ROOT
	file  string // the config file, under it
	cfg   string // tokenringd's config file
	redis *server
	ref   *server // its addr is its gRPC address
}

// startRLSBench writes the config yaml under dir and starts a redis-server
// and the reference on it.
func (o options) startRLSBench(ctx context.Context, dir, yaml string) (*rlsBench, error) {
	b := &rlsBench{o: o, root: filepath.Join(dir, "rls")}
	files := filepath.Join(b.root, rlsSubdir, rlsAppDir)
	if err := os.MkdirAll(files, 0o700); err != nil {
		return nil, err
	}
	b.file = filepath.Join(files, "llm-gateway.yaml")
	if err := os.WriteFile(b.file, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	b.cfg = filepath.Join(dir, "rls-tokenring.yaml")
	if err := os.WriteFile(b.cfg, []byte(tokenringRLSConfig(files)), 0o600); err != nil {
		return nil, err
	}
	var err error
	if b.redis, err = startRedis(ctx, o.redisServer); err != nil {
		return nil, err
	}
	if b.ref, err = startReference(ctx, o.ratelimit, b.root, b.redis.addr); err != nil {
		b.redis.stop()
		return nil, err
	}
	return b, nil
}

func (b *rlsBench) stop() { servers{b.redis, b.ref}.stop() }

// loadArgs are the load's flags against the service at addr, run k.
func (b *rlsBench) loadArgs(addr string, k int) []string {
	return []string{"-system", "rls", "-rls", addr, "-rls-config", b.file, "-conns", strconv.Itoa(min(rlsConns, b.o.workers)),
		"-tenants", strconv.Itoa(rlsTenants), "-prefix", repeatPrefix("rls-", k)}
}

// referenceRun is a run against the reference, its counters flushed
// first, measuring its CPU and its redis-server's; more are added to the
// load's flags.
func (b *rlsBench) referenceRun(ctx context.Context, label string, k int, more ...string) (measured, error) {
	if err := redisInline(b.redis.addr, "FLUSHALL", "+OK"); err != nil {
		return measured{}, err
	}
	m, err := b.o.loadOnce(ctx, label, []int{b.ref.pid(), b.redis.pid()}, append(b.loadArgs(b.ref.addr, k), more...)...)
	return m, servers{b.redis, b.ref}.explain(err)
}

// tokenringRun is a run against one tokenringd node started for it with
// its gRPC server on.
func (b *rlsBench) tokenringRun(ctx context.Context, label string, k int) (measured, error) {
	grpcAddr, err := freeAddr()
	if err != nil {
		return measured{}, err
	}
	node, _, err := startMember(ctx, b.o.bin, b.cfg, "rls1", "", "-grpc", grpcAddr)
	if err != nil {
		return measured{}, err
	}
	defer node.stop()
	m, err := b.o.loadOnce(ctx, label, []int{node.pid()}, b.loadArgs(grpcAddr, k)...)
	return m, servers{node}.explain(err)
}

// rlsStage runs the reference and, when its tokenringd has the gRPC
// server, tokenring, in alternating runs.
func (o options) rlsStage(ctx context.Context, dir string, r *report) error {
	b, err := o.startRLSBench(ctx, dir, rlsConfigYAML)
	if err != nil {
		return err
	}
	defer b.stop()
	r.rlsRan = true
	runs := []alternated{{"Envoy RLS: envoyproxy/ratelimit + redis-server", &r.rlsRef, func(label string, k int) (measured, error) {
		return b.referenceRun(ctx, label, k)
	}}}
	if tokenringServesRLS(o.bin) {
		runs = append(runs, alternated{"Envoy RLS: tokenring 1 node", &r.rlsTokenring, func(label string, k int) (measured, error) {
			return b.tokenringRun(ctx, label, k)
		}})
	} else {
		r.rlsPending = "pending: " + filepath.Join(o.bin, "tokenringd") + " has no -grpc"
	}
	return o.alternate(runs)
}

// startReference starts envoyproxy/ratelimit (bin) on loopback ports,
// counting in the redis-server at redisAddr and reading the config files
// under root, and waits until its health check says it has loaded them.
// The server's address is its gRPC one. Its settings are its defaults
// (a pool of 10 Redis connections, no pipelining window, no local cache)
// but for the addresses and stats (off: no statsd to send them to). It
// listens with SO_REUSEPORT: a port found free is taken anyway, but by
// the time it binds another process may hold it; one that exits on
// "address already in use" is started again on other ports, up to twice.
func startReference(ctx context.Context, bin, root, redisAddr string) (*server, error) {
	for try := 0; ; try++ {
		var addrs [3]string // gRPC, HTTP, debug
		for i := range addrs {
			a, err := freeAddr()
			if err != nil {
				return nil, err
			}
			addrs[i] = a
		}
		s, err := startServerEnv("envoyproxy/ratelimit", addrs[0], referenceEnv(root, redisAddr, addrs), bin)
		if err != nil {
			return nil, err
		}
		err = waitFor(ctx, s, 20*time.Second, func() bool { return httpOK("http://" + addrs[1] + "/healthcheck") })
		if err == nil {
			return s, nil
		}
		s.stop()
		if try == 2 || !strings.Contains(err.Error(), "address already in use") {
			return nil, err
		}
	}
}

// referenceEnv is the reference's environment (its settings package): the
// gRPC, HTTP and debug addresses, Redis over TCP, the config files under
// root (read once: no symlink swap watched), healthy only once they are
// loaded, no stats sink, warnings only.
func referenceEnv(root, redisAddr string, addrs [3]string) []string {
	env := []string{
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redisAddr,
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=" + rlsSubdir, "RUNTIME_APPDIRECTORY=" + rlsAppDir, "RUNTIME_WATCH_ROOT=false",
		"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
	}
	for i, prefix := range []string{"GRPC_", "", "DEBUG_"} { // GRPC_HOST, GRPC_PORT, HOST, PORT, ...
		host, port, _ := net.SplitHostPort(addrs[i])
		env = append(env, prefix+"HOST="+host, prefix+"PORT="+port)
	}
	return env
}

// writeRLS prints the Envoy rate limit service table: each server's run,
// and tokenring's ratios to the reference, taken round by round.
func (r *report) writeRLS(w io.Writer) {
	if !r.rlsRan {
		return
	}
	fmt.Fprintf(w, "\nEnvoy's rate limit service: gRPC ShouldRateLimit, the same config file, two descriptors a call (tenant, route) over %s tenants, %d workers on %d connections\n",
		thousands(rlsTenants), r.workers, min(rlsConns, r.workers))
	fmt.Fprintln(w, "| server | decisions/s | OK | OVER_LIMIT | p50 | p99 | server CPU µs/decision | CPU stolen |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range []tableRow{
		{"envoyproxy/ratelimit + redis-server (the CPU of both)", r.rlsRef},
		{"tokenring 1 node, gRPC", r.rlsTokenring},
	} {
		if row.m.res.Requests == 0 && r.rlsPending != "" {
			fmt.Fprintf(w, "| %s | %s | | | | | | |\n", row.name, r.rlsPending)
			continue
		}
		if row.m.res.Errors > 0 {
			row.name += fmt.Sprintf(" (%s errors)", thousands(float64(row.m.res.Errors)))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, thousands(row.m.res.PerSecond),
			thousands(float64(row.m.res.Allowed)), thousands(float64(row.m.res.Refused)),
			micros(medianStat(row.m, p50)), micros(medianStat(row.m, p99)),
			decimal(medianStat(row.m, measured.cpuPerDecisionUs)), percent(row.m.steal))
	}
	if r.rlsPending == "" {
		fmt.Fprintf(w, "tokenring ÷ envoyproxy/ratelimit: %s the decisions/s, %s the server CPU a decision\n",
			times(pairedRatio(r.rlsTokenring, r.rlsRef, perSecond)), times(pairedRatio(r.rlsTokenring, r.rlsRef, measured.cpuPerDecisionUs)))
	}
	fmt.Fprintf(w, "the load generator's own CPU µs/decision: envoyproxy/ratelimit %s, tokenring %s\n",
		decimal(medianStat(r.rlsRef, measured.clientPerDecisionUs)), decimal(medianStat(r.rlsTokenring, measured.clientPerDecisionUs)))
}
