package rls

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// PerDescriptor decides each descriptor of a request on its own, as
	// the reference service does: a refused one leaves the others charged.
	// false (the default): a request's charges are all or nothing
	// (router.DecideHits).
	PerDescriptor bool
	// ResponseHeaders adds the RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset headers of the descriptor closest to its limit to
	// every answer (the reference's LIMIT_RESPONSE_HEADERS_ENABLED).
	ResponseHeaders bool
	// MaxTokens is the completion a token reservation may use, before
	// the key's own history (limiter.Request.MaxTokens: the reservation is
	// the smaller of it and 1.5 × the key's average settled usage). Zero
	// means the node's default_max_tokens.
	MaxTokens int64
	// Registry receives the service's metrics. Nil registers nothing.
	Registry prometheus.Registerer
	// Logger receives the service's logs. Nil discards them.
	Logger *slog.Logger
}

// Server is the rate limit service of one node, deciding through its
// router. Safe for concurrent use.
type Server struct {
	pb.UnimplementedRateLimitServiceServer

	r       *router.Router
	cfg     Config
	pl      planner
	m       *metrics
	log     *slog.Logger
	descs   atomic.Pointer[descState] // nil: no file read (every domain unknown)
	clients atomic.Pointer[api.Clients]
	plans   sync.Pool      // *scratch
	health  *health.Server // grpc.health.v1.Health of the gRPC servers GRPC made
}

// scratch is one call's buffers.
type scratch struct {
	p   plan
	res []router.HitResult
}

// New returns the service deciding through r, with no descriptors (every
// domain unknown: SetDescriptors) and open to every caller (SetClients).
func New(r *router.Router, cfg Config) (*Server, error) {
	if r == nil {
		return nil, errors.New("rls: a router is required")
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{r: r, cfg: cfg, pl: planner{maxTokens: cfg.MaxTokens}, m: m, log: cfg.Logger, health: health.NewServer()}
	s.health.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.clients.Store(&api.Clients{})
	s.plans.New = func() any { return &scratch{} }
	return s, nil
}

// SetDescriptors makes c the descriptors in force (a reload of the
// directory): the next call reads it.
func (s *Server) SetDescriptors(c *descriptors.Config) {
	if c == nil {
		s.descs.Store(nil)
		return
	}
	s.descs.Store(newDescState(c))
}

// Descriptors is the descriptors in force; nil when none were set.
func (s *Server) Descriptors() *descriptors.Config {
	if d := s.descs.Load(); d != nil {
		return d.cfg
	}
	return nil
}

// SetClients makes c the clients that may call (the config's clients:;
// none: anyone). A reload calls it.
func (s *Server) SetClients(c api.Clients) { s.clients.Store(&c) }

// ShouldRateLimit is envoy.service.ratelimit.v3.RateLimitService's call
// (see the package's doc). Errors are gRPC statuses: INVALID_ARGUMENT for
// a request outside the bounds (plan.go), NOT_FOUND for an unknown domain,
// UNAUTHENTICATED for a caller no clients: entry knows, PERMISSION_DENIED
// for a limit override from one without may_set_limits, UNAVAILABLE when
// a key's owner did not answer (nothing of the request stays charged),
// and the context's for a caller gone.
func (s *Server) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	resp, err := s.decide(ctx, req)
	switch {
	case err == nil:
		s.m.call(resp.GetOverallCode().String())
	default:
		s.m.call(codeName(status.Code(err)))
	}
	return resp, err
}

// codeName is c's name as gRPC's specification writes it:
// "INVALID_ARGUMENT" for codes.InvalidArgument.
func codeName(c codes.Code) string {
	s := c.String()
	var b strings.Builder
	for i, r := range s {
		if i > 0 && 'A' <= r && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

func (s *Server) decide(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	caller, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := check(req); err != nil {
		return nil, err
	}
	sc := s.plans.Get().(*scratch)
	defer s.plans.Put(sc)
	if err := s.pl.plan(s.descs.Load(), req, caller.MaySetLimits(), &sc.p); err != nil {
		if status.Code(err) == codes.NotFound {
			s.m.unknownDomain.Inc()
		}
		return nil, err
	}
	if n := len(sc.p.hits); cap(sc.res) < n {
		sc.res = make([]router.HitResult, n)
	}
	sc.res = sc.res[:len(sc.p.hits)]
	if _, err := s.r.DecideHits(ctx, sc.p.hits, !s.cfg.PerDescriptor, sc.res); err != nil {
		return nil, decideError(ctx, err)
	}
	return answer(&sc.p, sc.res, s.cfg.ResponseHeaders, s.m), nil
}

// decideError is the gRPC status of DecideHits's error: the caller's own
// end, or UNAVAILABLE (an owner too slow, a full table, ...), which
// Envoy's failure_mode_deny decides about.
func decideError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, router.ErrTooManyHits) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Errorf(codes.Unavailable, "rate limit not decided, nothing charged: %v", err)
}

// authenticate returns the caller of ctx's call: its "authorization"
// metadata (Bearer <token>) and, over TLS, its verified certificate, as
// the decision API's clients: take them (api.Clients).
func (s *Server) authenticate(ctx context.Context) (api.Caller, error) {
	var auth string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
	}
	var cs *tls.ConnectionState
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			cs = &ti.State
		}
	}
	c, err := s.clients.Load().Authenticate(auth, cs)
	if err != nil {
		return api.Caller{}, status.Error(codes.Unauthenticated, err.Error())
	}
	return c, nil
}

// Keepalive bounds of the gRPC server: Envoy's HTTP/2 keepalive pings are
// accepted down to once every minPingInterval, with or without a call in
// flight (grpc-go's default of 5 minutes would close Envoy's connections
// with too_many_pings).
const minPingInterval = 5 * time.Second

// maxMessage bounds a request's bytes: 64 descriptors of 32 entries of
// two 1 KiB strings fit.
const maxMessage = 4 << 20

// GRPC returns a gRPC server serving s's RateLimitService, and
// grpc.health.v1.Health (SERVING, for the whole server and for
// RateLimitService, until Drain), over TLS with tc unless it is nil (with
// tc.ClientAuth set, mutual TLS); the caller serves it on its listener and
// stops it (GracefulStop).
func (s *Server) GRPC(tc *tls.Config) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
	}
	if tc != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, s)
	healthpb.RegisterHealthServer(gs, s.health)
	return gs
}

// Drain makes the health service answer NOT_SERVING from now on, for good:
// Envoy's active health checks (grpc_health_check) move its calls to other
// nodes while this one still answers them, before it stops (a node's drain,
// SIGTERM). Calls are still decided.
func (s *Server) Drain() { s.health.Shutdown() }
