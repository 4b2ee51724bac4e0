package rls

import (
	"fmt"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

// TestForwardedDescriptors: on two in-process nodes sharing a ring, a
// descriptor key owned by the first is decided there for calls made at
// the second: the owner finds the key's limits (KeyLimits), a request's
// hits and a reservation's lease id cross the peer protocol, so the
// stream's end settles, at the owner, what its start reserved.
func TestForwardedDescriptors(t *testing.T) {
	descs, err := descriptors.Load(configDir)
	if err != nil {
		t.Fatal(err)
	}
	limits := func(key string) limiter.Limits {
		l, _ := KeyLimits(descs, key)
		if l.LeaseTTL == 0 {
			l.LeaseTTL = slotTTL
		}
		return l
	}
	var nodes []*node.Node
	var members []ring.Member
	for i := range 2 {
		n, err := node.New(node.Config{Name: fmt.Sprintf("n%d", i+1), LimitsFor: limits})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
		members = append(members, ring.Member{Name: n.Name(), Peer: n.PeerAddr()})
	}
	rg, err := ring.New(ring.Config{}, members)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.SetRing(rg)
	}
	r, err := router.New(nodes[1], router.Config{Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	srv, err := New(r, Config{MaxTokens: maxCompletion})
	if err != nil {
		t.Fatal(err)
	}
	srv.SetDescriptors(descs)
	ownedByN1 := func(domain, key string) string {
		for i := range 10000 {
			v := fmt.Sprint(i)
			if m, _ := rg.Owner(descriptors.Key(domain, []descriptors.Entry{{Key: key, Value: v}})); m.Name == "n1" {
				return v
			}
		}
		t.Fatal("no key owned by n1")
		return ""
	}
	call := func(req *pb.RateLimitRequest) *pb.RateLimitResponse {
		t.Helper()
		resp, err := srv.ShouldRateLimit(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	number := ownedByN1("messaging", "to_number")
	for i, want := range []struct {
		code      pb.RateLimitResponse_Code
		remaining uint32
	}{{pb.RateLimitResponse_OK, 40}, {pb.RateLimitResponse_OVER_LIMIT, 0}, {pb.RateLimitResponse_OK, 0}} {
		hits := uint32(60)
		if i == 2 {
			hits = 40
		}
		resp := call(request("messaging", hits, desc("to_number", number)))
		if resp.GetOverallCode() != want.code || resp.GetStatuses()[0].GetLimitRemaining() != want.remaining {
			t.Errorf("hits %d, call %d: %v, want %v with %d remaining", hits, i, resp, want.code, want.remaining)
		}
	}

	tenant := ownedByN1("llm", "tenant")
	start := request("llm", 0, desc("tenant", tenant, "request_id", "r1"))
	done := request("llm", 0, withHits(desc("tenant", tenant, "request_id", "r1"), 300))
	for i, req := range []*pb.RateLimitRequest{start, start, done} {
		if resp := call(req); resp.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	if n := nodes[1].Keys(); n != 0 {
		t.Errorf("the forwarding node holds %d keys", n)
	}
	st, held := nodes[0].Held(descriptors.Key("llm", []descriptors.Entry{{Key: "tenant", Value: tenant}}))
	if !held || st.Tokens.Limit-st.Tokens.Remaining != 300 || st.Concurrency.Remaining != llmConcurrency {
		t.Errorf("at the owner: held %v, %+v; want 300 tokens counted and every slot free", held, st)
	}
}
