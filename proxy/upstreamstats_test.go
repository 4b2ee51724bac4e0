package proxy_test

import (
	"encoding/json"
	"net"
	"net/http"
	"testing"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

// upstreamCounts is the "upstream" of /admin/stats: the proxy's upstream
// calls as the admin console shows them.
type upstreamCounts struct {
	Calls       int64   `json:"calls"`
	Unreachable int64   `json:"unreachable"`
	Timeouts    int64   `json:"timeouts"`
	Status4xx   int64   `json:"status_4xx"`
	Status429   int64   `json:"status_429"`
	Status5xx   int64   `json:"status_5xx"`
	Bounds      []int64 `json:"latency_bounds_ms"`
	Latency     []int64 `json:"latency_ms"`
}

func (e *proxyEnv) upstreamCounts(t *testing.T) upstreamCounts {
	t.Helper()
	resp, err := e.client.Get(e.url + "/admin/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Upstream *upstreamCounts `json:"upstream"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || s.Upstream == nil {
		t.Fatalf("GET /admin/stats: %d, upstream %v, %v", resp.StatusCode, s.Upstream, err)
	}
	return *s.Upstream
}

// TestProxyCountsUpstreamCalls: every call the proxy sends upstream is
// counted once, by how it ended (an answer's status class, or no answer),
// and each answer's time to headers falls in one latency bucket.
func TestProxyCountsUpstreamCalls(t *testing.T) {
	lim := limiter.Limits{Requests: 100, Tokens: 1_000_000, Concurrency: 10}
	e := startProxy(t, proxyOpts{tenant: lim})
	if u := e.upstreamCounts(t); u.Calls != 0 || len(u.Latency) != len(u.Bounds)+1 || len(u.Bounds) == 0 {
		t.Fatalf("before any call: %+v", u)
	}
	for _, status := range []int{200, 200, 500, 429, 400} {
		e.up.SetReply(fakeupstream.UpstreamReply{Status: status, PromptTokens: 5, CompletionTokens: 2})
		if a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":10`)); a.code != status {
			t.Fatalf("upstream answered %d, the proxy %d: %s", status, a.code, a.body)
		}
	}
	u := e.upstreamCounts(t)
	answered := int64(0)
	for _, n := range u.Latency {
		answered += n
	}
	if u.Calls != 5 || u.Status5xx != 1 || u.Status429 != 1 || u.Status4xx != 1 || u.Unreachable != 0 || u.Timeouts != 0 || answered != 5 {
		t.Fatalf("after 2 answers, a 500, a 429 and a 400: %+v", u)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	e2 := startProxy(t, proxyOpts{tenant: lim, upstream: dead})
	if a := e2.post(t, "/v1/chat/completions", clientKey, openAIBody("")); a.code != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d %s", a.code, a.body)
	}
	if u := e2.upstreamCounts(t); u.Calls != 1 || u.Unreachable != 1 || u.Status5xx != 0 {
		t.Fatalf("after an unreachable upstream: %+v", u)
	}
}
