package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/tokenring/tokenring/rls/descriptors"
)

// rlsFile is a rate limit file of domain d1: key k, perMinute a minute.
func rlsFile(perMinute string) string {
	return "domain: d1\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: " + perMinute + "}\n"
}

// TestGRPCServesEnvoyAndReloads runs tokenringd with -grpc and
// rls.config_dir: Envoy's call is answered from the files (the d: key's
// owner finds its limit), a changed file takes effect at the next call, a
// broken one is refused and counted while the old files stay, and the
// daemon stops cleanly (every goroutine ends: TestMain's goleak).
func TestGRPCServesEnvoyAndReloads(t *testing.T) {
	dir := t.TempDir()
	rlsDir := filepath.Join(dir, "rls")
	if err := os.Mkdir(rlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(rlsDir, "d1.yaml"), []byte(rlsFile("2")))
	cfgFile := filepath.Join(dir, "tokenring.yaml")
	writeFile(t, cfgFile, []byte("rls: {config_dir: "+rlsDir+"}\n"))
	base, logs, stop := startDaemon(t, "-name", "g", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local",
		"-grpc", "127.0.0.1:0", "-config", cfgFile)
	m := regexp.MustCompile(`msg="tokenringd serving" .*\bgrpc=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no grpc address in the serving log:\n%s", logs.String())
	}
	conn, err := grpc.NewClient("passthrough:///"+m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v, want SERVING", hc, err)
	}
	call := func(value string) *pb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "d1", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		if got := call("a").GetOverallCode(); got != want {
			t.Fatalf("call %d: %v, want %v", i, got, want)
		}
	}

	writeFile(t, filepath.Join(rlsDir, "d1.yaml"), []byte(rlsFile("5")))
	deadline := time.Now().Add(10 * time.Second)
	for call("b").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the changed file never took effect:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := call("a").GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("a's third request under the raised limit: %v", got)
	}

	writeFile(t, filepath.Join(rlsDir, "d1.yaml"), []byte("domain: d1\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n"))
	for !strings.Contains(metricsText(t, base), `tokenring_rls_config_reloads_total{result="refused"} 1`) {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("the broken file was never refused:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := call("c").GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
		t.Errorf("after a broken file, the limit is %d, want the old files' 5", got)
	}
	conn.Close()
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// metricsText is the daemon's /metrics text.
func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRLSDirFollowsASwappedConfigMap: rls.config_dir mounted as a
// ConfigMap (files linked through a swapped ..data) is read again at the
// next look after a swap, once; a broken swap keeps the files in force
// and is counted; SIGHUP (forced) reads an unchanged directory without
// applying it.
func TestRLSDirFollowsASwappedConfigMap(t *testing.T) {
	dir := t.TempDir()
	_, publish := configMapDir(t, dir, rlsFile("2"))
	first, err := descriptors.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var applied []*descriptors.Config
	d := newRLSDir(dir, first, func(c *descriptors.Config) { applied = append(applied, c) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	count := func(result string) float64 {
		var m dto.Metric
		if err := d.reloads.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	d.check(false)
	d.check(true)
	if len(applied) != 0 {
		t.Fatalf("applied %d times with nothing changed", len(applied))
	}
	publish(rlsFile("5"))
	d.check(false)
	d.check(false)
	if len(applied) != 1 || count("applied") != 1 {
		t.Fatalf("after a swap: applied %d times (counted %v), want once", len(applied), count("applied"))
	}
	lim, _, key, ok := applied[0].MatchKey("d1", []descriptors.Entry{{Key: "k", Value: "x"}})
	if !ok || lim.RequestsPerUnit != 5 || key == "" {
		t.Errorf("the swapped files say %+v", lim)
	}
	publish("domain: d1\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n")
	d.check(false)
	if len(applied) != 1 || count("refused") != 1 || d.current != applied[0] {
		t.Errorf("a broken swap: applied %d times, refused %v; want the old files kept and one refusal", len(applied), count("refused"))
	}
}
