package main

// `tokenring load -client batch`: the workers call through one batching
// client.Client per target instead of one HTTP request per call.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/tokenring/tokenring/client"
)

// batchClients are the batching clients of a -client batch run, by target
// base URL (and by the route's URLs under -route owner or other).
type batchClients map[string]*batchClient

// batchClient is one target's client, and where close reports what it
// sent (-announce's stderr; nil: nowhere).
type batchClient struct {
	*client.Client
	report io.Writer
}

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
		out[base] = &batchClient{Client: cl, report: c.announce}
	}
	return out, nil
}

// close stops every client and, under -announce, prints on stderr what
// each sent: its calls, its requests, and the calls a request.
func (b batchClients) close() {
	for base, cl := range b {
		if st := cl.Stats(); cl.report != nil && st.Requests > 0 {
			fmt.Fprintf(cl.report, "tokenring load: batch client %s: %d calls in %d requests, %.1f a request\n",
				base, st.Calls, st.Requests, float64(st.Calls)/float64(max(st.Requests, 1)))
		}
		_ = cl.Close()
	}
}

// acquireBatched is acquire through the batching client of base: an
// admission counts as a 200, a refusal as a 429, an *client.APIError as its
// status, any other error as an error.
func (s *tokenringSystem) acquireBatched(ctx context.Context, base, tenant string) outcome {
	cl := s.batched[base]
	c := &s.c
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
	o := outcome{code: http.StatusOK, allowed: true, fallback: d.Fallback}
	if c.complete { // else no closure to allocate per call
		lease := d.Lease
		o.complete = func(ctx context.Context) bool {
			usage := &client.Usage{PromptTokens: int64(c.promptTokens), CompletionTokens: int64(c.maxTokens / 2)}
			return cl.Complete(ctx, tenant, lease, usage) == nil
		}
	}
	return o
}
