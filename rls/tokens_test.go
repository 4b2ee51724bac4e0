package rls

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/rls/descriptors"
)

// The llm domain's limit (testdata/config/llm.yaml), and the completion a
// reservation may use (Config.MaxTokens).
const (
	llmTokens      = 100_000
	llmConcurrency = 8
	maxCompletion  = 1000
)

// TestStreamedTokens runs 200 parallel streams against a token and
// concurrency limit, each as Envoy makes it: the request-time call
// (descriptors tenant and request_id, no hits_addend) reserves, the
// stream-done call (the same descriptor, hits_addend the real usage)
// settles. Each stream tries again until admitted or the tokens run out.
// The admitted usage never exceeds the limit and fills it to within one
// reservation; the key's token window is exactly the sum of the settled
// usages (every reservation settled to its real usage); and never more
// than the concurrency limit are in flight between the two calls.
func TestStreamedTokens(t *testing.T) {
	h := start(t, setup{cfg: Config{MaxTokens: maxCompletion}})
	var inFlight, peak, admitted, usage, refused atomic.Int64
	var wg sync.WaitGroup
	for s := range 200 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			for attempt := 0; ; attempt++ {
				rid := strconv.Itoa(s) + "-" + strconv.Itoa(attempt)
				resp, err := h.call(t, "", request("llm", 0, desc("tenant", "acme", "request_id", rid)))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetOverallCode() != pb.RateLimitResponse_OK {
					refused.Add(1)
					if resp.GetStatuses()[0].GetLimitRemaining() != 0 {
						t.Errorf("refused with %d remaining", resp.GetStatuses()[0].GetLimitRemaining())
					}
					// Given up when no reservation fits (the clock stands
					// still); else tried again after a pause (a client's
					// back-off).
					if h.status(t).Tokens.Remaining < maxCompletion {
						return
					}
					time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Millisecond))))
					continue
				}
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				// A usage within the reservation: the key's average stays
				// in [700, 1000], so 1.5 × it is never below the
				// reservation's bound of maxCompletion.
				u := 700 + rng.Int64N(301)
				admitted.Add(1)
				usage.Add(u)
				runtime.Gosched() // the stream, while others try
				inFlight.Add(-1)  // before the stream-done call frees the slot
				done, err := h.call(t, "", request("llm", 0, withHits(desc("tenant", "acme", "request_id", rid), uint64(u))))
				if err != nil || done.GetOverallCode() != pb.RateLimitResponse_OK {
					t.Errorf("stream-done call: %v %v", done, err)
				}
				return
			}
		})
	}
	wg.Wait()
	// Streams that gave up while others were about to settle may have
	// left room for a last few: one after the other, until one is refused.
	for i := 0; ; i++ {
		rid := "last-" + strconv.Itoa(i)
		if h.must(t, request("llm", 0, desc("tenant", "acme", "request_id", rid))).GetOverallCode() != pb.RateLimitResponse_OK {
			break
		}
		admitted.Add(1)
		usage.Add(700)
		h.must(t, request("llm", 0, withHits(desc("tenant", "acme", "request_id", rid), 700)))
	}
	if p := peak.Load(); p > llmConcurrency {
		t.Errorf("%d streams in flight at once, the limit is %d", p, llmConcurrency)
	}
	if u := usage.Load(); u > llmTokens || u <= llmTokens-maxCompletion {
		t.Errorf("admitted usage %d: want at most %d, and within one reservation (%d) of it once a stream is refused", u, llmTokens, maxCompletion)
	}
	a, err := h.node.Do(t.Context(), node.Call{Op: node.OpStatus, Key: descriptors.Key("llm", []descriptors.Entry{{Key: "tenant", Value: "acme"}})})
	if err != nil {
		t.Fatal(err)
	}
	st := a.Decision.Status
	if used := st.Tokens.Limit - st.Tokens.Remaining; used != usage.Load() {
		t.Errorf("the key's token window holds %d, the settled usages sum to %d", used, usage.Load())
	}
	if st.Concurrency.Remaining != llmConcurrency {
		t.Errorf("%d slots free after every stream ended, want %d", st.Concurrency.Remaining, llmConcurrency)
	}
	if n := promtest.Counter(t, h.reg, "tokenring_rls_unmatched_settles_total"); n != 0 {
		t.Errorf("%v stream-done calls found no reservation", n)
	}
	t.Logf("%d streams admitted (%d tokens), %d refusals, peak %d in flight", admitted.Load(), usage.Load(), refused.Load(), peak.Load())
}

// TestTokenReservationPairs: the request-time call (no hits_addend, or 0)
// reserves the key's estimate and a slot under the lease its request id
// names, a repeat of it is charged once, the stream-done call settles it to the real usage
// and frees the slot, and a reservation never settled keeps its tokens
// but frees its slot after the lease TTL.
func TestTokenReservationPairs(t *testing.T) {
	h := start(t, setup{cfg: Config{MaxTokens: maxCompletion}})
	now := h.clock.Now()
	minute := resetAt(time.Minute, now, now)
	start := func(rid string) *pb.RateLimitRequest {
		return request("llm", 0, desc("tenant", "acme", "request_id", rid))
	}
	done := func(rid string, u uint64) *pb.RateLimitRequest {
		return request("llm", 0, withHits(desc("tenant", "acme", "request_id", rid), u))
	}
	expect(t, "start r1", h.must(t, start("r1")), pb.RateLimitResponse_OK, ok(llmTokens, descriptors.Minute, "", llmTokens-maxCompletion, minute))
	expect(t, "start r1 again", h.must(t, start("r1")), pb.RateLimitResponse_OK, ok(llmTokens, descriptors.Minute, "", llmTokens-maxCompletion, minute))
	expect(t, "done r1: 250", h.must(t, done("r1", 250)), pb.RateLimitResponse_OK, ok(llmTokens, descriptors.Minute, "", llmTokens-250, minute))
	expect(t, "done r1 again", h.must(t, done("r1", 250)), pb.RateLimitResponse_OK, ok(llmTokens, descriptors.Minute, "", llmTokens-250, minute))
	if n := promtest.Counter(t, h.reg, "tokenring_rls_unmatched_settles_total"); n != 1 {
		t.Errorf("unmatched settles %v, want 1 (the repeat)", n)
	}
	// The key's average completion is now 250: a reservation is 375. A
	// hits_addend of 0 (Envoy Gateway's request path) reserves too.
	expect(t, "start r2 with hits_addend 0", h.must(t, done("r2", 0)), pb.RateLimitResponse_OK, ok(llmTokens, descriptors.Minute, "", llmTokens-250-375, minute))
	expect(t, "start r2 again", h.must(t, start("r2")), pb.RateLimitResponse_OK, ok(llmTokens, descriptors.Minute, "", llmTokens-250-375, minute))
	st := h.status(t)
	if st.Concurrency.Remaining != llmConcurrency-1 {
		t.Errorf("%d slots free with r2 in flight, want %d", st.Concurrency.Remaining, llmConcurrency-1)
	}
	h.clock.Advance(slotTTL)
	st = h.status(t)
	if st.Concurrency.Remaining != llmConcurrency || st.Tokens.Limit-st.Tokens.Remaining != 250+375 {
		t.Errorf("after the lease TTL: %+v; want every slot free and r2's 375 still charged", st)
	}
}

// status is the llm tenant key's status at its owner.
func (h *harness) status(t testing.TB) limiter.Status {
	t.Helper()
	a, err := h.node.Do(t.Context(), node.Call{Op: node.OpStatus, Key: descriptors.Key("llm", []descriptors.Entry{{Key: "tenant", Value: "acme"}})})
	if err != nil {
		t.Fatal(err)
	}
	return a.Decision.Status
}
