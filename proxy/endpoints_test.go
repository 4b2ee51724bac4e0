package proxy_test

// The endpoints beside chat completions and messages, in process through
// tokenringd's server: OpenAI's Responses API and embeddings (charged),
// the model list and Anthropic's token count (passed through uncharged),
// and the rate-limit headers of the level that refused.

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

const (
	userText       = "Say hello to the proxy, please."
	embeddingModel = "text-embedding-3-small"
)

func responsesBody(extra string) string {
	return `{"model":"` + model + `","input":"` + userText + `"` + extra + `}`
}

// TestProxyResponses: a response, whole and streamed, reserves the prompt
// counted from its input plus max_output_tokens, settles with the usage
// it reports (cached tokens inside input_tokens), before its end reaches
// the client; the request and every event pass through untouched.
func TestProxyResponses(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 2}})
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 21, CachedTokens: 16, CompletionTokens: 7})
	p := int64(counter.Messages(model, []prompt.Message{{Role: "user", Content: json.RawMessage(strconv.Quote(userText))}}))

	body := responsesBody(`,"max_output_tokens":500`)
	a := e.post(t, "/v1/responses", clientKey, body)
	if a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	var r struct {
		Output []struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"output"`
		Usage struct {
			InputTokens int64 `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(a.body), &r); err != nil || len(r.Output) != 1 || r.Output[0].Content[0].Text != "Hello there!" || r.Usage.InputTokens != 21 {
		t.Fatalf("answer not passed through: %s (%v)", a.body, err)
	}
	if got, want := a.header.Get("x-ratelimit-remaining-tokens"), strconv.FormatInt(10_000-p-500, 10); got != want {
		t.Errorf("x-ratelimit-remaining-tokens = %q, want %q (prompt + max_output_tokens reserved)", got, want)
	}
	if got := a.header.Get("x-ratelimit-limit-requests"); got != "10" {
		t.Errorf("x-ratelimit-limit-requests = %q, want the tenant's 10, not the upstream's", got)
	}
	if st := e.status(t); st.Tokens.Remaining != 10_000-28 || st.Concurrency.Remaining != 2 {
		t.Fatalf("after a whole response: %+v, want tokens %d (21 + 7 reported) and both slots free", st, 10_000-28)
	}

	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 30, CachedTokens: 30, CompletionTokens: 12, Text: []string{"one", " two", " three"}, Linger: 200 * time.Millisecond})
	a = e.postUntil(t, "/v1/responses", responsesBody(`,"stream":true`), "event: response.completed", func() {
		if st := e.status(t); st.Tokens.Remaining != 10_000-28-42 || st.Concurrency.Remaining != 2 {
			t.Errorf("at response.completed: %+v, want tokens %d and both slots free", st, 10_000-28-42)
		}
	})
	if a.code != 200 || a.err != nil || !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v %q %s", a.code, a.err, a.header.Get("Content-Type"), a.body)
	}
	evs := events(t, a.body)
	var text strings.Builder
	for _, d := range evs {
		var ev struct {
			Type, Delta string
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	if len(evs) != 11 || text.String() != "one two three" || !strings.Contains(evs[len(evs)-1], `"type":"response.completed"`) {
		t.Errorf("events passed on: %d, text %q: %q", len(evs), text.String(), evs)
	}
	reqs := e.up.Requests()
	if len(reqs) != 2 || string(reqs[0].Raw) != body || string(reqs[1].Raw) != responsesBody(`,"stream":true`) || reqs[0].Path != "/v1/responses" {
		t.Fatalf("upstream got %d requests: %+v", len(reqs), reqs)
	}
	if got := reqs[1].Header.Get("Authorization"); got != "Bearer "+upstreamKey {
		t.Errorf("upstream saw Authorization %q", got)
	}
}

// TestProxyResponsesCut: a response stream cut before response.completed
// settles as a cut chat stream does, with the counted prompt and the text
// streamed, and frees the slot.
func TestProxyResponsesCut(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Tokens: 10_000, Concurrency: 1}})
	e.up.SetReply(fakeupstream.UpstreamReply{Text: []string{"alpha", " beta", " gamma", " delta"}, CutAfter: 2, PromptTokens: 99, CompletionTokens: 99})
	a := e.post(t, "/v1/responses", clientKey, responsesBody(`,"max_output_tokens":1000,"stream":true`))
	if a.code != 200 || a.err == nil {
		t.Fatalf("want a 200 whose body is cut, got %d, err %v", a.code, a.err)
	}
	if !strings.Contains(a.body, `" beta"`) || strings.Contains(a.body, "gamma") {
		t.Errorf("client got %q", a.body)
	}
	p := int64(counter.Messages(model, []prompt.Message{{Role: "user", Content: json.RawMessage(strconv.Quote(userText))}}))
	want := 10_000 - p - int64(counter.Text(model, "alpha beta"))
	if st := e.status(t); st.Tokens.Remaining != want || st.Concurrency.Remaining != 1 {
		t.Fatalf("after the cut: %+v, want tokens %d (counted prompt + streamed text) and the slot free", st, want)
	}
}

// TestProxyEmbeddings: an embedding reserves its counted input and no
// completion, and settles with usage.prompt_tokens; token ids count by
// their number.
func TestProxyEmbeddings(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 2}})
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 9})
	texts := []string{"The quick brown fox", "jumped over the lazy dog"}
	in := int64(counter.Text(embeddingModel, texts[0]) + counter.Text(embeddingModel, texts[1]))
	a := e.post(t, "/v1/embeddings", clientKey, `{"model":"`+embeddingModel+`","input":["`+texts[0]+`","`+texts[1]+`"],"encoding_format":"float"}`)
	if a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if data, _ := a.json(t)["data"].([]any); len(data) != 2 {
		t.Errorf("answer not passed through: %s", a.body)
	}
	if got, want := a.header.Get("x-ratelimit-remaining-tokens"), strconv.FormatInt(10_000-in, 10); got != want {
		t.Errorf("x-ratelimit-remaining-tokens = %q, want %q (the input alone reserved)", got, want)
	}
	if st := e.status(t); st.Tokens.Remaining != 10_000-9 || st.Requests.Remaining != 9 || st.Concurrency.Remaining != 2 {
		t.Fatalf("after an embedding: %+v, want tokens %d (9 reported)", st, 10_000-9)
	}
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 5})
	a = e.post(t, "/v1/embeddings", clientKey, `{"model":"`+embeddingModel+`","input":[[1,2,3],[4,5]]}`)
	if got, want := a.header.Get("x-ratelimit-remaining-tokens"), strconv.FormatInt(10_000-9-5, 10); a.code != 200 || got != want {
		t.Errorf("token ids: %d, x-ratelimit-remaining-tokens = %q, want %q (5 ids reserved)", a.code, got, want)
	}
	if st := e.status(t); st.Tokens.Remaining != 10_000-9-5 {
		t.Fatalf("after an embedding of ids: %+v, want tokens %d", st, 10_000-9-5)
	}
}

// TestProxyNewEndpointsBadInput: a body the proxy cannot count is a 400
// in the provider's shape; nothing is charged or forwarded.
func TestProxyNewEndpointsBadInput(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 100_000, Concurrency: 2}})
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":`},
		{"/v1/responses", `{"input":"x"}`},
		{"/v1/responses", `{"model":"gpt-4","input":42}`},
		{"/v1/responses", `{"model":"gpt-4","input":["x"]}`},
		{"/v1/responses", `{"model":"gpt-4","input":"x","max_output_tokens":-5}`},
		{"/v1/embeddings", `{"model":"` + embeddingModel + `"`},
		{"/v1/embeddings", `{"model":"` + embeddingModel + `","input":[]}`},
		{"/v1/embeddings", `{"model":"` + embeddingModel + `","input":[1,"a"]}`},
		{"/v1/embeddings", `{"model":"` + embeddingModel + `","input":{"text":"a"}}`},
	} {
		checkOpenAIError(t, e.post(t, tc.path, clientKey, tc.body), 400, "invalid_request_error", nil)
	}
	checkAnthropicError(t, e.post(t, "/v1/messages/count_tokens", clientKey, `{"model":`, "x-api-key", clientKey), 400, "invalid_request_error")
	for _, path := range []string{"/v1/responses", "/v1/embeddings"} {
		resp, err := e.client.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
			t.Errorf("GET %s: %d Allow %q", path, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	if st := e.status(t); st.Requests.Remaining != 10 || st.Tokens.Remaining != 100_000 {
		t.Fatalf("bad input changed the tenant: %+v", st)
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}

// get sends a request of method to path without a body, with the OpenAI
// bearer key (none when "").
func (e *proxyEnv) get(t testing.TB, method, path, key string) answer {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// TestProxyPassThrough: the model list, a model (its id with slashes
// too) and Anthropic's token count reach the upstream with its key and
// come back as it answered, without the upstream's rate-limit headers;
// an unknown key is a 401 in the provider's shape; nothing is charged.
func TestProxyPassThrough(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 100_000, Concurrency: 2}})
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 14})
	a := e.get(t, http.MethodGet, "/v1/models", clientKey)
	if a.code != 200 || a.json(t)["object"] != "list" || len(a.json(t)["data"].([]any)) != 2 {
		t.Fatalf("model list: %d %s", a.code, a.body)
	}
	if a.header.Get("x-request-id") != "req_fake" || a.header.Get("x-ratelimit-limit-requests") != "" || a.header.Get("RateLimit") != "" {
		t.Errorf("model list headers: %v", a.header)
	}
	for path, id := range map[string]string{"/v1/models/gpt-4o-mini": "gpt-4o-mini", "/v1/models/meta-llama/Llama-3.1-8B": "meta-llama/Llama-3.1-8B", "/v1/models/ft:gpt-4o:acme:x%20y": "ft:gpt-4o:acme:x y"} {
		if a := e.get(t, http.MethodGet, path, clientKey); a.code != 200 || a.json(t)["id"] != id {
			t.Errorf("GET %s: %d %s, want the model %q", path, a.code, a.body, id)
		}
	}
	a = e.post(t, "/v1/messages/count_tokens", "", `{"model":"`+claude+`","messages":`+userMsg+`}`, "x-api-key", clientKey, "anthropic-version", "2023-06-01")
	if a.code != 200 || a.json(t)["input_tokens"] != 14.0 || a.header.Get("anthropic-ratelimit-requests-limit") != "" {
		t.Fatalf("count_tokens: %d %v %s", a.code, a.header, a.body)
	}
	reqs := e.up.Requests()
	if len(reqs) != 5 {
		t.Fatalf("upstream got %d requests, want 5", len(reqs))
	}
	for i, want := range []string{"/v1/models", "", "", "", "/v1/messages/count_tokens"} {
		r := reqs[i]
		if want != "" && r.Path != want {
			t.Errorf("upstream request %d went to %s, want %s", i, r.Path, want)
		}
		if got := r.Header.Get("Authorization") + r.Header.Get("x-api-key"); got != "Bearer "+upstreamKey && got != upstreamKey {
			t.Errorf("upstream request %d carried %q, not the upstream's key alone", i, got)
		}
	}
	if got := reqs[4].Header.Get("anthropic-version"); got != "2023-06-01" || string(reqs[4].Raw) != `{"model":"`+claude+`","messages":`+userMsg+`}` {
		t.Errorf("count_tokens upstream: version %q body %s", got, reqs[4].Raw)
	}

	// An unknown key, a wrong method, a path that is no model id.
	checkOpenAIError(t, e.get(t, http.MethodGet, "/v1/models", "sk-nope"), 401, "invalid_request_error", "invalid_api_key")
	checkOpenAIError(t, e.get(t, http.MethodGet, "/v1/models/x", ""), 401, "invalid_request_error", "invalid_api_key")
	checkAnthropicError(t, e.post(t, "/v1/messages/count_tokens", "", `{}`, "x-api-key", "sk-nope"), 401, "authentication_error")
	if a := e.get(t, http.MethodDelete, "/v1/models/x", clientKey); a.code != 405 || a.header.Get("Allow") != "GET" {
		t.Errorf("DELETE a model: %d Allow %q", a.code, a.header.Get("Allow"))
	}
	if a := e.get(t, http.MethodGet, "/v1/messages/count_tokens", clientKey); a.code != 405 || a.header.Get("Allow") != "POST" {
		t.Errorf("GET count_tokens: %d Allow %q", a.code, a.header.Get("Allow"))
	}
	checkOpenAIError(t, e.get(t, http.MethodGet, "/v1/models/", clientKey), 400, "invalid_request_error", nil)
	if n := len(e.up.Requests()); n != 5 {
		t.Errorf("upstream got %d more requests", n-5)
	}
	if st := e.status(t); st.Requests.Remaining != 10 || st.Tokens.Remaining != 100_000 || st.Concurrency.Remaining != 2 {
		t.Fatalf("passed through requests changed the tenant: %+v", st)
	}
}

// TestProxyPoolRefusalHeaders: a 429 of the model's pool carries the
// pool's limit, remaining and reset (not the tenant's) in OpenAI's
// x-ratelimit-*, the IETF fields and Anthropic's anthropic-ratelimit-*;
// an admitted request's headers show the tenant.
func TestProxyPoolRefusalHeaders(t *testing.T) {
	pool := limiter.Limits{Requests: 2, Tokens: 50_000}
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 100_000},
		pools: map[string]limiter.Limits{model: pool, claude: pool}})
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 20, CompletionTokens: 5})
	for range 2 {
		if a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":10`)); a.code != 200 {
			t.Fatalf("%d %s", a.code, a.body)
		}
	}
	a := e.post(t, "/v1/messages", clientKey, claudeBody(""))
	if a.code != 200 || a.header.Get("anthropic-ratelimit-requests-limit") != "10" || a.header.Get("anthropic-ratelimit-requests-remaining") != "7" ||
		a.header.Get("anthropic-ratelimit-tokens-limit") != "100000" || a.header.Get("x-ratelimit-limit-requests") != "10" {
		t.Fatalf("an admitted message shows the tenant: %d %v", a.code, a.header)
	}
	checkReset(t, a.header.Get("anthropic-ratelimit-requests-reset"))

	a = e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":10`))
	checkOpenAIError(t, a, 429, "requests", "rate_limit_exceeded")
	for h, want := range map[string]string{
		"x-tokenring-refused-by":         "pool:" + model,
		"x-ratelimit-limit-requests":     "2",
		"x-ratelimit-remaining-requests": "0",
		"x-ratelimit-limit-tokens":       "50000",
		"x-ratelimit-remaining-tokens":   strconv.Itoa(50_000 - 2*25),
		"RateLimit-Policy":               `"requests";q=2;w=60, "tokens";q=50000;qu="tokens";w=60`,
	} {
		if got := a.header.Get(h); got != want {
			t.Errorf("OpenAI pool 429: %s = %q, want %q", h, got, want)
		}
	}
	if d, err := time.ParseDuration(a.header.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Minute+time.Second {
		t.Errorf("x-ratelimit-reset-requests = %q", a.header.Get("x-ratelimit-reset-requests"))
	}

	// The Anthropic pool has admitted one message of two.
	if a := e.post(t, "/v1/messages", clientKey, claudeBody("")); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	a = e.post(t, "/v1/messages", clientKey, claudeBody(""))
	checkAnthropicError(t, a, 429, "rate_limit_error")
	for h, want := range map[string]string{
		"x-tokenring-refused-by":                 "pool:" + claude,
		"anthropic-ratelimit-requests-limit":     "2",
		"anthropic-ratelimit-requests-remaining": "0",
		"anthropic-ratelimit-tokens-limit":       "50000",
		"anthropic-ratelimit-tokens-remaining":   strconv.Itoa(50_000 - 2*25),
		"x-ratelimit-limit-requests":             "2",
	} {
		if got := a.header.Get(h); got != want {
			t.Errorf("Anthropic pool 429: %s = %q, want %q", h, got, want)
		}
	}
	checkReset(t, a.header.Get("anthropic-ratelimit-requests-reset"))
	if vv := a.header.Values("anthropic-ratelimit-requests-limit"); len(vv) != 1 {
		t.Errorf("anthropic-ratelimit-requests-limit %q: the upstream's own is not dropped", vv)
	}
}

// checkReset checks an Anthropic reset: an RFC 3339 time in whole
// seconds, within the next window.
func checkReset(t *testing.T, v string) {
	t.Helper()
	at, err := time.Parse(time.RFC3339, v)
	if err != nil || at.Nanosecond() != 0 || !strings.HasSuffix(v, "Z") {
		t.Errorf("reset %q is not an RFC 3339 UTC time in seconds (%v)", v, err)
		return
	}
	if d := time.Until(at); d < 0 || d > time.Minute+2*time.Second {
		t.Errorf("reset %q is %v away, want within the window", v, d)
	}
}
