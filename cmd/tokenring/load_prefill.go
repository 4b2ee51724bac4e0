package main

// `tokenring load -prefill N`: before the run's clock starts, every
// tenant's window is filled with N requests, as -entries fills the sorted
// sets of -system redis-zset, so that a flatness run compares windows of
// different sizes over the same tenants.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tokenring/tokenring/client"
)

// prefillWorkers are the goroutines that send a prefill, through one
// batching client per node.
const prefillWorkers = 256

// prefill sends -prefill acquires for each tenant to its route (or round
// robin), each completed at once with the run's usage: every tenant's
// window then counts -prefill requests (and their tokens) and holds no
// slot. Each tenant belongs to one prefill worker, which takes its tenants
// in turn: a tenant has one request in flight at most (a concurrency limit
// of 1 is enough), and its window fills over the whole prefill. A refusal
// is an error: the limits must admit -prefill requests a window.
func (s *tokenringSystem) prefill(ctx context.Context) error {
	c := s.c
	if c.prefill == 0 {
		return nil
	}
	clients := map[string]*client.Client{}
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	for _, base := range append(append([]string(nil), c.targets...), s.routeOf...) {
		if clients[base] != nil {
			continue
		}
		cl, err := client.New(base, client.Config{})
		if err != nil {
			return fmt.Errorf("prefill: %w", err)
		}
		clients[base] = cl
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers := min(prefillWorkers, c.tenants)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range c.prefill {
				for ti := w; ti < c.tenants && ctx.Err() == nil; ti += workers {
					base := c.targets[ti%len(c.targets)]
					if s.routeOf != nil {
						base = s.routeOf[ti]
					}
					if err := prefillOne(ctx, clients[base], c, tenantName(c, ti)); err != nil {
						cancel(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("prefill: %w", err)
	}
	return ctx.Err()
}

// prefillOne acquires once for tenant and completes the lease.
func prefillOne(ctx context.Context, cl *client.Client, c loadConfig, tenant string) error {
	d, err := cl.Acquire(ctx, client.AcquireRequest{Tenant: tenant, Model: c.model, PromptTokens: int64(c.promptTokens), MaxTokens: int64(c.maxTokens)})
	switch {
	case err != nil:
		return err
	case !d.Allowed:
		return fmt.Errorf("tenant %s refused (%s): its limits must admit -prefill %d requests a window", tenant, d.Reason, c.prefill)
	}
	return cl.Complete(ctx, tenant, d.Lease, &client.Usage{PromptTokens: int64(c.promptTokens), CompletionTokens: int64(c.maxTokens / 2)})
}
