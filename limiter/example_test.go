package limiter_test

import (
	"fmt"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// A Budget driven by a fake clock: admit, refuse with an exact RetryAfter,
// queue, and hand the waiter its grant when the window has slid.
func ExampleBudget() {
	t0 := time.Unix(1_700_000_000, 0)
	b := limiter.NewBudget(limiter.Limits{Requests: 2, Tokens: 10_000, Window: time.Minute}, nil, t0)

	d := b.Acquire(t0, limiter.Request{PromptTokens: 1200, MaxTokens: 512})
	fmt.Println(d.Allowed, d.Reserved, d.Status.Tokens.Remaining)

	b.Acquire(t0.Add(10*time.Second), limiter.Request{PromptTokens: 100, MaxTokens: 100})
	d = b.Acquire(t0.Add(20*time.Second), limiter.Request{PromptTokens: 100})
	fmt.Println(d.Allowed, d.Reason, d.RetryAfter)

	d = b.Acquire(t0.Add(20*time.Second), limiter.Request{PromptTokens: 100, Wait: time.Minute})
	next, _ := b.NextWake(t0.Add(20 * time.Second))
	fmt.Println(d.Queued, next.Sub(t0))
	for _, g := range b.Wake(next, nil) {
		fmt.Println(g.Ticket == d.Ticket, g.Decision.Allowed)
	}
	// Output:
	// true 1712 8288
	// false requests 41s
	// true 1m1s
	// true true
}

// The node's pattern: everything for a key happens in one Do, and Wake runs
// after anything that may free capacity.
func ExampleTable() {
	t0 := time.Unix(1_700_000_000, 0)
	tb := limiter.NewTable(limiter.Policy{}, func(key string) limiter.Limits {
		return limiter.Limits{Requests: 60, Tokens: 100_000, Concurrency: 1}
	})
	var first, second limiter.Decision
	tb.Do("acme", t0, func(b *limiter.Budget) {
		first = b.Acquire(t0, limiter.Request{PromptTokens: 1000, MaxTokens: 500})
		second = b.Acquire(t0, limiter.Request{PromptTokens: 1000, Wait: 5 * time.Second})
	})
	now := t0.Add(2 * time.Second)
	var grants []limiter.Grant
	tb.Do("acme", now, func(b *limiter.Budget) {
		b.Settle(now, first.Lease, limiter.Usage{PromptTokens: 1000, CompletionTokens: 300})
		grants = b.Wake(now, grants)
	})
	fmt.Println(first.Allowed, second.Queued, len(grants), grants[0].Ticket == second.Ticket, grants[0].Decision.Allowed)
	// Output: true true 1 true true
}
