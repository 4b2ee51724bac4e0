package rls

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

// FuzzShouldRateLimit: any request's bytes, checked, resolved against the
// test's files and answered from any results its keys could give, never
// panics; a request check refuses is never resolved, and an answer has
// one status per descriptor, in order.
func FuzzShouldRateLimit(f *testing.F) {
	for _, req := range []*pb.RateLimitRequest{
		request("mongo_cps", 0, desc("database", "users"), desc("database", "other")),
		request("messaging", 3, withHits(desc("to_number", "1"), 0), desc("message_type", "marketing", "to_number", "1")),
		request("llm", 0, desc("tenant", "acme", "request_id", "r1")),
		request("llm", 0, withHits(desc("tenant", "acme", "request_id", "r1"), 250)),
		request("llm", 0, withHits(desc("tenant", "acme"), 250)),
		request("example7", 0, desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")),
		request("mongo_cps", 0, withLimit(desc("database", "users"), 2, descriptors.Minute)),
		request("edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5")),
		request("example6", 0, desc("service", "s", "user", "user-a")),
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, byte(0), int64(5))
	}
	cfg, err := descriptors.Load(configDir)
	if err != nil {
		f.Fatal(err)
	}
	d := newDescState(cfg)
	f.Fuzz(func(t *testing.T, data []byte, outcome byte, remaining int64) {
		var req pb.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		if check(&req) != nil {
			return
		}
		var p plan
		if err := (planner{maxTokens: maxCompletion}).plan(d, &req, outcome&1 == 0, &p); err != nil {
			return
		}
		if len(p.items) != len(req.GetDescriptors()) || len(p.hits) > len(p.items) {
			t.Fatalf("%d items and %d hits for %d descriptors", len(p.items), len(p.hits), len(req.GetDescriptors()))
		}
		res := make([]router.HitResult, len(p.hits))
		for i, h := range p.hits {
			if h.Key == "" || (h.Op == node.OpAcquire && h.Req.Hits < 0) {
				t.Fatalf("hit %d: %+v", i, h)
			}
			dim := limiter.DimStatus{Limit: max(remaining, 0) + int64(outcome), Remaining: remaining, Reset: time.Duration(remaining) * time.Millisecond}
			res[i] = router.HitResult{Refused: outcome&2 != 0, Held: outcome&4 != 0, RetryAfter: time.Duration(outcome) * time.Second,
				Status: limiter.Status{Requests: dim, Tokens: dim, Concurrency: dim}}
		}
		resp := answer(&p, res, outcome&8 != 0, nil)
		if len(resp.GetStatuses()) != len(req.GetDescriptors()) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(req.GetDescriptors()))
		}
	})
}
