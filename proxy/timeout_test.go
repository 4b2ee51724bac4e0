package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// slowCluster is a cluster whose owners are alive but answer nothing
// before the caller's deadline: every call ends with ctx's deadline
// error, as a peer client's call does.
type slowCluster struct{ ring *ring.Ring }

func (slowCluster) Do(ctx context.Context, _ node.Call) (node.Answer, error) {
	<-ctx.Done()
	return node.Answer{}, fmt.Errorf("peer 127.0.0.1:2: %w", ctx.Err())
}
func (c slowCluster) Ring() *ring.Ring { return c.ring }
func (slowCluster) Name() string       { return "n1" }

// counter returns the value of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return promtest.Counter(t, reg, name)
}

// The proxy answers an owner alive but slower than forward_max_wait (the
// router's OwnerTimeoutError) in the provider's error shape: a 503 with
// retry-after headers, and nothing sent upstream.
func TestProxyOwnerTimeout(t *testing.T) {
	const maxWait = 20 * time.Millisecond
	rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, _ := newServer(t, slowCluster{rg}, router.Config{
		Limits:         func(string) limiter.Limits { return limiter.Limits{Requests: 30} },
		ForwardMaxWait: maxWait,
		Registry:       reg,
	}, Config{
		Tenant: func(k string) (string, bool) { return "acme", k == "sk-acme" },
		OpenAI: Upstream{BaseURL: "http://127.0.0.1:1/v1"}, Anthropic: Upstream{BaseURL: "http://127.0.0.1:1/v1"},
	}, nil)
	mux := http.NewServeMux()
	s.Routes(mux)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer sk-acme")
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("retry-after-ms") != "1000" ||
			!strings.Contains(string(raw), "owner of t:acme did not answer within 20ms") {
			t.Fatalf("%s with a slow owner: %d %v %s", tc.path, resp.StatusCode, resp.Header, raw)
		}
	}
	if got := counter(t, reg, "tokenring_owner_timeouts_total"); got != 2 {
		t.Fatalf("owner timeouts counted %v, want 2", got)
	}
}
