package rls

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/internal/testclock"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// configDir holds the test's rate limit files (testdata/README.md).
const configDir = "testdata/config"

// slotTTL is the lease TTL of a token key in these tests (the daemon's
// limits.lease_ttl): shorter than llm.yaml's minute, so that a slot
// expires while its tokens are still counted.
const slotTTL = 30 * time.Second

// harness is one in-process node, its router and this package's service
// on a loopback gRPC listener, called through go-control-plane's
// generated client, as Envoy's filter calls it.
type harness struct {
	clock  *testclock.Clock
	node   *node.Node
	router *router.Router
	srv    *Server
	reg    *prometheus.Registry
	client pb.RateLimitServiceClient
	health healthpb.HealthClient
}

// setup configures a harness. The zero value: all or nothing, no
// headers, an open service, plaintext.
type setup struct {
	cfg       Config
	clients   api.Clients
	serverTLS *tls.Config // nil: plaintext
	clientTLS *tls.Config // the client's, with serverTLS
}

func start(t testing.TB, s setup) *harness {
	t.Helper()
	descs, err := descriptors.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{clock: testclock.New(), reg: prometheus.NewRegistry()}
	limits := func(key string) limiter.Limits {
		l, _ := KeyLimits(h.srv.Descriptors(), key)
		if l.LeaseTTL == 0 {
			l.LeaseTTL = slotTTL
		}
		return l
	}
	if h.node, err = node.New(node.Config{Name: "n1", LimitsFor: limits, Now: h.clock.Now}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.node.Close() })
	if h.router, err = router.New(h.node, router.Config{Limits: limits, Now: h.clock.Now}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.router.Close() })
	s.cfg.Registry = h.reg
	if h.srv, err = New(h.router, s.cfg); err != nil {
		t.Fatal(err)
	}
	h.srv.SetDescriptors(descs)
	h.srv.SetClients(s.clients)
	gs := h.srv.GRPC(s.serverTLS)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	creds := insecure.NewCredentials()
	if s.clientTLS != nil {
		creds = credentials.NewTLS(s.clientTLS)
	}
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h.client = pb.NewRateLimitServiceClient(conn)
	h.health = healthpb.NewHealthClient(conn)
	return h
}

// call sends req with the bearer token (none when empty).
func (h *harness) call(t testing.TB, token string, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return h.client.ShouldRateLimit(ctx, req)
}

// must is call, failing t on an error.
func (h *harness) must(t testing.TB, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := h.call(t, "", req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// request is a RateLimitRequest of domain.
func request(domain string, hitsAddend uint32, ds ...*rlv3.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hitsAddend}
}

// desc is a descriptor of the entries kv (key, value, key, value...).
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits is d with a per-descriptor hits_addend.
func withHits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// withLimit is d with a limit override.
func withLimit(d *rlv3.RateLimitDescriptor, perUnit uint32, unit descriptors.Unit) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: typeUnit(unit)}
	return d
}

// resetAt is the duration until reset the limiter reports at now for a
// key whose newest units were charged at charged, with window: a unit
// counts until the end of its bucket (a sixtieth of the window, rounded
// up to the nanosecond) plus the window (limiter.Budget).
func resetAt(window time.Duration, charged, now time.Time) time.Duration {
	w := (int64(window) + 59) / 60
	k := charged.UnixNano() / w
	return time.Duration((k+61)*w - now.UnixNano())
}

// ok is the status of an admitted (or checked) descriptor.
func ok(perUnit uint32, unit descriptors.Unit, name string, remaining uint32, reset time.Duration) *pb.RateLimitResponse_DescriptorStatus {
	return &pb.RateLimitResponse_DescriptorStatus{
		Code:               pb.RateLimitResponse_OK,
		CurrentLimit:       &pb.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: pb.RateLimitResponse_RateLimit_Unit(unit), Name: name},
		LimitRemaining:     remaining,
		DurationUntilReset: durationpb.New(reset),
	}
}

// overLimit is the status of a refused descriptor.
func overLimit(perUnit uint32, unit descriptors.Unit, name string, retry time.Duration) *pb.RateLimitResponse_DescriptorStatus {
	st := ok(perUnit, unit, name, 0, retry)
	st.Code = pb.RateLimitResponse_OVER_LIMIT
	return st
}

// noLimitStatus is the status of a descriptor no limit matches.
var noLimitStatus = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}

// expect checks resp's overall code and every status, field by field.
func expect(t testing.TB, what string, resp *pb.RateLimitResponse, code pb.RateLimitResponse_Code, statuses ...*pb.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	if resp.GetOverallCode() != code {
		t.Errorf("%s: overall_code %v, want %v", what, resp.GetOverallCode(), code)
	}
	if len(resp.GetStatuses()) != len(statuses) {
		t.Fatalf("%s: %d statuses, want %d: %v", what, len(resp.GetStatuses()), len(statuses), resp)
	}
	for i, want := range statuses {
		if got := resp.GetStatuses()[i]; !proto.Equal(got, want) {
			t.Errorf("%s: statuses[%d]\n got %v\nwant %v", what, i, got, want)
		}
	}
}
