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

// sdkEndpoints is what test/sdk/endpoints.mjs prints.
type sdkEndpoints struct {
	Response struct {
		Status  int               `json:"status"`
		Text    string            `json:"text"`
		Usage   map[string]any    `json:"usage"`
		Headers map[string]string `json:"headers"`
	} `json:"response"`
	ResponseStream struct {
		Text  string         `json:"text"`
		Usage map[string]any `json:"usage"`
		Types []string       `json:"types"`
	} `json:"responseStream"`
	Embedding struct {
		Status  int               `json:"status"`
		Count   int               `json:"count"`
		Dims    []float64         `json:"dims"`
		Usage   map[string]any    `json:"usage"`
		Headers map[string]string `json:"headers"`
	} `json:"embedding"`
	Models struct {
		IDs []string `json:"ids"`
		One string   `json:"one"`
	} `json:"models"`
}

// sdkAnthropic is what test/sdk/anthropic.mjs prints.
type sdkAnthropic struct {
	CountTokens struct {
		Status      int   `json:"status"`
		InputTokens int64 `json:"inputTokens"`
	} `json:"countTokens"`
	Message struct {
		Status  int               `json:"status"`
		Text    string            `json:"text"`
		Usage   map[string]any    `json:"usage"`
		Headers map[string]string `json:"headers"`
	} `json:"message"`
}

// runSDK runs the script test/sdk/<script> with env and decodes what it
// prints into out.
func runSDK(t *testing.T, node, script string, out any, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk/"+script)
	cmd.SysProcAttr = dieWithTest()
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node sdk/%s: %v\nstdout: %s\nstderr: %s", script, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("sdk/%s output %q: %v", script, stdout.String(), err)
	}
	t.Logf("sdk/%s saw: %s", script, stdout.String())
}

// TestSDKEndpoints runs the official OpenAI SDK's Responses API (whole
// and streamed), embeddings and model list, and the Anthropic SDK's token
// count and a message, against a two-node tokenringd cluster proxying to
// the fake upstream: each charged call settles at exactly the usage the
// upstream reported (the tenant's token window afterwards is their sum),
// the model list and the token count pass through uncharged.
func TestSDKEndpoints(t *testing.T) {
	needFull(t)
	node, why := sdkNode()
	if why == "" {
		if _, err := os.Stat("sdk/node_modules/@anthropic-ai/sdk/package.json"); err != nil {
			why = "test/sdk/node_modules lacks @anthropic-ai/sdk: run (cd test/sdk && npm ci)"
		}
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	const (
		model      = "gpt-4o-mini"
		embedModel = "text-embedding-3-small"
		claude     = "claude-sonnet-4-5"
		upstreamSK = "sk-upstream-secret"
		prompt17   = 17 // the usage the fake upstream reports
		cached12   = 12
		done6      = 6
		limit      = 100_000
	)
	up := fakeupstream.NewUpstream(t, upstreamSK)
	up.SetReply(fakeupstream.UpstreamReply{PromptTokens: prompt17, CachedTokens: cached12, CompletionTokens: done6})
	c := NewCluster(t, daemon, 2, fmt.Sprintf(`
limits:
  default: {rpm: 100, tpm: %d, concurrency: 10}
  window: 60s
keys:
  sk-acme-sdk: acme
upstream:
  base_url: %s
  api_key: %s
`, limit, up.URL(), upstreamSK))
	proc := c.Procs[0]
	tenant := func() (tokens, requests, slots int64) {
		t.Helper()
		var ten struct {
			Limits struct {
				Requests, Tokens, Concurrency struct{ Limit, Remaining int64 }
			} `json:"limits"`
		}
		if err := GetJSON(c.Procs[1].URL()+"/v1/tenants/acme", &ten); err != nil {
			t.Fatal(err)
		}
		l := ten.Limits
		return limit - l.Tokens.Remaining, l.Requests.Limit - l.Requests.Remaining, l.Concurrency.Limit - l.Concurrency.Remaining
	}

	var out sdkEndpoints
	runSDK(t, node, "endpoints.mjs", &out, "TOKENRING_BASE_URL="+proc.URL()+"/v1", "TOKENRING_API_KEY=sk-acme-sdk",
		"TOKENRING_MODEL="+model, "TOKENRING_EMBED_MODEL="+embedModel)

	counter := prompt.NewCounter()
	quote := func(s string) json.RawMessage { return json.RawMessage(strconv.Quote(s)) }
	p := int64(counter.Messages(model, []prompt.Message{{Role: "system", Content: quote("Be brief.")}, {Role: "user", Content: quote("Say hello to the proxy, please.")}}))
	used := int64(prompt17 + done6)

	r := out.Response
	if r.Status != 200 || r.Text != "Hello there!" || r.Usage["input_tokens"] != float64(prompt17) || r.Usage["output_tokens"] != float64(done6) {
		t.Errorf("response: %+v", r)
	}
	checkHeaders(t, "response", r.Headers, map[string]string{
		"x-ratelimit-limit-tokens":       strconv.Itoa(limit),
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(limit-p-50, 10), // prompt + max_output_tokens reserved
		"x-ratelimit-remaining-requests": "99",
	})
	rs := out.ResponseStream
	if rs.Text != "Hello there!" || rs.Usage["input_tokens"] != float64(prompt17) || rs.Usage["output_tokens"] != float64(done6) ||
		len(rs.Types) == 0 || rs.Types[0] != "response.created" || rs.Types[len(rs.Types)-1] != "response.completed" {
		t.Errorf("streamed response: %+v", rs)
	}
	e := out.Embedding
	in := int64(counter.Text(embedModel, "The quick brown fox") + counter.Text(embedModel, "jumped over the lazy dog"))
	if e.Status != 200 || e.Count != 2 || fmt.Sprint(e.Dims) != "[0.25 -0.5 1]" || e.Usage["prompt_tokens"] != float64(prompt17) {
		t.Errorf("embedding: %+v", e)
	}
	checkHeaders(t, "embedding", e.Headers, map[string]string{
		"x-ratelimit-remaining-tokens": strconv.FormatInt(limit-2*used-in, 10), // the input alone reserved
	})
	if m := out.Models; fmt.Sprint(m.IDs) != "[gpt-4o-mini text-embedding-3-small]" || m.One != "gpt-4o-mini" {
		t.Errorf("models: %+v", m)
	}
	// Settled exactly: two responses and an embedding, the model list free.
	if tokens, requests, slots := tenant(); tokens != 2*used+prompt17 || requests != 3 || slots != 0 {
		t.Errorf("acme after the OpenAI SDK: %d tokens, %d requests, %d slots held; want %d (the reported usage), 3, 0", tokens, requests, slots, 2*used+prompt17)
	}

	var ant sdkAnthropic
	runSDK(t, node, "anthropic.mjs", &ant, "TOKENRING_URL="+proc.URL(), "TOKENRING_API_KEY=sk-acme-sdk", "TOKENRING_MODEL="+claude)
	if ct := ant.CountTokens; ct.Status != 200 || ct.InputTokens != prompt17 {
		t.Errorf("count tokens: %+v", ct)
	}
	msg := ant.Message
	if msg.Status != 200 || msg.Text != "Hello there!" || msg.Usage["input_tokens"] != float64(prompt17-cached12) ||
		msg.Usage["cache_read_input_tokens"] != float64(cached12) || msg.Usage["output_tokens"] != float64(done6) { // Anthropic's input_tokens leave the cache out
		t.Errorf("message: %+v", msg)
	}
	checkHeaders(t, "message", msg.Headers, map[string]string{
		"anthropic-ratelimit-requests-limit":     "100",
		"anthropic-ratelimit-requests-remaining": "96",
	})
	if tokens, requests, slots := tenant(); tokens != 3*used+prompt17 || requests != 4 || slots != 0 {
		t.Errorf("acme after the Anthropic SDK: %d tokens, %d requests, %d slots held; want %d (the count free), 4, 0", tokens, requests, slots, 3*used+prompt17)
	}

	reqs := up.Requests()
	var paths []string
	for i, r := range reqs {
		paths = append(paths, r.Path)
		if got := r.Header.Get("Authorization") + r.Header.Get("x-api-key"); got != "Bearer "+upstreamSK && got != upstreamSK {
			t.Errorf("upstream request %d (%s) carried %q, not the upstream's key alone", i, r.Path, got)
		}
	}
	if want := "[/v1/responses /v1/responses /v1/embeddings /v1/models /v1/models/gpt-4o-mini /v1/messages/count_tokens /v1/messages]"; fmt.Sprint(paths) != want {
		t.Errorf("upstream got %v, want %s", paths, want)
	}
}
