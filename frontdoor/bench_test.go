package frontdoor

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// benchDoor is a door on one node with limits no benchmark reaches, its
// Config's other fields set by cfg; closed when b ends.
func benchDoor(b testing.TB, cfg Config) *Door {
	b.Helper()
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, Window: time.Minute, LeaseTTL: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		b.Fatal(err)
	}
	cfg.Limits = limits
	d, err := New(n, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		d.Close()
		n.Close()
	})
	return d
}

// decisions runs b's ops through serve, each an acquire and its complete
// (two decisions) on the fast path over 1,000 tenants, with head as the
// requests' header lines, and reports decisions/s.
func decisions(b *testing.B, serve func(context.Context, *http1.Request, *http1.Response) bool, head []byte) {
	var resp http1.Response
	acquire := http1.Request{Path: []byte("/v1/acquire"), Head: head}
	complete := http1.Request{Path: []byte("/v1/complete"), Head: head}
	call := func(req *http1.Request) {
		resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
		if !serve(context.Background(), req, &resp) || resp.Status != http.StatusOK {
			b.Fatalf("%s: %d %s", req.Path, resp.Status, resp.Body)
		}
	}
	op := func(i int) {
		tenant := i % 1000
		acquire.Body = fmt.Appendf(acquire.Body[:0], `{"tenant":"t%d","model":"gpt-4o-mini","prompt_tokens":100,"max_tokens":100}`, tenant)
		call(&acquire)
		_, rest, _ := bytes.Cut(resp.Body, []byte(`"lease":"`))
		lease, _, _ := bytes.Cut(rest, []byte(`"`))
		complete.Body = fmt.Appendf(complete.Body[:0], `{"tenant":"t%d","lease":"%s"}`, tenant, lease)
		call(&complete)
	}
	for i := range 1000 {
		op(i) // every tenant's key made before the clock starts
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		op(i * 7919)
	}
	b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkDecisions is a node's decisions on the fast path as tokenringd
// serves them (Door.ServePlain), tracing off: the figure a change to the
// front door must keep. It uses nothing younger than tracing, so that the
// same file measures the code before it (BENCHMARKS.md, "Tracing").
func BenchmarkDecisions(b *testing.B) {
	decisions(b, benchDoor(b, Config{}).ServePlain, nil)
}
