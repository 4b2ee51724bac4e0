package limiter

import (
	"testing"
	"time"
)

// BenchmarkDimensionCost is BenchmarkAcquireComplete's acquire and settle
// at one key with each of the newer dimensions, beside the same key
// without them, in the same run:
//
//   - plain: requests, tokens and slots (benchLimits);
//   - budget: plus a spend limit, the request priced (a cost reserved,
//     then settled from the usage with cached tokens);
//   - fair/uncontended: a fair key asked by 8 flows in turn, nobody ever
//     refused (the flows' rings counted, no share computed);
//   - fair/contended: the same, contended (a refusal noted every 1,000
//     operations), so every admission computes its flow's share.
func BenchmarkDimensionCost(b *testing.B) {
	flows := []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7"}
	for _, c := range []struct {
		name      string
		lim       Limits
		price     Price
		fair      bool
		contended bool
	}{
		{name: "plain", lim: benchLimits},
		{name: "budget", lim: Limits{Requests: benchLimits.Requests, Tokens: benchLimits.Tokens, Concurrency: benchLimits.Concurrency,
			Spend: MaxSpend, Period: Period{Unit: PeriodMonth}}, price: Price{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000}},
		{name: "fair/uncontended", lim: Limits{Requests: benchLimits.Requests, Tokens: benchLimits.Tokens, Concurrency: benchLimits.Concurrency, Fair: true}, fair: true},
		{name: "fair/contended", lim: Limits{Requests: benchLimits.Requests, Tokens: benchLimits.Tokens, Concurrency: benchLimits.Concurrency, Fair: true}, fair: true, contended: true},
	} {
		b.Run(c.name, func(b *testing.B) {
			bud := NewBudget(c.lim, nil, t0)
			now := t0
			r := Request{PromptTokens: 500, MaxTokens: 256, Price: c.price}
			u := Usage{PromptTokens: 500, CompletionTokens: 120, CachedTokens: 200}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(100 * time.Microsecond)
				if c.fair {
					r.Flow, r.Weight = flows[i%len(flows)], int64(1+i%3)
				}
				if c.contended && i%1000 == 0 {
					bud.refusedFlow(bud.flowOf(now.UnixNano(), &r), need{req: 1, tok: 1})
				}
				i++
				d := bud.Acquire(now, r)
				if !d.Allowed {
					b.Fatalf("refused: %+v", d)
				}
				bud.Settle(now, d.Lease, u)
			}
			if c.contended && !bud.FairContended(now) {
				b.Fatal("not contended")
			}
		})
	}
}
