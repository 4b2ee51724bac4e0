package node

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/tokenring/tokenring/limiter"
)

// slidingLog is the classic central-store sliding window: a sorted set of
// every admitted request per key, trimmed and counted by one Lua script per
// decision (what most Redis rate limiters do).
var slidingLog = redis.NewScript(`
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - window)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], window)
  return 1
end
return 0`)

// BenchmarkVersusBaselines compares one admission decision on 1,000 keys,
// side by side in one run: tokenring's owner deciding in memory (acquire +
// release, so it also keeps a lease and a slot), the classic Redis sorted-set
// sliding log in a Lua script against a real redis-server on loopback, and a
// per-node golang.org/x/time/rate limiter (fast, but each node only knows its
// own traffic). All with a limit no request reaches, so every decision admits.
func BenchmarkVersusBaselines(b *testing.B) {
	const keys = 1000
	name := func(i int64) string { return "t:bench-" + strconv.FormatInt(i%keys, 10) }
	b.Run("tokenring-owner", func(b *testing.B) {
		nd, err := New(Config{Name: "n1", LimitsFor: func(string) limiter.Limits { return limiter.Limits{Requests: 1 << 40} }, ReplicationInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer nd.Close()
		var seq atomic.Int64
		ctx := context.Background()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := name(seq.Add(1))
				a, err := nd.Do(ctx, Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}})
				if err != nil || !a.Decision.Allowed {
					b.Fatalf("%+v %v", a, err)
				}
				nd.Do(ctx, Call{Op: OpRelease, Key: key, Lease: a.Decision.Lease})
			}
		})
	})
	b.Run("redis-sorted-set-lua", func(b *testing.B) {
		client := startRedis(b)
		var seq atomic.Int64
		ctx := context.Background()
		b.SetParallelism(8) // a network round trip each: keep the server busy
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := seq.Add(1)
				now := time.Now().UnixMicro()
				ok, err := slidingLog.Run(ctx, client, []string{name(i)}, now, int64(60e6), int64(1<<40), fmt.Sprint(now, "-", i)).Int()
				if err != nil || ok != 1 {
					b.Fatalf("%d %v", ok, err)
				}
			}
		})
	})
	b.Run("local-x-time-rate", func(b *testing.B) {
		var limiters sync.Map
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := name(seq.Add(1))
				l, ok := limiters.Load(key)
				if !ok {
					l, _ = limiters.LoadOrStore(key, newBaselineLimiter())
				}
				if !l.(*rate.Limiter).Allow() {
					b.Fatal("refused")
				}
			}
		})
	})
}

// Per-node x/time/rate baseline: a finite rate and burst that no run of
// BenchmarkVersusBaselines exhausts (a key gets about b.N/1,000 decisions, a
// minute's run some millions in all), so every decision admits, but only
// after the token bucket's arithmetic: replenish by the time elapsed, cap at
// the burst, take one. rate.Inf would return before any of it.
const (
	baselineRate  = rate.Limit(1e12) // tokens a second
	baselineBurst = 1 << 40
)

func newBaselineLimiter() *rate.Limiter { return rate.NewLimiter(baselineRate, baselineBurst) }

// TestBaselineLimiterDoesTheTokenMath checks that the x/time/rate baseline
// of BenchmarkVersusBaselines measures a token bucket: at one instant it
// admits its burst, then refuses what the elapsed time has not replenished (an
// infinite rate admits everything), admits again once time has, and at the
// benchmark's pace it never refuses.
func TestBaselineLimiterDoesTheTokenMath(t *testing.T) {
	l := newBaselineLimiter()
	t0 := time.Now()
	if !l.AllowN(t0, baselineBurst) {
		t.Fatalf("refused its burst of %d", baselineBurst)
	}
	// At 1e12 tokens a second, 1,000 tokens take a nanosecond: the
	// smallest wait a time.Duration can express (a smaller deficit rounds
	// to no wait at all, and is admitted).
	if l.AllowN(t0, 1000) {
		t.Fatal("admitted 1,000 past an empty bucket at the same instant: the limiter does no token math (rate.Inf?)")
	}
	if !l.AllowN(t0.Add(time.Microsecond), 1000) { // a microsecond replenishes a million
		t.Fatal("refused once replenished")
	}
	l = newBaselineLimiter()
	for i := range 100_000 { // back to back: the benchmark's pace, one key
		if !l.Allow() {
			t.Fatalf("refused decision %d", i)
		}
	}
}

// TestSlidingLogMemoryGrowsWithRate measures what the sorted-set design costs
// per key as the rate grows, against tokenring's constant bytes per key
// (limiter.BenchmarkBytesPerKey: 1,587 B whatever the rate). It logs the
// figures quoted in BENCHMARKS.md and checks the growth it claims.
func TestSlidingLogMemoryGrowsWithRate(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: writes 11,000 entries to redis")
	}
	client := startRedis(t)
	ctx := context.Background()
	usage := map[int]int64{}
	for _, perWindow := range []int{1000, 10000} {
		key := fmt.Sprintf("t:rate-%d", perWindow)
		base := time.Now().UnixMicro()
		for i := range perWindow {
			now := base + int64(i)
			if _, err := slidingLog.Run(ctx, client, []string{key}, now, int64(60e6), int64(1<<40), fmt.Sprint(now, "-", i)).Int(); err != nil {
				t.Fatal(err)
			}
		}
		n, err := client.MemoryUsage(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		usage[perWindow] = n
		t.Logf("sorted-set sliding log at %d requests per window: %d bytes for the key (%.0f B per request)", perWindow, n, float64(n)/float64(perWindow))
	}
	if usage[10000] < 5*usage[1000] {
		t.Fatalf("memory %d at 10k/window vs %d at 1k/window: expected growth with the rate", usage[10000], usage[1000])
	}
}
