package node

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// benchDecisions drives acquire+settle pairs on 1,000 keys owned by node 0,
// calling through node via, from many goroutines at once.
func benchDecisions(b *testing.B, batch BatchConfig, via int, opts ...func(*Config)) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}
	}
	if len(opts) == 0 {
		opts = []func(*Config){noReplication} // measure forwarding alone
	}
	c := newCluster(b, 2, limits, batch, opts...)
	keys := ownedByFirst(c, 1000)
	nd := c.nodes[via]
	var seq atomic.Int64
	ctx := context.Background()
	b.SetParallelism(16) // 16 × GOMAXPROCS concurrent callers, like a busy HTTP front
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := keys[seq.Add(1)%int64(len(keys))]
			a, err := nd.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 100, MaxTokens: 100}})
			if err != nil || !a.Decision.Allowed {
				b.Fatalf("acquire: %+v %v", a, err)
			}
			if _, err := nd.Do(ctx, Call{Op: OpSettle, Key: key, Lease: a.Decision.Lease, Usage: limiter.Usage{PromptTokens: 100, CompletionTokens: 50}}); err != nil {
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

// BenchmarkReplication compares decisions at the owner with replication
// off, asynchronous (every 100 ms, the default) and synchronous (each change
// answered only once the backup holds it, copies batched on the peer
// connection). Each op is one acquire plus one settle, so sync pays two
// copies per op.
func BenchmarkReplication(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchDecisions(b, BatchConfig{}, 0) })
	b.Run("async", func(b *testing.B) {
		benchDecisions(b, BatchConfig{}, 0, func(c *Config) { c.ReplicationInterval = 100 * time.Millisecond })
	})
	b.Run("sync", func(b *testing.B) {
		benchDecisions(b, BatchConfig{}, 0, func(c *Config) { c.ReplicationInterval = 100 * time.Millisecond; c.ReplicationSync = true })
	})
}

// BenchmarkTransfer100kKeys measures a handoff in bulk: n1 holds 100,000
// keys in all 271 partitions and drains to n2; the clock runs from the
// start of the drain until n2 has acknowledged every partition.
func BenchmarkTransfer100kKeys(b *testing.B) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 1000, Concurrency: 1000} }
	for range b.N {
		b.StopTimer()
		nodes := newNodes(b, 2, limits, noReplication)
		n1, n2 := nodes[0], nodes[1]
		n1.SetRing(ringOf(b, n1))
		now := time.Now()
		for i := range 100_000 {
			n1.table.Do(fmt.Sprintf("t:k%d", i), now, func(bd *limiter.Budget) { bd.Acquire(now, limiter.Request{PromptTokens: 10}) })
		}
		eventually(b, time.Minute, "n1 to hold every partition", func() bool { return n1.tr.Load().held() == n1.Ring().PartitionCount() })
		b.StartTimer()
		start := time.Now()
		tellLeaving(b, n2, nodes, n1)
		tellLeaving(b, n1, nodes, n1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := n1.Drain(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(time.Since(start).Seconds(), "s/transfer")
		if n1.Keys() != 0 || n2.Keys() != 100_000 {
			b.Fatalf("%d and %d keys after the transfer, want 0 and 100000; n1 %+v n2 %+v", n1.Keys(), n2.Keys(), n1.custodyStats(), n2.custodyStats())
		}
		n1.Close()
		n2.Close()
	}
}

// BenchmarkJoinToExact measures how long a joining member takes to become
// exact for everything it owns: n1 and n2 hold 100,000 keys, n3 joins, and
// the clock runs from every member learning the new ring until n3 holds
// every partition it owns (from then on each of its decisions is made on
// the real window). Before that moment calls for those partitions wait,
// they are never decided from zero.
func BenchmarkJoinToExact(b *testing.B) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 1000, Concurrency: 1000} }
	for range b.N {
		b.StopTimer()
		nodes := newNodes(b, 3, limits, noReplication)
		n1, n2, n3 := nodes[0], nodes[1], nodes[2]
		two, three := ringOf(b, n1, n2), ringOf(b, n1, n2, n3)
		n1.SetRing(two)
		n2.SetRing(two)
		eventually(b, time.Minute, "every partition held by n1 or n2", func() bool {
			return n1.tr.Load().held()+n2.tr.Load().held() == two.PartitionCount()
		})
		ctx := context.Background()
		for i := range 100_000 {
			if _, err := n1.Do(ctx, Call{Op: OpAcquire, Key: fmt.Sprintf("t:k%d", i), Req: limiter.Request{PromptTokens: 10}}); err != nil {
				b.Fatal(err)
			}
		}
		want := len(three.OwnedPartitions("n3"))
		b.StartTimer()
		start := time.Now()
		for _, nd := range nodes {
			nd.SetRing(three)
		}
		for n3.tr.Load().held() != want {
			time.Sleep(100 * time.Microsecond) // the poll interval of the timed wait: its resolution
		}
		b.StopTimer()
		b.ReportMetric(time.Since(start).Seconds(), "s/join")
		b.ReportMetric(float64(n3.Keys()), "keys_moved")
		for _, nd := range nodes {
			nd.Close()
		}
	}
}

// BenchmarkPeerSecrets compares forwarded decisions on the plaintext peer
// protocol with the authenticated one (Config.Secrets: every frame sealed
// with AES-256-GCM), opportunistic batching. Each op is one acquire plus
// one settle.
func BenchmarkPeerSecrets(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchDecisions(b, BatchConfig{}, 1, noReplication) })
	b.Run("secret", func(b *testing.B) { benchDecisions(b, BatchConfig{}, 1, noReplication, withSecrets(secretNew)) })
}

// BenchmarkHotKey sends one key's acquires (1,000 a second would make it
// hot; these come as fast as they can) through a node that is not its
// owner: forwarded one by one with slices off, served from the slices its
// owner allots with them on (the default). Each op is one acquire.
func BenchmarkHotKey(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int
	}{{"slices-off", -1}, {"slices-on", DefaultHotKeyRate}} {
		b.Run(bc.name, func(b *testing.B) {
			limits := func(string) limiter.Limits {
				return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}
			}
			c := newCluster(b, 2, limits, BatchConfig{}, noReplication, func(cfg *Config) { cfg.HotKeyRate = bc.rate })
			key := c.keyOwnedBy(b, 0)
			nd := c.nodes[1]
			ctx := context.Background()
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a, err := nd.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 100, MaxTokens: 100}})
					if err != nil || !a.Decision.Allowed {
						b.Fatalf("acquire: %+v %v", a, err)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(nd.counts.allotted.Load())/float64(b.N), "from-slices/op")
		})
	}
}

// BenchmarkForwardCPU compares the process CPU time (user + system, from
// getrusage, both nodes included) an acquire costs at its owner with one
// forwarded to it, at low concurrency (callers goroutines, like an HTTP
// front's few requests in flight per peer), where frames rarely fill by
// themselves. CPU time, unlike ns/op, barely moves with what else runs on
// the machine.
func BenchmarkForwardCPU(b *testing.B) {
	for _, callers := range []int{4, 16} {
		b.Run(fmt.Sprintf("local/c%d", callers), func(b *testing.B) { benchForwardCPU(b, 0, callers) })
		b.Run(fmt.Sprintf("forwarded/c%d", callers), func(b *testing.B) { benchForwardCPU(b, 1, callers) })
	}
}

func benchForwardCPU(b *testing.B, via, callers int) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}
	}
	c := newCluster(b, 2, limits, BatchConfig{}, noReplication)
	keys := ownedByFirst(c, 1000)
	nd := c.nodes[via]
	var seq atomic.Int64
	ctx := context.Background()
	var wg sync.WaitGroup
	b.ResetTimer()
	start, switches := cpuTime(), contextSwitches()
	for range callers {
		wg.Go(func() {
			for seq.Add(1) <= int64(b.N) {
				key := keys[seq.Load()%int64(len(keys))]
				if _, err := nd.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 100, MaxTokens: 100}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N)/1e3, "cpu-µs/op")
	b.ReportMetric(float64(contextSwitches()-switches)/float64(b.N), "ctxsw/op")
	if calls, frames := nd.Forwarded(); frames > 0 {
		b.ReportMetric(float64(calls)/float64(frames), "calls/frame")
	}
}

// contextSwitches is how many times the process's threads gave up the CPU
// so far, voluntarily (to sleep: a futex, epoll) or not.
func contextSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Nvcsw + ru.Nivcsw
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ownedByFirst returns n keys that c's first node owns.
func ownedByFirst(c *cluster, n int) []string {
	return keysWhere(n, func(k string) bool { m, _ := c.ring.Owner(k); return m.Name == c.nodes[0].Name() })
}
