package fallback

import (
	"fmt"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// BenchmarkDegradedAcquire measures one degraded acquire (owner down: the
// local share) over a fallback already holding keys entries, each with a
// window counting its admissions: the cost per call must not grow with the
// number of keys held.
func BenchmarkDegradedAcquire(b *testing.B) {
	for _, keys := range []int{1_000, 200_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			clock := newFakeClock()
			d := NewState(clock.Now, 0)
			l := limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, LeaseTTL: time.Hour}
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("t:tenant-%07d", i)
				if _, reason, _ := d.Acquire(names[i], l, 3, 10, 1); reason != limiter.None {
					b.Fatalf("refused: %v", reason)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, reason, _ := d.Acquire(names[i], l, 3, 10, 1); reason != limiter.None {
					b.Fatalf("refused: %v", reason)
				}
				if i++; i == keys {
					i = 0
				}
			}
			if e := d.entries(); e != keys {
				b.Fatalf("%d entries, want %d", e, keys)
			}
		})
	}
}
