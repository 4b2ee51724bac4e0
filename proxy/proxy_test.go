package proxy_test

// The LLM proxy, in process: a node and its router behind the server
// tokenringd runs (internal/http1's fast path, net/http for the rest; or
// net/http alone), forwarding to fakeupstream.Upstream. This is an
// external test package because it serves the proxy behind the whole front
// door (frontdoor, which imports proxy); it shares the proxy package's
// TestMain, so goleak checks these tests too.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/router"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

// counter is shared: loading an encoding takes a moment. The tests use
// gpt-4 and claude models, both cl100k_base.
var counter = prompt.NewCounter()

const (
	upstreamKey = "sk-upstream"
	clientKey   = "sk-acme"
	model       = "gpt-4"
	claude      = "claude-sonnet-4-5"
	userMsg     = `[{"role":"user","content":"Say hello to the proxy, please."}]`
)

// promptTokens is what the proxy counts for userMsg.
func promptTokens(t testing.TB, anthropic bool) int64 {
	t.Helper()
	var msgs []prompt.Message
	if err := json.Unmarshal([]byte(userMsg), &msgs); err != nil {
		t.Fatal(err)
	}
	if anthropic {
		return int64(counter.AnthropicMessages(claude, "", msgs))
	}
	return int64(counter.Messages(model, msgs))
}

type proxyEnv struct {
	url    string
	client *http.Client
	up     *fakeupstream.Upstream
	node   *node.Node
}

type proxyOpts struct {
	tenant   limiter.Limits            // acme's limits
	pools    map[string]limiter.Limits // by model
	upstream string                    // base URL; empty: the fake upstream
	timeouts proxy.UpstreamTimeouts    // of both upstreams
	netHTTP  bool                      // the fake upstream's net/http client, not the router's own (NewUpstreamClient, as tokenringd runs)
	maxKeys  int                       // the node's MaxKeys; 0: its default
	netHTTP1 bool                      // serve with net/http alone, not tokenringd's server (the fast path, then net/http)
	groups   map[string]limiter.Limits // by group: acme's chain, nearest first, is groupOrder
	chain    []string                  // acme's groups, nearest first
	price    func(model string) (limiter.Price, bool)
}

func startProxy(t *testing.T, o proxyOpts) *proxyEnv {
	t.Helper()
	up := fakeupstream.NewUpstream(t, upstreamKey)
	if o.tenant.Window == 0 {
		o.tenant.Window = time.Minute
	}
	limits := func(key string) limiter.Limits {
		if p, ok := strings.CutPrefix(key, "p:"); ok {
			return o.pools[p]
		}
		if g, ok := strings.CutPrefix(key, "g:"); ok {
			l := o.groups[g]
			l.Window = time.Minute
			return l
		}
		return o.tenant
	}
	var chain func(tenant, model string) router.Chain
	if len(o.chain) > 0 {
		chain = func(string, string) router.Chain {
			c := router.Chain{NGroups: len(o.chain)}
			copy(c.Groups[:], o.chain)
			return c
		}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, MaxKeys: o.maxKeys})
	if err != nil {
		t.Fatal(err)
	}
	base := o.upstream
	if base == "" {
		base = up.URL()
	}
	var client *http.Client // the router's own clients
	if o.netHTTP {
		client = up.Client()
	}
	r, err := frontdoor.New(n, frontdoor.Config{
		Limits: limits,
		PoolFor: func(m string) (string, bool) {
			_, ok := o.pools[m]
			return m, ok
		},
		Counter:  counter,
		Chain:    chain,
		Price:    o.price,
		Budgeted: func() bool { return o.price != nil },
		Proxy: proxy.Config{
			Tenant: func(key string) (string, bool) {
				if key == clientKey {
					return "acme", true
				}
				return "", false
			},
			OpenAI:    proxy.Upstream{BaseURL: base, APIKey: upstreamKey, Timeouts: o.timeouts},
			Anthropic: proxy.Upstream{BaseURL: base, APIKey: upstreamKey, Timeouts: o.timeouts},
			Client:    client,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	url, stop := serveRouter(t, r, o.netHTTP1)
	t.Cleanup(func() {
		stop()
		r.Close()
		n.Close()
	})
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return &proxyEnv{url: url, client: hc, up: up, node: n}
}

// serveRouter serves r on loopback as tokenringd does (internal/http1's
// fast path, r.ServePlain, and net/http for what it declines), or with
// net/http alone; stop closes the server.
func serveRouter(t testing.TB, r *frontdoor.Door, netHTTPOnly bool) (url string, stop func()) {
	t.Helper()
	if netHTTPOnly {
		hs := httptest.NewServer(r)
		return hs.URL, hs.Close
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := http1.NewServer(http1.Config{Handler: r.ServePlain, Fallback: &http.Server{Handler: r}})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
	}
}

// send posts body to path with key (as a bearer token for OpenAI, x-api-key
// for Anthropic) and extra headers.
func (e *proxyEnv) send(ctx context.Context, t testing.TB, path, key, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch {
	case key == "":
	case path == "/v1/messages":
		req.Header.Set("x-api-key", key)
		req.Header.Set("anthropic-version", "2023-06-01")
	default:
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// answer is a response read whole.
type answer struct {
	code   int
	header http.Header
	body   string
	err    error // reading the body failed (a cut stream)
}

func (e *proxyEnv) post(t testing.TB, path, key, body string, hdr ...string) answer {
	t.Helper()
	resp := e.send(context.Background(), t, path, key, body, hdr...)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("%d %q is not JSON: %v", a.code, a.body, err)
	}
	return m
}

// dim is one dimension of GET /v1/tenants/{tenant}.
type dim struct {
	Limit     int64 `json:"limit"`
	Remaining int64 `json:"remaining"`
}

type tenantStatus struct {
	Requests, Tokens, Concurrency dim
}

func (e *proxyEnv) status(t testing.TB) tenantStatus {
	t.Helper()
	resp, err := e.client.Get(e.url + "/v1/tenants/acme")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Limits tenantStatus `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Limits
}

// waitIdle waits until acme holds no slot (an abandoned request settled).
func (e *proxyEnv) waitIdle(t testing.TB) tenantStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.status(t)
		if st.Concurrency.Remaining == st.Concurrency.Limit {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot not freed: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// postUntil posts like post but stops reading the body at the first line
// holding marker, checks the tenant with check, and then reads the rest:
// the proxy settles before it writes a stream's terminal event.
func (e *proxyEnv) postUntil(t testing.TB, path, body, marker string, check func()) answer {
	t.Helper()
	resp := e.send(context.Background(), t, path, clientKey, body)
	defer resp.Body.Close()
	var b strings.Builder
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			t.Fatalf("stream ended before %q: %v: %q", marker, err, b.String())
		}
		if strings.Contains(line, marker) {
			break
		}
	}
	check()
	rest, err := io.ReadAll(br)
	b.Write(rest)
	return answer{code: resp.StatusCode, header: resp.Header, body: b.String(), err: err}
}

func openAIBody(extra string) string {
	return `{"model":"` + model + `","messages":` + userMsg + extra + `}`
}

func claudeBody(extra string) string {
	return `{"model":"` + claude + `","messages":` + userMsg + `,"max_tokens":500` + extra + `}`
}

// events splits an event stream into the data of its events.
func events(t testing.TB, body string) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
		for _, line := range strings.Split(ev, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, d)
			}
		}
	}
	return out
}

func checkOpenAIError(t *testing.T, a answer, code int, typ string, errCode any) {
	t.Helper()
	if a.code != code {
		t.Fatalf("status %d, want %d: %s", a.code, code, a.body)
	}
	e, ok := a.json(t)["error"].(map[string]any)
	if !ok || e["type"] != typ || e["code"] != errCode || e["message"] == "" {
		t.Fatalf("OpenAI error = %s, want type %q code %v", a.body, typ, errCode)
	}
}

func checkAnthropicError(t *testing.T, a answer, code int, typ string) {
	t.Helper()
	if a.code != code {
		t.Fatalf("status %d, want %d: %s", a.code, code, a.body)
	}
	m := a.json(t)
	e, ok := m["error"].(map[string]any)
	if m["type"] != "error" || !ok || e["type"] != typ || e["message"] == "" {
		t.Fatalf("Anthropic error = %s, want type %q", a.body, typ)
	}
}

func TestProxyUnknownKey(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10}})
	for _, key := range []string{"sk-nope", ""} {
		checkOpenAIError(t, e.post(t, "/v1/chat/completions", key, openAIBody("")), 401, "invalid_request_error", "invalid_api_key")
		checkAnthropicError(t, e.post(t, "/v1/messages", key, claudeBody("")), 401, "authentication_error")
	}
	// x-api-key works for OpenAI too, and a bearer token for Anthropic.
	if a := e.post(t, "/v1/chat/completions", "", openAIBody(""), "x-api-key", clientKey); a.code != 200 {
		t.Fatalf("x-api-key on OpenAI: %d %s", a.code, a.body)
	}
	if a := e.post(t, "/v1/messages", "", claudeBody(""), "Authorization", "Bearer "+clientKey); a.code != 200 {
		t.Fatalf("bearer on Anthropic: %d %s", a.code, a.body)
	}
	if n := len(e.up.Requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want the 2 with a known key", n)
	}
}

func TestProxyBadInput(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 100_000, Concurrency: 2}})
	big := openAIBody(`,"user":"` + strings.Repeat("x", 1<<20) + `"`)
	for _, tc := range []struct {
		name, body string
		hdr        []string
		code       int
	}{
		{"malformed JSON", `{"model":`, nil, 400},
		{"not an object", `[1,2]`, nil, 400},
		{"missing model", `{"messages":` + userMsg + `}`, nil, 400},
		{"missing messages", `{"model":"gpt-4"}`, nil, 400},
		{"empty messages", `{"model":"gpt-4","messages":[]}`, nil, 400},
		{"negative max_tokens", openAIBody(`,"max_tokens":-1`), nil, 400},
		{"max_tokens not a number", openAIBody(`,"max_tokens":"many"`), nil, 400},
		{"body over 1 MiB", big, nil, 413},
		{"bad wait header", openAIBody(""), []string{"x-tokenring-wait-ms", "soon"}, 400},
		{"bad priority header", openAIBody(""), []string{"x-tokenring-priority", "urgent"}, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkOpenAIError(t, e.post(t, "/v1/chat/completions", clientKey, tc.body, tc.hdr...), tc.code, "invalid_request_error", nil)
			body := strings.Replace(tc.body, `"gpt-4"`, `"`+claude+`"`, 1)
			wantType := "invalid_request_error"
			if tc.code == 413 {
				wantType = "request_too_large"
			}
			checkAnthropicError(t, e.post(t, "/v1/messages", clientKey, body, tc.hdr...), tc.code, wantType)
		})
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		resp, err := e.client.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
			t.Fatalf("GET %s: %d Allow %q", path, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	if st := e.status(t); st.Requests.Remaining != 10 || st.Tokens.Remaining != 100_000 {
		t.Fatalf("bad input changed the tenant: %+v", st)
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}

// TestProxyNonStreaming: the answer passes through, the upstream sees its
// own key, the headers carry exact numbers, and the settle credits the
// unused reservation back.
func TestProxyNonStreaming(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 2}})
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 21, CompletionTokens: 7})
	p := promptTokens(t, false)
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":500`), "x-tokenring-priority", "batch")
	if a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	m := a.json(t)
	msg := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != "Hello there!" || m["usage"].(map[string]any)["total_tokens"] != 28.0 {
		t.Fatalf("answer not passed through: %s", a.body)
	}
	for h, want := range map[string]string{
		"x-ratelimit-limit-requests":     "10",
		"x-ratelimit-remaining-requests": "9",
		"x-ratelimit-limit-tokens":       "10000",
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(10_000-p-500, 10), // the reservation
		"x-request-id":                   "req_fake",                          // the upstream's, passed on
		"RateLimit-Policy":               `"requests";q=10;w=60, "tokens";q=10000;qu="tokens";w=60, "concurrency";q=2;qu="concurrent-requests"`,
	} {
		if got := a.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	for _, h := range []string{"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"} {
		d, err := time.ParseDuration(a.header.Get(h))
		// Until the newest counted bucket (1s of a 60s window) has left it.
		if err != nil || d <= 0 || d > time.Minute+time.Second {
			t.Errorf("%s = %q, want a duration in (0, 1m1s]", h, a.header.Get(h))
		}
	}
	re := regexp.MustCompile(`^"requests";r=9;t=(\d+), "tokens";r=` + strconv.FormatInt(10_000-p-500, 10) + `;t=(\d+), "concurrency";r=1;t=(\d+)$`)
	if got := a.header.Get("RateLimit"); !re.MatchString(got) {
		t.Errorf("RateLimit = %q, want it to match %s", got, re)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests", len(reqs))
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer "+upstreamKey {
		t.Errorf("upstream saw Authorization %q, want the upstream key", got)
	}
	if reqs[0].Header.Get("x-tokenring-priority") != "" {
		t.Error("x-tokenring-* headers were forwarded")
	}
	if string(reqs[0].Raw) != openAIBody(`,"max_tokens":500`) {
		t.Errorf("a non-streaming body was changed: %s", reqs[0].Raw)
	}
	// Settled before the answer was written: no waiting needed.
	st := e.status(t)
	if st.Tokens.Remaining != 10_000-28 || st.Requests.Remaining != 9 || st.Concurrency.Remaining != 2 {
		t.Fatalf("after settle: %+v, want tokens %d, requests 9, slots 2", st, 10_000-28)
	}
}

// TestProxyNonStreamingWithoutUsage runs through a ProxyConfig.Client of
// net/http's (the other tests through the router's own).
func TestProxyNonStreamingWithoutUsage(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Tokens: 10_000}, netHTTP: true})
	e.up.SetReply(fakeupstream.UpstreamReply{NoUsage: true})
	if a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":500`)); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	want := 10_000 - promptTokens(t, false) - int64(counter.Text(model, "Hello there!"))
	if st := e.status(t); st.Tokens.Remaining != want {
		t.Fatalf("tokens remaining %d, want %d (prompt + counted content)", st.Tokens.Remaining, want)
	}
}

func TestProxyStreamOpenAI(t *testing.T) {
	for _, asked := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", asked), func(t *testing.T) {
			e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 2}})
			e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 30, CompletionTokens: 12, Text: []string{"one", " two", " three"}, Linger: 200 * time.Millisecond})
			extra := `,"max_tokens":100,"stream":true`
			if asked {
				extra += `,"stream_options":{"include_usage":true}`
			}
			a := e.postUntil(t, "/v1/chat/completions", openAIBody(extra), "[DONE]", func() {
				if st := e.status(t); st.Tokens.Remaining != 10_000-42 || st.Concurrency.Remaining != 2 {
					t.Errorf("at [DONE]: %+v, want tokens %d and both slots free", st, 10_000-42)
				}
			})
			if a.code != 200 || a.err != nil || !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %v %q %s", a.code, a.err, a.header.Get("Content-Type"), a.body)
			}
			if a.header.Get("x-ratelimit-remaining-requests") != "9" {
				t.Errorf("x-ratelimit-remaining-requests = %q", a.header.Get("x-ratelimit-remaining-requests"))
			}
			evs := events(t, a.body)
			if evs[len(evs)-1] != "[DONE]" {
				t.Fatalf("stream does not end with [DONE]: %q", evs)
			}
			var text strings.Builder
			usageChunks := 0
			for _, d := range evs[:len(evs)-1] {
				var c struct {
					Choices []struct {
						Delta struct{ Content string } `json:"delta"`
					} `json:"choices"`
					Usage *struct {
						PromptTokens int64 `json:"prompt_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(d), &c); err != nil {
					t.Fatalf("chunk %q: %v", d, err)
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Delta.Content)
				}
				if c.Usage != nil {
					usageChunks++
				}
			}
			if text.String() != "one two three" {
				t.Errorf("streamed text %q", text.String())
			}
			if want := map[bool]int{false: 0, true: 1}[asked]; usageChunks != want {
				t.Errorf("client got %d usage chunks, want %d", usageChunks, want)
			}
			// The upstream was asked for usage either way.
			body := e.up.Requests()[0].Body
			if opts, _ := body["stream_options"].(map[string]any); opts["include_usage"] != true || body["stream"] != true {
				t.Errorf("upstream body %v: include_usage not set", body)
			}
		})
	}
}

func TestProxyStreamAnthropic(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 2}})
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 33, CompletionTokens: 9, Linger: 200 * time.Millisecond})
	a := e.postUntil(t, "/v1/messages", claudeBody(`,"stream":true`), "event: message_stop", func() {
		if st := e.status(t); st.Tokens.Remaining != 10_000-42 || st.Concurrency.Remaining != 2 {
			t.Errorf("at message_stop: %+v, want tokens %d and both slots free", st, 10_000-42)
		}
	})
	if a.code != 200 || a.err != nil {
		t.Fatalf("%d %v %s", a.code, a.err, a.body)
	}
	var types []string
	for _, d := range events(t, a.body) {
		var ev struct{ Type string }
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if !strings.Contains(a.body, "event: message_start\ndata: ") {
		t.Errorf("event lines not passed through: %q", a.body)
	}
	req := e.up.Requests()[0]
	if req.Header.Get("x-api-key") != upstreamKey || req.Header.Get("anthropic-version") != "2023-06-01" || string(req.Raw) != claudeBody(`,"stream":true`) {
		t.Errorf("upstream got x-api-key %q anthropic-version %q body %s", req.Header.Get("x-api-key"), req.Header.Get("anthropic-version"), req.Raw)
	}
	// Non-streaming settles from usage.input_tokens/output_tokens.
	e.up.SetReply(fakeupstream.UpstreamReply{PromptTokens: 5, CompletionTokens: 3})
	if a := e.post(t, "/v1/messages", clientKey, claudeBody("")); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if st := e.status(t); st.Tokens.Remaining != 10_000-42-8 {
		t.Fatalf("after a non-streaming message: tokens %d, want %d", st.Tokens.Remaining, 10_000-42-8)
	}
}

// TestProxyInterruptedStream: a stream cut by the upstream, or abandoned by
// the client, settles from what was seen and frees the slot.
func TestProxyInterruptedStream(t *testing.T) {
	text := []string{"alpha", " beta", " gamma", " delta", " epsilon", " zeta"}
	t.Run("upstream cut, OpenAI", func(t *testing.T) {
		e := startProxy(t, proxyOpts{tenant: limiter.Limits{Tokens: 10_000, Concurrency: 1}})
		e.up.SetReply(fakeupstream.UpstreamReply{Text: text, CutAfter: 2, PromptTokens: 99, CompletionTokens: 99})
		a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":1000,"stream":true`))
		if a.code != 200 || a.err == nil {
			t.Fatalf("want a 200 whose body is cut, got %d, err %v", a.code, a.err)
		}
		if !strings.Contains(a.body, `" beta"`) || strings.Contains(a.body, "gamma") {
			t.Errorf("client got %q", a.body)
		}
		want := 10_000 - promptTokens(t, false) - int64(counter.Text(model, "alpha beta"))
		if st := e.status(t); st.Tokens.Remaining != want || st.Concurrency.Remaining != 1 {
			t.Fatalf("after the cut: %+v, want tokens %d (counted prompt + streamed text) and the slot free", st, want)
		}
	})
	t.Run("upstream cut, Anthropic", func(t *testing.T) {
		e := startProxy(t, proxyOpts{tenant: limiter.Limits{Tokens: 10_000, Concurrency: 1}})
		e.up.SetReply(fakeupstream.UpstreamReply{Text: text, CutAfter: 3, PromptTokens: 40, CompletionTokens: 99})
		a := e.post(t, "/v1/messages", clientKey, claudeBody(`,"stream":true`))
		if a.code != 200 || a.err == nil {
			t.Fatalf("want a 200 whose body is cut, got %d, err %v", a.code, a.err)
		}
		// The prompt as message_start reported it.
		want := 10_000 - 40 - int64(counter.Text(claude, "alpha beta gamma"))
		if st := e.status(t); st.Tokens.Remaining != want || st.Concurrency.Remaining != 1 {
			t.Fatalf("after the cut: %+v, want tokens %d and the slot free", st, want)
		}
	})
	t.Run("client gone", func(t *testing.T) {
		e := startProxy(t, proxyOpts{tenant: limiter.Limits{Tokens: 10_000, Concurrency: 1}})
		e.up.SetReply(fakeupstream.UpstreamReply{Text: text, ChunkDelay: 30 * time.Millisecond, PromptTokens: 99, CompletionTokens: 99})
		ctx, cancel := context.WithCancel(context.Background())
		resp := e.send(ctx, t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":1000,"stream":true`))
		br := bufio.NewReader(resp.Body)
		for seen := 0; seen < 2; {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(line, `"content":"alpha"`) || strings.Contains(line, `"content":" beta"`) {
				seen++
			}
		}
		cancel()
		resp.Body.Close()
		st := e.waitIdle(t)
		p := promptTokens(t, false)
		used := 10_000 - st.Tokens.Remaining
		lo, hi := p+int64(counter.Text(model, "alpha beta")), p+int64(counter.Text(model, strings.Join(text, "")))
		if used < lo || used > hi {
			t.Fatalf("abandoned stream charged %d tokens, want between %d and %d", used, lo, hi)
		}
	})
}

// TestProxyClientGoneWhileWaiting: a client that hangs up while the
// upstream works on a whole (non-streaming) answer cancels the upstream
// request, and its lease is released (the reservation stays charged: the
// upstream may have spent it), whichever server took the request:
// internal/http1's fast path notices from its watch (clientWatchDelay),
// net/http from its background read.
func TestProxyClientGoneWhileWaiting(t *testing.T) {
	for _, netHTTP := range []bool{false, true} {
		t.Run(fmt.Sprintf("net/http alone=%t", netHTTP), func(t *testing.T) {
			e := startProxy(t, proxyOpts{tenant: limiter.Limits{Tokens: 10_000, Concurrency: 1}, netHTTP1: netHTTP})
			hold := make(chan struct{}) // never closed: only the request's end lets the upstream go
			e.up.SetReply(fakeupstream.UpstreamReply{Hold: hold})
			ctx, cancel := context.WithCancel(context.Background())
			answered := make(chan error, 1)
			go func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(openAIBody(`,"max_tokens":100`)))
				req.Header.Set("Authorization", "Bearer "+clientKey)
				resp, err := e.client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				answered <- err
			}()
			for deadline := time.Now().Add(5 * time.Second); len(e.up.Requests()) == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the request never reached the upstream")
				}
			}
			time.Sleep(30 * time.Millisecond) // past clientWatchDelay
			cancel()
			if err := <-answered; err == nil {
				t.Fatal("the cancelled request was answered")
			}
			st := e.waitIdle(t) // the upstream request ended, and the lease with it
			if want := 10_000 - promptTokens(t, false) - 100; st.Tokens.Remaining != want {
				t.Fatalf("tokens remaining %d, want %d: the reservation stays charged", st.Tokens.Remaining, want)
			}
		})
	}
}

// TestProxyRefusal: 429s in each provider's shape with retry-after,
// retry-after-ms and the x-ratelimit-* headers.
func TestProxyRefusal(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 2, Tokens: 1000}})
	if a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":10`)); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if a := e.post(t, "/v1/messages", clientKey, claudeBody("")); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	checkRetry := func(t *testing.T, a answer, reason string) {
		t.Helper()
		ms, err := strconv.ParseInt(a.header.Get("retry-after-ms"), 10, 64)
		if err != nil || ms <= 0 {
			t.Fatalf("retry-after-ms = %q", a.header.Get("retry-after-ms"))
		}
		if got, want := a.header.Get("retry-after"), strconv.FormatInt((ms+999)/1000, 10); got != want {
			t.Errorf("retry-after = %q, want %q (retry-after-ms %d rounded up)", got, want, ms)
		}
		if got := a.header.Get("x-tokenring-reason"); got != reason {
			t.Errorf("x-tokenring-reason = %q, want %q", got, reason)
		}
		if a.header.Get("x-ratelimit-limit-requests") != "2" || a.header.Get("x-ratelimit-remaining-requests") != "0" ||
			a.header.Get("x-ratelimit-limit-tokens") != "1000" || a.header.Get("RateLimit-Policy") == "" || a.header.Get("RateLimit") == "" {
			t.Errorf("rate-limit headers on a refusal: %v", a.header)
		}
	}
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(""))
	checkOpenAIError(t, a, 429, "requests", "rate_limit_exceeded")
	checkRetry(t, a, "requests")
	a = e.post(t, "/v1/messages", clientKey, claudeBody(""))
	checkAnthropicError(t, a, 429, "rate_limit_error")
	checkRetry(t, a, "requests")

	// A request that can never fit the token limit: refused for tokens,
	// retry after one window.
	e2 := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 2, Tokens: 1000}})
	a = e2.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_completion_tokens":5000`))
	checkOpenAIError(t, a, 429, "tokens", "rate_limit_exceeded")
	if a.header.Get("retry-after") != "60" || a.header.Get("retry-after-ms") != "60000" {
		t.Errorf("retry-after %q retry-after-ms %q, want one window", a.header.Get("retry-after"), a.header.Get("retry-after-ms"))
	}
	if n := len(e.up.Requests()) + len(e2.up.Requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want the 2 admitted", n)
	}
}

// TestProxyTableFull: a key the owner cannot hold (MaxKeys reached: here
// the pool's, after the tenant's) is a 503 in the provider's shape with a
// Retry-After, the tenant's admission rolled back, nothing forwarded.
func TestProxyTableFull(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 2}, pools: map[string]limiter.Limits{model: {Requests: 5}}, maxKeys: 1})
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(""))
	checkOpenAIError(t, a, 503, "server_error", nil)
	if got := a.header.Get("retry-after"); got != "1" || !strings.Contains(a.body, "too many keys held (max_keys") {
		t.Fatalf("retry-after %q, body %s", got, a.body)
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
	if e.node.Keys() != 1 {
		t.Fatalf("%d keys", e.node.Keys())
	}
}

// TestProxyPoolRefusal: a pool's refusal rolls the tenant's admission back.
func TestProxyPoolRefusal(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10}, pools: map[string]limiter.Limits{model: {Requests: 1}}})
	if a := e.post(t, "/v1/chat/completions", clientKey, openAIBody("")); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(""))
	checkOpenAIError(t, a, 429, "requests", "rate_limit_exceeded")
	if msg := a.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "pool") {
		t.Errorf("message %q does not name the pool", msg)
	}
	if st := e.status(t); st.Requests.Remaining != 9 {
		t.Fatalf("tenant requests remaining %d, want 9: the pool refusal was not rolled back", st.Requests.Remaining)
	}
}

// TestProxyChainRefusal: an API key's tenant is charged with its chain;
// a group's refusal is a 429 in the provider's shape that names the group
// (message and x-tokenring-refused-by) and carries the group's rate-limit
// headers, and rolls the tenant back.
func TestProxyChainRefusal(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10}, chain: []string{"team", "org"},
		groups: map[string]limiter.Limits{"team": {Requests: 100}, "org": {Requests: 2}}})
	if a := e.post(t, "/v1/chat/completions", clientKey, openAIBody("")); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if a := e.post(t, "/v1/messages", clientKey, claudeBody("")); a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(""))
	checkOpenAIError(t, a, 429, "requests", "rate_limit_exceeded")
	if got := a.header.Get("x-tokenring-refused-by"); got != "group:org" {
		t.Errorf("x-tokenring-refused-by = %q, want group:org", got)
	}
	// The rate-limit headers show the org, the level that bound, not the
	// tenant (10 requests, 9 left).
	if l, r := a.header.Get("x-ratelimit-limit-requests"), a.header.Get("x-ratelimit-remaining-requests"); l != "2" || r != "0" {
		t.Errorf("x-ratelimit-*-requests = %s/%s, want the org's 2/0", l, r)
	}
	if msg := a.json(t)["error"].(map[string]any)["message"].(string); !strings.Contains(msg, "group org") {
		t.Errorf("message %q does not name group org", msg)
	}
	a = e.post(t, "/v1/messages", clientKey, claudeBody(""))
	checkAnthropicError(t, a, 429, "rate_limit_error")
	if got := a.header.Get("x-tokenring-refused-by"); got != "group:org" {
		t.Errorf("Anthropic: x-tokenring-refused-by = %q, want group:org", got)
	}
	if l, r := a.header.Get("anthropic-ratelimit-requests-limit"), a.header.Get("anthropic-ratelimit-requests-remaining"); l != "2" || r != "0" {
		t.Errorf("Anthropic: anthropic-ratelimit-requests-* = %s/%s, want the org's 2/0", l, r)
	}
	if st := e.status(t); st.Requests.Remaining != 8 {
		t.Fatalf("tenant requests remaining %d, want 8: the group's refusals were not rolled back", st.Requests.Remaining)
	}
	if n := len(e.up.Requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want the 2 admitted", n)
	}
}

// TestProxyConcurrency: with two slots, three concurrent slow streams give
// exactly two proxied and one refused.
func TestProxyConcurrency(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Concurrency: 2}})
	hold := make(chan struct{})
	e.up.SetReply(fakeupstream.UpstreamReply{Hold: hold, PromptTokens: 1, CompletionTokens: 1})
	results := make(chan answer, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"stream":true`))
		}()
	}
	refused := <-results // the two admitted are held upstream
	checkOpenAIError(t, refused, 429, "requests", "rate_limit_exceeded")
	if refused.header.Get("x-tokenring-reason") != "concurrency" {
		t.Errorf("refused for %q, want concurrency", refused.header.Get("x-tokenring-reason"))
	}
	for deadline := time.Now().Add(5 * time.Second); len(e.up.Requests()) < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the two admitted requests did not reach the upstream")
		}
	}
	close(hold)
	wg.Wait()
	close(results)
	for a := range results {
		if a.code != 200 || a.err != nil || !strings.Contains(a.body, "[DONE]") {
			t.Errorf("admitted stream: %d %v %q", a.code, a.err, a.body)
		}
	}
	if n := len(e.up.Requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want exactly 2", n)
	}
	if st := e.status(t); st.Concurrency.Remaining != 2 {
		t.Fatalf("slots not freed: %+v", st)
	}
}

// TestProxyRenewsLongStreams: a stream longer than the lease TTL keeps its
// slot (renewed every TTL/3), so the slot does not expire under it.
func TestProxyRenewsLongStreams(t *testing.T) {
	// A 1 s TTL and a 2.5 s stream: renewals run every third of a TTL, so a
	// loaded machine would have to stall one for over 600 ms to lose the
	// slot (with a 300 ms TTL it did, under a CPU hog).
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Concurrency: 1, LeaseTTL: time.Second}})
	e.up.SetReply(fakeupstream.UpstreamReply{Text: strings.Split("a b c d e f g h i j", " "), ChunkDelay: 250 * time.Millisecond})
	resp := e.send(context.Background(), t, "/v1/chat/completions", clientKey, openAIBody(`,"stream":true`))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	time.Sleep(2100 * time.Millisecond) // more than two TTLs into a 2.5 s stream
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(""))
	checkOpenAIError(t, a, 429, "requests", "rate_limit_exceeded")
	if a.header.Get("x-tokenring-reason") != "concurrency" {
		t.Errorf("refused for %q, want concurrency", a.header.Get("x-tokenring-reason"))
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t); st.Concurrency.Remaining != 1 {
		t.Fatalf("slot not freed after the stream: %+v", st)
	}
}

// TestProxyUpstreamErrors: an upstream error passes through and settles
// with the prompt only; an unreachable upstream is a 502 and rolls back.
func TestProxyUpstreamErrors(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 1}})
	e.up.SetReply(fakeupstream.UpstreamReply{Status: 400, Text: []string{"bad model"}})
	a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":500`))
	checkOpenAIError(t, a, 400, "invalid_request_error", nil)
	if !strings.Contains(a.body, "bad model") || a.header.Get("x-ratelimit-remaining-requests") != "9" {
		t.Errorf("upstream error not passed through: %v %s", a.header, a.body)
	}
	if st := e.status(t); st.Tokens.Remaining != 10_000-promptTokens(t, false) || st.Requests.Remaining != 9 || st.Concurrency.Remaining != 1 {
		t.Fatalf("after an upstream 400: %+v, want the prompt and the request charged", st)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	e2 := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 1}, upstream: dead})
	a = e2.post(t, "/v1/messages", clientKey, claudeBody(""))
	checkAnthropicError(t, a, 502, "api_error")
	if got := a.header.Get("x-ratelimit-limit-requests"); got != "10" { // set although nothing was sent
		t.Errorf("x-ratelimit-limit-requests = %q on the 502, want 10", got)
	}
	if st := e2.status(t); st.Tokens.Remaining != 10_000 || st.Requests.Remaining != 10 || st.Concurrency.Remaining != 1 {
		t.Fatalf("after an unreachable upstream: %+v, want nothing charged", st)
	}
}

// queuedBefore waits until want requests are queued at the node, and fails
// at once if answered delivers first: the request was answered without
// queueing.
func (e *proxyEnv) queuedBefore(t *testing.T, want int, answered <-chan answer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.node.Waiting() != want {
		select {
		case a := <-answered:
			t.Fatalf("answered without queueing (%d queued, want %d): %d %s", e.node.Waiting(), want, a.code, a.body)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want %d", e.node.Waiting(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestProxyWaits: x-tokenring-wait-ms queues a request that finds no slot
// instead of a 429, and it is forwarded only once the request holding the
// slot has finished.
func TestProxyWaits(t *testing.T) {
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Concurrency: 1}})
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // on a failure too: the servers close after it
	e.up.SetReply(fakeupstream.UpstreamReply{Hold: hold})
	first := make(chan answer, 1)
	go func() { first <- e.post(t, "/v1/chat/completions", clientKey, openAIBody("")) }()
	for deadline := time.Now().Add(5 * time.Second); len(e.up.Requests()) < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("first request did not reach the upstream")
		}
	}
	second := make(chan answer, 1)
	go func() {
		second <- e.post(t, "/v1/chat/completions", clientKey, openAIBody(""), "x-tokenring-wait-ms", "60000")
	}()
	e.queuedBefore(t, 1, second)
	// Queued, not forwarded, while the first holds the slot upstream.
	if n := len(e.up.Requests()); n != 1 {
		t.Fatalf("upstream got %d requests while the second was queued, want 1", n)
	}
	select {
	case f := <-first:
		t.Fatalf("first request answered while held upstream: %d %s", f.code, f.body)
	default:
	}
	release()
	if f := <-first; f.code != 200 {
		t.Fatalf("first request: %d %s", f.code, f.body)
	}
	if a := <-second; a.code != 200 {
		t.Fatalf("waiting request: %d %s", a.code, a.body)
	}
	if n := len(e.up.Requests()); n != 2 {
		t.Fatalf("upstream got %d requests, want 2", n)
	}
	if n := e.node.Waiting(); n != 0 {
		t.Fatalf("%d queued at the end, want 0", n)
	}
	if st := e.status(t); st.Concurrency.Remaining != 1 {
		t.Fatalf("slot not freed: %+v", st)
	}
}

// TestDeepNesting: a body nested 100,000 levels deep, in each place a
// request holds free-form JSON, is refused with a 400 that names the depth
// limit (encoding/json refuses nesting past 10,000 levels, so no walker
// behind it, recursive or not, ever sees it), by every endpoint that reads
// JSON, and changes nothing: nothing charged, queued or forwarded, and a
// lease the bad requests named still settles. Each body is under the 1 MiB
// body limit, so it is the depth that is refused, not the size.
func TestDeepNesting(t *testing.T) {
	const depth = 100_000
	deep := map[string]string{
		"arrays":  strings.Repeat("[", depth) + strings.Repeat("]", depth),
		"objects": strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth),
	}
	e := startProxy(t, proxyOpts{tenant: limiter.Limits{Requests: 10, Tokens: 100_000, Concurrency: 2}})
	good := e.post(t, "/v1/acquire", "", `{"tenant":"acme","prompt_tokens":10,"max_tokens":10}`)
	var lease struct {
		Allowed bool   `json:"allowed"`
		Lease   string `json:"lease"`
	}
	if err := json.Unmarshal([]byte(good.body), &lease); err != nil || good.code != 200 || !lease.Allowed {
		t.Fatalf("acquire: %d %s", good.code, good.body)
	}
	before := e.status(t)
	for shape, d := range deep {
		msg := `[{"role":"user","content":` + d + `}]`
		for _, tc := range []struct {
			name, path, key, body string
		}{
			{"acquire messages", "/v1/acquire", "", `{"tenant":"acme","messages":` + msg + `}`},
			{"acquire unknown field", "/v1/acquire", "", `{"tenant":"acme","prompt_tokens":1,"extra":` + d + `}`},
			{"complete usage", "/v1/complete", "", `{"tenant":"acme","lease":"` + lease.Lease + `","usage":` + d + `}`},
			{"renew lease", "/v1/renew", "", `{"tenant":"acme","lease":` + d + `}`},
			{"openai content", "/v1/chat/completions", clientKey, `{"model":"` + model + `","messages":` + msg + `}`},
			{"openai stream tools", "/v1/chat/completions", clientKey, `{"model":"` + model + `","stream":true,"messages":` + userMsg + `,"tools":` + d + `}`},
			{"anthropic content", "/v1/messages", clientKey, `{"model":"` + claude + `","max_tokens":10,"messages":` + msg + `}`},
			{"anthropic system", "/v1/messages", clientKey, `{"model":"` + claude + `","max_tokens":10,"system":` + d + `,"messages":` + userMsg + `}`},
		} {
			t.Run(shape+"/"+tc.name, func(t *testing.T) {
				if len(tc.body) >= 1<<20 {
					t.Fatalf("body of %d bytes is not under the 1 MiB limit", len(tc.body))
				}
				a := e.post(t, tc.path, tc.key, tc.body)
				switch tc.path {
				case "/v1/chat/completions":
					checkOpenAIError(t, a, 400, "invalid_request_error", nil)
				case "/v1/messages":
					checkAnthropicError(t, a, 400, "invalid_request_error")
				default:
					if a.code != 400 {
						t.Fatalf("status %d, want 400: %.300s", a.code, a.body)
					}
				}
				if !strings.Contains(a.body, "exceeded max depth") {
					t.Fatalf("error %.300s does not name the depth limit", a.body)
				}
			})
		}
	}
	if after := e.status(t); after != before {
		t.Fatalf("deep bodies changed the tenant: before %+v after %+v", before, after)
	}
	if n := len(e.up.Requests()); n != 0 {
		t.Fatalf("upstream got %d requests, want 0", n)
	}
	if n := e.node.Waiting(); n != 0 {
		t.Fatalf("%d queued, want 0", n)
	}
	a := e.post(t, "/v1/complete", "", `{"tenant":"acme","lease":"`+lease.Lease+`"}`)
	if a.code != 200 || !strings.Contains(a.body, `"settled":true`) {
		t.Fatalf("the good lease no longer settles: %d %s", a.code, a.body)
	}
}
