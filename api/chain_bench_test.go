package api

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// BenchmarkChainDecision is one acquire and its complete through the
// router and one node in this process (no sockets), over 10,000 tenants,
// for chains of 1, 2 and 3 levels: the tenant alone; the tenant under a
// team; the tenant under a team under an org. Every tenant of a run
// shares its team and org, with limits no run reaches. cpu-ns/op is the
// process's CPU per acquire and complete.
func BenchmarkChainDecision(b *testing.B) {
	for levels := 1; levels <= 3; levels++ {
		b.Run(fmt.Sprintf("levels=%d", levels), func(b *testing.B) {
			r := benchChainRouter(b, func(string, string) router.Chain {
				return router.Chain{Groups: [router.MaxGroups]string{"team", "org"}, NGroups: levels - 1}
			})
			cpu := processCPU()
			acquireComplete(b, r)
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkChainDecisionThreeNodes is BenchmarkChainDecision on a cluster
// of three nodes in this process, joined over loopback TCP with the
// shipped defaults (hot-key slices on), each op sent to the next node's
// decision API in turn, as a balancer spreads gateways: every level's key
// is owned wherever the ring puts it, so a level is decided here, from a
// slice held here, or at another node (consecutive keys of one other
// owner in one call, a run). cpu-ns/op is the whole process's CPU (the
// three nodes') per acquire and complete.
func BenchmarkChainDecisionThreeNodes(b *testing.B) {
	for levels := 1; levels <= 3; levels++ {
		b.Run(fmt.Sprintf("levels=%d", levels), func(b *testing.B) {
			apis := benchCluster(b, 3, func(string, string) router.Chain {
				return router.Chain{Groups: [router.MaxGroups]string{"team", "org"}, NGroups: levels - 1}
			})
			var next atomic.Uint64
			cpu := processCPU()
			acquireCompleteOn(b, func() *testAPI { return apis[next.Add(1)%uint64(len(apis))] })
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchCluster starts n nodes joined in one ring over loopback, each with
// its router and decision API, with limits no run reaches.
func benchCluster(b *testing.B, n int, chain func(tenant, model string) router.Chain) []*testAPI {
	b.Helper()
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, LeaseTTL: time.Minute}
	}
	var nodes []*node.Node
	var members []ring.Member
	for i := range n {
		nd, err := node.New(node.Config{Name: fmt.Sprintf("n%d", i+1), LimitsFor: limits})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { nd.Close() })
		nodes = append(nodes, nd)
		members = append(members, ring.Member{Name: nd.Name(), Peer: nd.PeerAddr()})
	}
	rg, err := ring.New(ring.Config{}, members)
	if err != nil {
		b.Fatal(err)
	}
	apis := make([]*testAPI, n)
	for i, nd := range nodes {
		nd.SetRing(rg)
		apis[i] = newAPI(b, nd, router.Config{Limits: limits, Chain: chain}, Config{})
	}
	return apis
}

// processCPU is the CPU time this process has used, user and system, in
// nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
