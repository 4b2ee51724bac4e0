package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/tokenring/tokenring/client"
	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// A gateway asks before each LLM request and completes the lease with the
// usage after it. Here the node allows tenant acme 2 requests a minute; the
// second reservation is smaller, as the node has learnt how long acme's
// completions run (500 + 1.5 x 120 tokens).
func ExampleClient() {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 2, Tokens: 10_000} }
	n, _ := node.New(node.Config{Name: "n1", LimitsFor: limits})
	defer n.Close()
	r, _ := frontdoor.New(n, frontdoor.Config{Limits: limits})
	defer r.Close()
	srv := httptest.NewServer(r)
	defer srv.Close()

	c, err := client.New(srv.URL, client.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	for range 3 {
		d, err := c.Acquire(ctx, client.AcquireRequest{Tenant: "acme", PromptTokens: 500, MaxTokens: 500})
		switch {
		case err != nil:
			fmt.Println("error:", err)
		case d.Allowed:
			fmt.Println("allowed, reserved", d.ReservedTokens, "tokens")
			// ... call the LLM, then report what it used:
			err := c.Complete(ctx, "acme", d.Lease, &client.Usage{PromptTokens: 500, CompletionTokens: 120})
			fmt.Println("completed:", err == nil)
		default:
			fmt.Println("refused:", d.Reason, "retry after > 0:", d.RetryAfter > 0)
		}
	}
	l, _ := c.Status(ctx, "acme")
	fmt.Println("tokens left:", l.Tokens.Remaining)
	// Output:
	// allowed, reserved 1000 tokens
	// completed: true
	// allowed, reserved 680 tokens
	// completed: true
	// refused: requests retry after > 0: true
	// tokens left: 8760
}
