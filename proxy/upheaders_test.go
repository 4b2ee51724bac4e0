package proxy_test

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/proxy"
)

// seenRequest is what the fake upstream received.
type seenRequest struct {
	header http.Header
	query  string
}

// recordingUpstream is an OpenAI- and Anthropic-shaped upstream on
// loopback that records every request's header and query.
func recordingUpstream(t *testing.T) (*httptest.Server, func() []seenRequest) {
	var mu sync.Mutex
	var seen []seenRequest
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{r.Header.Clone(), r.URL.RawQuery})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/messages") {
			_, _ = io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1}}`)
			return
		}
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	return up, func() []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// everyHeader is a client's request with every kind of header: those the
// proxy forwards, those it replaces and those it must drop.
var everyHeader = map[string]string{
	"Accept":               "application/json",
	"Accept-Encoding":      "gzip, br",
	"Anthropic-Version":    "2023-06-01",
	"Anthropic-Beta":       "prompt-caching-2024-07-31",
	"OpenAI-Beta":          "assistants=v2",
	"Idempotency-Key":      "idem-1",
	"Cookie":               "session=tenant-secret",
	"OpenAI-Organization":  "org-tenant-picked",
	"OpenAI-Project":       "proj-tenant-picked",
	"X-Forwarded-For":      "6.6.6.6",
	"Forwarded":            "for=6.6.6.6",
	"X-Real-Ip":            "6.6.6.6",
	"User-Agent":           "tenant-agent/9",
	"Referer":              "https://tenant.example/",
	"Origin":               "https://tenant.example",
	"X-Custom":             "anything",
	"X-Tokenring-Priority": "interactive",
	"Proxy-Authorization":  "Basic Zm9vOmJhcg==",
}

// TestProxyForwardsAllowListedHeaders sends every kind of header through
// the proxy, on the fast path and through net/http, for every endpoint
// (those passed through too), to
// a fake upstream, and asserts exactly the header set that arrives: the
// allow-list, the upstream's key, the proxy's User-Agent, the peer's
// address as X-Forwarded-For, the key's configured OpenAI organisation and
// project, and no query string.
func TestProxyForwardsAllowListedHeaders(t *testing.T) {
	up, seen := recordingUpstream(t)
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 100, Tokens: 1_000_000, Concurrency: 10, Window: time.Minute, LeaseTTL: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		t.Fatal(err)
	}
	r, err := frontdoor.New(n, frontdoor.Config{
		Limits: limits,
		Proxy: proxy.Config{
			Tenant: func(k string) (string, bool) { return "acme", k == "sk-acme" || k == "sk-plain" },
			Account: func(k string) proxy.Account {
				if k == "sk-acme" {
					return proxy.Account{OpenAIOrganization: "org-operator", OpenAIProject: "proj-operator"}
				}
				return proxy.Account{}
			},
			OpenAI:    proxy.Upstream{BaseURL: up.URL + "/v1", APIKey: "sk-upstream"},
			Anthropic: proxy.Upstream{BaseURL: up.URL + "/v1", APIKey: "sk-upstream"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); n.Close() })
	common := map[string]string{
		"Accept":            "application/json",
		"Anthropic-Version": "2023-06-01",
		"Anthropic-Beta":    "prompt-caching-2024-07-31",
		"Openai-Beta":       "assistants=v2",
		"Idempotency-Key":   "idem-1",
		"Content-Type":      "application/json",
		"User-Agent":        proxy.UserAgent,
		"X-Forwarded-For":   "127.0.0.1",
	}
	with := func(extra ...string) map[string]string {
		m := maps.Clone(common)
		for i := 0; i < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	operator := with("Authorization", "Bearer sk-upstream", "Openai-Organization", "org-operator", "Openai-Project", "proj-operator")
	noBody := maps.Clone(operator)
	delete(noBody, "Content-Type")
	chat := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`
	cases := []struct {
		method, path, key, body string
		want                    map[string]string
	}{
		{"POST", "/v1/chat/completions", "sk-acme", chat, operator},
		{"POST", "/v1/chat/completions", "sk-plain", chat, with("Authorization", "Bearer sk-upstream")},
		{"POST", "/v1/messages", "sk-acme", chat, with("X-Api-Key", "sk-upstream")},
		{"POST", "/v1/responses", "sk-acme", `{"model":"m","input":"hello"}`, operator},
		{"POST", "/v1/embeddings", "sk-acme", `{"model":"m","input":"hello"}`, operator},
		{"GET", "/v1/models", "sk-acme", "", noBody},
		{"POST", "/v1/messages/count_tokens", "sk-acme", chat, with("X-Api-Key", "sk-upstream")},
	}
	for _, netHTTP := range []bool{false, true} {
		url, stop := serveRouter(t, r, netHTTP)
		client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
		for _, c := range cases {
			req, err := http.NewRequest(c.method, url+c.path+"?api-version=2024-01-01&org=x", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range everyHeader {
				req.Header.Set(k, v)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+c.key)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("net/http %v %s %s: %d", netHTTP, c.path, c.key, resp.StatusCode)
			}
			all := seen()
			got := all[len(all)-1]
			h := map[string]string{}
			for k, vv := range got.header {
				if k != "Content-Length" { // the body's framing, the transport's own
					h[k] = strings.Join(vv, ", ")
				}
			}
			if !maps.Equal(h, c.want) || got.query != "" {
				t.Errorf("net/http %v %s %s: upstream got\n%v, query %q\nwant\n%v, no query", netHTTP, c.path, c.key, h, got.query, c.want)
			}
		}
		client.CloseIdleConnections()
		stop()
	}
}

// countingCounter records every count.
type countingCounter struct {
	mu sync.Mutex
	n  int
}

func (c *countingCounter) calls() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }

func (c *countingCounter) Text(string, string) int { c.mu.Lock(); c.n++; c.mu.Unlock(); return 1 }
func (c *countingCounter) Messages(string, []prompt.Message) int {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return 1
}

// TestProxyExhaustedNotCounted: through the proxy, an unknown key is a 401
// and a tenant whose request window is full a 429, neither with the
// prompt counted; the admitted requests before were counted.
func TestProxyExhaustedNotCounted(t *testing.T) {
	up, _ := recordingUpstream(t)
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 2, Tokens: 1_000_000, Concurrency: 10, Window: time.Minute, LeaseTTL: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		t.Fatal(err)
	}
	spy := &countingCounter{}
	r, err := frontdoor.New(n, frontdoor.Config{Limits: limits, Counter: spy, Proxy: proxy.Config{
		Tenant: func(k string) (string, bool) { return "acme", k == "sk-acme" },
		OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1", APIKey: "sk-upstream"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); n.Close() })
	url, stop := serveRouter(t, r, false)
	defer stop()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	post := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 50_000)+`"}],"max_tokens":5}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("sk-unknown"); code != 401 || spy.calls() != 0 {
		t.Fatalf("unknown key: %d, %d counts", code, spy.calls())
	}
	for i := range 2 {
		if code := post("sk-acme"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if spy.calls() != 2 {
		t.Fatalf("%d counts for 2 admitted requests", spy.calls())
	}
	if code := post("sk-acme"); code != 429 || spy.calls() != 2 {
		t.Fatalf("exhausted tenant: %d, %d counts (want 429, still 2)", code, spy.calls())
	}
}
