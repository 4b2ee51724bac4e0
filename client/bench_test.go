package client_test

import (
	"context"
	"testing"

	"github.com/tokenring/tokenring/client"
	"github.com/tokenring/tokenring/limiter"
)

// BenchmarkClientAcquire measures acquires through the client over real
// loopback HTTP (an httptest server in front of one node), 64 callers per
// GOMAXPROCS: single sends one HTTP request per call (MaxBatch 1, up to 64
// in flight); batched lets the client batch (the defaults: up to 4 in
// flight). Limits are unlimited, so every call is admitted (no complete).
func BenchmarkClientAcquire(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  client.Config
	}{
		{"single", client.Config{MaxBatch: 1, MaxInFlight: 64}},
		{"batched", client.Config{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			hs, count := serve(b, map[string]limiter.Limits{}, nil)
			c := newClient(b, hs.URL, bc.cfg)
			req := client.AcquireRequest{Tenant: "acme", PromptTokens: 10, MaxTokens: 10}
			b.SetParallelism(64)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, err := c.Acquire(context.Background(), req)
					if err != nil || !d.Allowed {
						b.Errorf("acquire: %+v %v", d, err)
						return
					}
				}
			})
			b.ReportMetric(float64(count.Load())/float64(b.N), "http/op")
		})
	}
}
