package main

// The systems `tokenring load -system` drives. Each gives the workers a
// decideFunc; the loop, the latency recording and the result are the same
// for all (load.go).

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// systems are the values of -system.
var systems = []string{"tokenring", "redis-incr", "redis-zset", "proxy", "rls"}

// system is what a run asks for decisions: the connections it holds, and
// a decideFunc for each worker.
type system interface {
	// decider returns the decideFunc of worker id; it is called before
	// the workers start, and each result is called by one goroutine only.
	decider(id int) decideFunc
	// close releases the system's connections once the workers are done.
	close()
}

// counter is a system that counts more than the workers do: count adds it
// to the run's result once the workers are done.
type counter interface{ count(res *loadResult) }

// newSystem opens what c's -system needs (routes, clients, a prefill),
// before the run's clock starts.
func newSystem(ctx context.Context, c loadConfig) (system, error) {
	switch c.system {
	case "redis-incr", "redis-zset":
		return newRedisSystem(ctx, c)
	case "proxy":
		return newProxySystem(c), nil
	case "rls":
		return newRLSSystem(ctx, c)
	}
	return newTokenringSystem(ctx, c)
}

// httpClient is the HTTP client every HTTP system uses: one idle
// connection kept per worker and target.
func httpClient(c loadConfig) *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: c.workers, MaxIdleConns: c.workers * len(c.targets)},
	}
}

// tokenringSystem is tokenringd's decision API: POST /v1/acquire (then
// /v1/complete), one HTTP request per call or through batching clients.
type tokenringSystem struct {
	c       loadConfig
	client  *http.Client
	batched batchClients // by base URL; nil: one HTTP request per call
	routeOf []string     // per tenant index, the node to send to; nil: round robin
	raw     []rawConns   // per worker, with -client raw
}

func newTokenringSystem(ctx context.Context, c loadConfig) (*tokenringSystem, error) {
	s := &tokenringSystem{c: c, client: httpClient(c)}
	var err error
	if s.routeOf, err = routes(ctx, s.client, c); err != nil {
		s.client.CloseIdleConnections()
		return nil, fmt.Errorf("routes: %w", err)
	}
	if s.batched, err = newBatchClients(c, s.routeOf); err != nil {
		s.client.CloseIdleConnections()
		return nil, err
	}
	if err := s.prefill(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *tokenringSystem) close() {
	for _, cs := range s.raw {
		cs.close()
	}
	s.batched.close()
	s.client.CloseIdleConnections()
}

// decider sends worker id's i-th call to its tenant's route, or round
// robin over -targets starting at the id-th.
func (s *tokenringSystem) decider(id int) decideFunc {
	var cs rawConns
	var buf []byte // -client raw: the worker's request body
	if s.c.clientMode == "raw" {
		cs = rawConns{}
		s.raw = append(s.raw, cs)
	}
	return func(ctx context.Context, i, ti int, tenant string) outcome {
		base := s.c.targets[(id+i)%len(s.c.targets)]
		if s.routeOf != nil {
			base = s.routeOf[ti]
		}
		switch {
		case s.batched != nil:
			return s.acquireBatched(ctx, base, tenant)
		case cs != nil:
			return s.acquireRaw(ctx, cs, &buf, base, tenant)
		}
		return s.acquire(ctx, base, tenant)
	}
}

// acquire sends one acquire for tenant to base; an admitted lease is
// completed with the prompt and half the completion bound as its usage.
func (s *tokenringSystem) acquire(ctx context.Context, base, tenant string) outcome {
	c := s.c
	body := fmt.Sprintf(`{"tenant":%q,"model":%q,"prompt_tokens":%d,"max_tokens":%d}`, tenant, c.model, c.promptTokens, c.maxTokens)
	code, out, err := post(ctx, s.client, base+"/v1/acquire", body)
	if err != nil {
		return outcome{err: err}
	}
	return outcome{code: code, allowed: out.Allowed, fallback: out.Fallback, complete: func(ctx context.Context) bool {
		body := fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, tenant, out.Lease, c.promptTokens, c.maxTokens/2)
		code, done, err := post(ctx, s.client, base+"/v1/complete", body)
		return err == nil && code == http.StatusOK && done.Settled
	}}
}
