package main

// `tokenring load -client batch`: the workers call through one batching
// client.Client per target instead of one HTTP request per call.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/tokenring/tokenring/client"
)

// batchClients are the batching clients of a -client batch run, by target
// base URL (and by the route's URLs under -route owner or other).
type batchClients map[string]*client.Client

// newBatchClients returns the clients of a -client batch run, one per
// target and per node of routeOf (the routes of -route owner or other), or
// nil for -client http. The map is not written once the workers start.
func newBatchClients(c loadConfig, routeOf []string) (batchClients, error) {
	if c.clientMode != "batch" {
		return nil, nil
	}
	out := batchClients{}
	for _, base := range append(slices.Clone(c.targets), routeOf...) {
		if out[base] != nil {
			continue
		}
		cl, err := client.New(base, client.Config{})
		if err != nil {
			out.close()
			return nil, fmt.Errorf("-client batch: %w", err)
		}
		out[base] = cl
	}
	return out, nil
}

// close stops every client.
func (b batchClients) close() {
	for _, cl := range b {
		_ = cl.Close()
	}
}

// acquireBatched is acquire through the batching client of base: an
// admission counts as a 200, a refusal as a 429, an *client.APIError as its
// status, any other error as an error.
func (s *tokenringSystem) acquireBatched(ctx context.Context, base, tenant string) outcome {
	cl := s.batched[base]
	c := s.c
	d, err := cl.Acquire(ctx, client.AcquireRequest{Tenant: tenant, Model: c.model, PromptTokens: int64(c.promptTokens), MaxTokens: int64(c.maxTokens)})
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr):
		return outcome{code: apiErr.Status}
	case err != nil:
		return outcome{err: err}
	case !d.Allowed:
		return outcome{code: http.StatusTooManyRequests, fallback: d.Fallback}
	}
	return outcome{code: http.StatusOK, allowed: true, fallback: d.Fallback, complete: func(ctx context.Context) bool {
		usage := &client.Usage{PromptTokens: int64(c.promptTokens), CompletionTokens: int64(c.maxTokens / 2)}
		return cl.Complete(ctx, tenant, d.Lease, usage) == nil
	}}
}
