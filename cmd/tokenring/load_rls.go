package main

// -system rls: Envoy's external rate limit service, gRPC
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, served by
// tokenringd or by envoyproxy/ratelimit itself, driven by the same workers,
// loop and latency recording as the other systems. Its requests are made
// from the service's own YAML config (rlsmix.go), the file both servers
// read, so that each descriptor sent meets a limit of the config.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// rlsConnectTimeout bounds how long newRLSSystem waits for each connection.
const rlsConnectTimeout = 10 * time.Second

// descriptorCount is what a run's answers said of one descriptor of its
// requests (-system rls), by the descriptor's place in the request, named
// by its first key: the statuses of an answer are in the order of its
// request's descriptors.
type descriptorCount struct {
	Key       string `json:"key"`
	OK        int    `json:"ok"`
	OverLimit int    `json:"over_limit"`
}

// rlsSystem is -conns gRPC connections to -rls (at most one a worker), the
// workers taking them in turn: worker id calls on connection id mod their
// number.
type rlsSystem struct {
	c     loadConfig
	mix   *rlsMix
	conns []*grpc.ClientConn
	// counts are each worker's descriptorCounts, written by that worker's
	// goroutine only and read once the workers are done (count).
	counts [][]descriptorCount
}

// newRLSSystem reads the mix from -rls-config and opens the connections,
// each connected before the run's clock starts.
func newRLSSystem(ctx context.Context, c loadConfig) (*rlsSystem, error) {
	mix, err := readRLSMix(c.rlsConfig)
	if err != nil {
		return nil, err
	}
	s := &rlsSystem{c: c, mix: mix}
	for range min(c.conns, c.workers) {
		conn, err := grpc.NewClient(c.rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("rls %s: %w", c.rlsAddr, err)
		}
		s.conns = append(s.conns, conn)
		if err := connect(ctx, conn); err != nil {
			s.close()
			return nil, fmt.Errorf("rls %s: %w", c.rlsAddr, err)
		}
	}
	return s, nil
}

// connect makes conn connect now and waits until it is ready, for at most
// rlsConnectTimeout; a connection that failed (refused, or no HTTP/2
// server) is an error at once.
func connect(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, rlsConnectTimeout)
	defer cancel()
	conn.Connect()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure:
			return errors.New("cannot connect")
		}
		if !conn.WaitForStateChange(ctx, st) {
			return fmt.Errorf("not connected after %v (%v)", rlsConnectTimeout, st)
		}
	}
}

func (s *rlsSystem) close() {
	for _, conn := range s.conns {
		_ = conn.Close()
	}
}

// decider calls ShouldRateLimit with a request of the mix for the tenant:
// an overall OK is an admission, OVER_LIMIT a refusal (as Envoy answers
// them: 200 and 429), anything else (UNKNOWN) an error with code 500.
func (s *rlsSystem) decider(id int) decideFunc {
	client := rlsv3.NewRateLimitServiceClient(s.conns[id%len(s.conns)])
	counts := make([]descriptorCount, len(s.mix.keys))
	for k, key := range s.mix.keys {
		counts[k].Key = key.key
	}
	s.counts = append(s.counts, counts)
	rng := rand.New(rand.NewPCG(s.c.seed, uint64(id)|1<<32)) // the literal values; the tenants are the worker's
	return func(ctx context.Context, _, ti int, tenant string) outcome {
		resp, err := client.ShouldRateLimit(ctx, s.mix.request(ti, tenant, rng))
		if err != nil {
			return outcome{err: err}
		}
		for k, st := range resp.GetStatuses() {
			if k < len(counts) {
				switch st.GetCode() {
				case rlsv3.RateLimitResponse_OK:
					counts[k].OK++
				case rlsv3.RateLimitResponse_OVER_LIMIT:
					counts[k].OverLimit++
				}
			}
		}
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			return outcome{code: http.StatusOK, allowed: true}
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			return outcome{code: http.StatusTooManyRequests}
		}
		return outcome{code: http.StatusInternalServerError}
	}
}

// count adds the workers' descriptorCounts to res.
func (s *rlsSystem) count(res *loadResult) {
	res.Descriptors = make([]descriptorCount, len(s.mix.keys))
	for k, key := range s.mix.keys {
		res.Descriptors[k].Key = key.key
	}
	for _, counts := range s.counts {
		for k, c := range counts {
			res.Descriptors[k].OK += c.OK
			res.Descriptors[k].OverLimit += c.OverLimit
		}
	}
}
