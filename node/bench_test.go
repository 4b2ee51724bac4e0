package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// benchDecisions drives acquire+settle pairs on 1,000 keys owned by node 0,
// calling through node via, from many goroutines at once.
func benchDecisions(b *testing.B, batch BatchConfig, via int) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}
	}
	c := newCluster(b, 2, limits, batch, noReplication) // measure forwarding alone
	keys := make([]string, 0, 1000)
	for k := 0; len(keys) < cap(keys); k++ {
		key := fmt.Sprintf("t:bench-%d", k)
		if m, _ := c.ring.Owner(key); m.Name == c.nodes[0].Name() {
			keys = append(keys, key)
		}
	}
	nd := c.nodes[via]
	var seq atomic.Int64
	ctx := context.Background()
	b.SetParallelism(16) // 16 × GOMAXPROCS concurrent callers, like a busy HTTP front
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := keys[seq.Add(1)%int64(len(keys))]
			a, err := nd.Do(ctx, &Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 100, MaxTokens: 100}})
			if err != nil || !a.Decision.Allowed {
				b.Fatalf("acquire: %+v %v", a, err)
			}
			if _, err := nd.Do(ctx, &Call{Op: OpSettle, Key: key, Lease: a.Decision.Lease, Usage: limiter.Usage{PromptTokens: 100, CompletionTokens: 50}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	if calls, frames := nd.Forwarded(); frames > 0 {
		b.ReportMetric(float64(calls)/float64(frames), "calls/frame")
	}
}

// BenchmarkDecisions compares decisions made at the owner (local) with
// decisions forwarded over the peer protocol, with batching off (one call
// per frame), opportunistic (write what queued up while the previous write
// was in flight: our default), and lingering like Gubernator (500µs).
// Each op is one acquire plus one settle.
func BenchmarkDecisions(b *testing.B) {
	b.Run("local", func(b *testing.B) { benchDecisions(b, BatchConfig{}, 0) })
	b.Run("forwarded/unbatched", func(b *testing.B) { benchDecisions(b, BatchConfig{Max: 1}, 1) })
	b.Run("forwarded/opportunistic", func(b *testing.B) { benchDecisions(b, BatchConfig{}, 1) })
	b.Run("forwarded/linger100us", func(b *testing.B) { benchDecisions(b, BatchConfig{Wait: 100 * time.Microsecond}, 1) })
	b.Run("forwarded/linger500us", func(b *testing.B) { benchDecisions(b, BatchConfig{Wait: 500 * time.Microsecond}, 1) })
}
