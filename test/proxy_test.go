package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

// sdkNode returns the node binary for the SDK tests, or why they cannot run.
func sdkNode() (string, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "node is not installed (Node.js 20 or later; apt-get install nodejs npm)"
	}
	if _, err := os.Stat("sdk/node_modules/openai/package.json"); err != nil {
		return "", "test/sdk/node_modules is missing: run (cd test/sdk && npm ci)"
	}
	return node, ""
}

// sdkOutput is what test/sdk/openai.mjs prints.
type sdkOutput struct {
	NonStreaming struct {
		Status  int               `json:"status"`
		Content string            `json:"content"`
		Usage   map[string]any    `json:"usage"`
		Headers map[string]string `json:"headers"`
	} `json:"nonStreaming"`
	Streaming struct {
		Status  int               `json:"status"`
		Content string            `json:"content"`
		Usage   map[string]any    `json:"usage"`
		Chunks  int               `json:"chunks"`
		Headers map[string]string `json:"headers"`
	} `json:"streaming"`
	RateLimited struct {
		Error   string            `json:"error"`
		Class   string            `json:"class"`
		Status  int               `json:"status"`
		Type    string            `json:"type"`
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Headers map[string]string `json:"headers"`
	} `json:"rateLimited"`
}

// TestOpenAISDK runs the official OpenAI SDK for Node against a real
// two-node tokenringd cluster proxying to the fake upstream: a
// non-streaming and a streaming chat completion with exact rate-limit
// headers and settled usage, and a refusal that the SDK surfaces as its
// RateLimitError.
func TestOpenAISDK(t *testing.T) {
	needFull(t)
	node, why := sdkNode()
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	const (
		model      = "gpt-4o-mini"
		upstreamSK = "sk-upstream-secret"
		prompt17   = 17 // the usage the fake upstream reports
		done6      = 6
	)
	up := fakeupstream.NewUpstream(t, upstreamSK)
	up.SetReply(fakeupstream.UpstreamReply{PromptTokens: prompt17, CompletionTokens: done6})
	c := NewCluster(t, daemon, 2, fmt.Sprintf(`
limits:
  default: {rpm: 100, tpm: 100000, concurrency: 10}
  tenants:
    limited: {rpm: 1, tpm: 100000, concurrency: 10}
  window: 60s
keys:
  sk-acme-sdk: acme
  sk-limited-sdk: limited
upstream:
  base_url: %s
  api_key: %s
`, up.URL(), upstreamSK))
	proc := c.Procs[0]

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk/openai.mjs")
	cmd.SysProcAttr = dieWithTest()
	cmd.Env = append(os.Environ(),
		"TOKENRING_BASE_URL="+proc.URL()+"/v1",
		"TOKENRING_API_KEY=sk-acme-sdk",
		"TOKENRING_LIMITED_KEY=sk-limited-sdk",
		"TOKENRING_MODEL="+model,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node sdk/openai.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var out sdkOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("SDK output %q: %v", stdout.String(), err)
	}
	t.Logf("SDK saw: %s", stdout.String())

	// What the proxy counts for the script's prompt, and reserves.
	p := int64(prompt.NewCounter().Messages(model, []prompt.Message{{Role: "user", Content: json.RawMessage(`"Say hello to the proxy, please."`)}}))
	const limit = 100_000
	used := int64(prompt17 + done6)

	ns := out.NonStreaming
	if ns.Status != 200 || ns.Content != "Hello there!" || ns.Usage["prompt_tokens"] != float64(prompt17) || ns.Usage["completion_tokens"] != float64(done6) {
		t.Errorf("non-streaming: %+v", ns)
	}
	checkHeaders(t, "non-streaming", ns.Headers, map[string]string{
		"x-ratelimit-limit-requests":     "100",
		"x-ratelimit-remaining-requests": "99",
		"x-ratelimit-limit-tokens":       "100000",
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(limit-p-50, 10), // prompt + max_tokens reserved
		"ratelimit-policy":               `"requests";q=100;w=60, "tokens";q=100000;qu="tokens";w=60, "concurrency";q=10;qu="concurrent-requests"`,
	})

	st := out.Streaming
	// role chunk, three content chunks, finish chunk, usage chunk.
	if st.Status != 200 || st.Content != "Hello there!" || st.Chunks != 6 || st.Usage["prompt_tokens"] != float64(prompt17) || st.Usage["completion_tokens"] != float64(done6) {
		t.Errorf("streaming: %+v", st)
	}
	// The second request reserves prompt + min(max_tokens, 1.5 × the average completion so far).
	est := p + min(50, int64(math.Ceil(limiter.DefaultCompletionFactor*done6)))
	checkHeaders(t, "streaming", st.Headers, map[string]string{
		"x-ratelimit-remaining-requests": "98",
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(limit-used-est, 10),
	})

	rl := out.RateLimited
	if rl.Class != "RateLimitError" || rl.Status != 429 || rl.Type != "requests" || rl.Code != "rate_limit_exceeded" {
		t.Errorf("rate limited: %+v", rl)
	}
	ms, err := strconv.ParseInt(rl.Headers["retry-after-ms"], 10, 64)
	if err != nil || ms <= 0 || rl.Headers["retry-after"] != strconv.FormatInt((ms+999)/1000, 10) || rl.Headers["x-ratelimit-remaining-requests"] != "0" {
		t.Errorf("rate-limited headers: %v", rl.Headers)
	}

	// The upstream saw its own key, never the clients', and was asked for
	// the usage chunk.
	reqs := up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("upstream got %d requests, want 3 (two of acme, one of limited)", len(reqs))
	}
	for i, r := range reqs {
		if r.Header.Get("Authorization") != "Bearer "+upstreamSK {
			t.Errorf("upstream request %d: Authorization %q", i, r.Header.Get("Authorization"))
		}
		for name, vv := range r.Header {
			if v := strings.Join(vv, ","); strings.Contains(v, "-sdk") {
				t.Errorf("upstream request %d carries a client key: %s: %s", i, name, v)
			}
		}
	}
	if opts, _ := reqs[1].Body["stream_options"].(map[string]any); reqs[1].Body["stream"] != true || opts["include_usage"] != true {
		t.Errorf("streaming request upstream: %v", reqs[1].Body)
	}

	// Settled exactly: the tenant's window holds the reported usage, on any node.
	var ten struct {
		Limits struct {
			Requests, Tokens, Concurrency struct{ Limit, Remaining int64 }
		} `json:"limits"`
	}
	if err := GetJSON(c.Procs[1].URL()+"/v1/tenants/acme", &ten); err != nil {
		t.Fatal(err)
	}
	if l := ten.Limits; l.Tokens.Remaining != limit-2*used || l.Requests.Remaining != 98 || l.Concurrency.Remaining != 10 {
		t.Errorf("acme after the SDK calls: %+v, want tokens %d, requests 98, all 10 slots free", l, limit-2*used)
	}
}

func checkHeaders(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}
