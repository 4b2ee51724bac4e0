package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// twinUpstream answers deterministically (echoing the OpenAI-Organization
// header it was sent): an OpenAI or Anthropic completion, a response or
// an embedding with usage, a 500 for a body holding "fail", an answer without a
// Content-Type for "no-ct", a short stream when one is asked for, and a
// stream cut after its first event for "cut".
func twinUpstream(t testing.TB) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		w.Header().Set("X-Request-Id", "req_twin")
		w.Header().Set("X-Seen-Organization", req.Header.Get("OpenAI-Organization")) // what the proxy forwarded
		switch {
		case bytes.Contains(body, []byte("fail")):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"message":"upstream broke","type":"server_error"}}`)
		case bytes.Contains(body, []byte("cut")): // a stream nobody asked for, cut after its first event
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case bytes.Contains(body, []byte(`"stream":true`)):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
		case strings.HasSuffix(req.URL.Path, "/messages"):
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Anthropic-Ratelimit-Requests-Limit", "99999") // the upstream's own: dropped
			io.WriteString(w, `{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":10,"output_tokens":4}}`)
		case strings.HasSuffix(req.URL.Path, "/responses"):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":11,"input_tokens_details":{"cached_tokens":8},"output_tokens":2,"total_tokens":13}}`)
		case strings.HasSuffix(req.URL.Path, "/embeddings"):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}],"usage":{"prompt_tokens":3,"total_tokens":3}}`)
		default:
			if bytes.Contains(body, []byte("no-ct")) {
				w.Header()["Content-Type"] = nil // net/http sniffs nothing: the proxy relays no type
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
			io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`)
		}
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// twin is a proxy over a node and a router of its own, served by net/http
// (handler: its routes) and by the fast path (ServePlain).
type twin struct {
	*Server
	router  *router.Router
	handler http.Handler
}

// twinProxy is a twin whose every key has the limits lim on the clock now,
// its node's lease ids counted from 1, proxying to upstream for API key
// "sk-a" (tenant "a").
func twinProxy(t testing.TB, lim limiter.Limits, now func() time.Time, upstream string, counter router.Counter) *twin {
	t.Helper()
	limits := func(string) limiter.Limits { return lim }
	var ids atomic.Uint64
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits, Now: now,
		Policy: limiter.Policy{IDs: func() uint64 { return ids.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s, r := newServer(t, n, router.Config{Limits: limits, Now: now}, Config{
		Tenant:    func(key string) (string, bool) { return "a", key == "sk-a" },
		OpenAI:    Upstream{BaseURL: upstream + "/v1"},
		Anthropic: Upstream{BaseURL: upstream + "/v1"},
		Now:       now,
	}, counter)
	mux := http.NewServeMux()
	s.Routes(mux)
	return &twin{Server: s, router: r, handler: mux}
}

// proxyStep is one proxied request: its path, header lines and body.
type proxyStep struct {
	path     string
	headers  []string // "Name: value"
	body     string
	declined bool // ServePlain must leave it to ServeHTTP (a stream)
}

// raw is the request's bytes on the wire.
func (st proxyStep) raw() string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: tokenring\r\n%sContent-Length: %d\r\n\r\n%s",
		st.path, strings.Join(append(slices.Clone(st.headers), ""), "\r\n"), len(st.body), st.body)
}

// proxyAnswer is what a client sees of an answer but its Date and
// Content-Length (the servers write those).
type proxyAnswer struct {
	status int
	header string // every other header line, sorted
	body   string
}

// aborted is an answer cut short: the connection closed before its end.
var aborted = proxyAnswer{status: -1, body: "aborted"}

func (a proxyAnswer) String() string { return fmt.Sprintf("%d\n%s\n%s", a.status, a.header, a.body) }

// headerLines is h's lines but Date and Content-Length, sorted.
func headerLines(h http.Header) string {
	var lines []string
	for k, vv := range h {
		if k == "Date" || k == "Content-Length" {
			continue
		}
		for _, v := range vv {
			lines = append(lines, k+": "+v)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// proxyViaPlain serves st through ServePlain from the bytes a client would
// send, parsed by http1.ParseHead as the server does.
func proxyViaPlain(t testing.TB, r *twin, st proxyStep) (proxyAnswer, bool) {
	t.Helper()
	raw := st.raw()
	var req http1.Request
	n, err := http1.ParseHead([]byte(raw), 1<<20, &req)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	req.Body = []byte(raw[n:])
	var resp http1.Response
	if !r.ServePlain(context.Background(), &req, &resp) {
		return proxyAnswer{}, false
	}
	if resp.Abort {
		return aborted, true
	}
	h := http.Header{}
	for _, line := range strings.Split(strings.TrimSuffix(string(resp.Header), "\r\n"), "\r\n") {
		name, value, _ := strings.Cut(line, ": ")
		h.Add(name, value)
	}
	return proxyAnswer{status: resp.Status, header: headerLines(h), body: string(resp.Body)}, true
}

// TestProxyPlainAnswersAsServeHTTP sends the same proxied requests to twin
// routers, one through ServePlain (the fast path) and one through
// ServeHTTP: every answer (status, every header, body) is the same, and so
// is the tenant's state after each: admissions, settles, refusals, the
// upstream's errors, an answer cut upstream (aborted for the client too)
// and every kind of client error, on every endpoint it takes. ServePlain
// declines only the streams and the endpoints passed through, which then
// go to ServeHTTP on both.
func TestProxyPlainAnswersAsServeHTTP(t *testing.T) {
	clock := newFakeClock()
	lim := limiter.Limits{Requests: 10, Tokens: 100_000, Concurrency: 2, Window: time.Minute}
	up := twinUpstream(t)
	counter := prompt.NewCounter()
	plain, ref := twinProxy(t, lim, clock.Now, up, counter), twinProxy(t, lim, clock.Now, up, counter)
	plainURL, refURL := serveHTTP(t, plain), serveHTTP(t, ref)
	openAIKey, claudeKey := "Authorization: Bearer sk-a", "X-Api-Key: sk-a"
	chat := func(extra string) string {
		return `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"Say hi."}]` + extra + `}`
	}
	steps := []proxyStep{
		{path: "/v1/chat/completions", headers: []string{openAIKey, "Content-Type: application/json", "OpenAI-Organization: org-1"}, body: chat("")},
		{path: "/v1/messages", headers: []string{claudeKey, "Anthropic-Version: 2023-06-01"},
			body: `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"Say hi."}]}`},
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: chat(`,"stream":true`), declined: true},
		{path: "/v1/chat/completions", headers: []string{"Authorization: Bearer sk-forged"}, body: chat("")}, // 401
		{path: "/v1/chat/completions", body: chat("")},                                                       // 401: no key
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: `{"model":`},                      // 400
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: `{"model":"gpt-4o-mini","messages":[],"max_tokens":-1}`},
		{path: "/v1/messages", headers: []string{claudeKey}, body: `{"model":"claude-sonnet-4-5","messages":"nope"}`},
		{path: "/v1/chat/completions", headers: []string{openAIKey, "X-Tokenring-Priority: urgent"}, body: chat("")}, // 400
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: chat(`,"user":"fail"`)},                   // the upstream's 500
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: chat(`,"user":"no-ct"`)},                  // sniffed type
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: chat(`,"user":"cut"`)},                    // aborted, as the upstream did
		{path: "/v1/chat/completions", headers: []string{openAIKey, "X-Tokenring-Priority: batch"}, body: chat("")},
		{path: "/v1/responses", headers: []string{openAIKey}, body: `{"model":"gpt-4o-mini","instructions":"Be brief.","input":[{"role":"user","content":"Say hi."}],"max_output_tokens":40}`},
		{path: "/v1/responses", headers: []string{openAIKey}, body: `{"model":"gpt-4o-mini","input":5}`}, // 400
		{path: "/v1/responses", headers: []string{openAIKey}, body: `{"model":"gpt-4o-mini","input":"x","stream":true}`, declined: true},
		{path: "/v1/embeddings", headers: []string{openAIKey}, body: `{"model":"text-embedding-3-small","input":["Say hi.","x"]}`},
		{path: "/v1/embeddings", headers: []string{openAIKey}, body: `{"model":"text-embedding-3-small","input":[]}`}, // 400
		{path: "/v1/messages/count_tokens", headers: []string{claudeKey}, body: `{"model":"claude-sonnet-4-5","messages":[]}`, declined: true},
		{path: "/v1/chat/completions", headers: []string{openAIKey}, body: chat("")}, // 429: 10 rpm
		{path: "/v1/messages", headers: []string{claudeKey}, body: `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`},
	}
	refused := 0
	for i, st := range steps {
		got, taken := proxyViaPlain(t, plain, st)
		if taken == st.declined {
			t.Fatalf("step %d %s: taken by ServePlain = %v, want %v", i, st.body, taken, !st.declined)
		}
		if !taken {
			got = proxyViaWire(t, plainURL, st)
		}
		want := proxyViaWire(t, refURL, st)
		if got.String() != want.String() {
			t.Fatalf("step %d %s %v %s:\nplain:\n%v\n\nHTTP:\n%v", i, st.path, st.headers, st.body, got, want)
		}
		if got.status == http.StatusTooManyRequests {
			refused++
		}
		if a, b := tenantAnswer(plain), tenantAnswer(ref); a != b {
			t.Fatalf("step %d: the tenant differs:\nplain %s\nHTTP  %s", i, a, b)
		}
		clock.Advance(time.Second)
	}
	if refused != 2 {
		t.Fatalf("%d refusals, want 2 (the 11th and 12th admissions of 10 a minute)", refused)
	}
}

// serveHTTP serves r with net/http on loopback until the test ends.
func serveHTTP(t testing.TB, r *twin) string {
	hs := httptest.NewServer(r.handler)
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		hs.Close()
	})
	return hs.URL
}

// tenantAnswer is tenant a's state: its key's status and owner.
func tenantAnswer(r *twin) string {
	levels, unreachable, err := r.router.Levels(context.Background(), "a", "")
	return fmt.Sprint(levels, unreachable, err)
}

// proxyViaWire sends st's bytes as they are to the net/http server of a
// router's ServeHTTP at url (a real server, which sniffs a missing
// Content-Type as net/http does, where httptest's recorder does not) and
// reads the answer (aborted when the connection ends first).
func proxyViaWire(t testing.TB, url string, st proxyStep) proxyAnswer {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, st.raw()); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return aborted
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return aborted
	}
	return proxyAnswer{status: res.StatusCode, header: headerLines(res.Header), body: string(body)}
}

// FuzzProxyPlain: a request with any body and any extra header line that a
// plain head can carry gets the same answer (status, headers, body)
// through ServePlain (or, when it declines, net/http behind it) as the
// same bytes get from net/http, and the tenant ends in the same state.
// Nothing panics.
func FuzzProxyPlain(f *testing.F) {
	chat := `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	f.Add(uint8(0), chat, "X-Tokenring-Priority", "batch")
	f.Add(uint8(0), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"stream":true}`, "Accept", "*/*")
	f.Add(uint8(1), `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, "Anthropic-Version", "2023-06-01")
	f.Add(uint8(0), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"user":"cut"}`, "X-Tokenring-Wait-Ms", "5")
	f.Add(uint8(1), `{"model":`, "X-Api-Key", "sk-b")
	f.Add(uint8(0), chat, "Proxy-Authorization", "Bearer sk-b")
	f.Add(uint8(0), `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}],"user":"no-ct"}`, "OpenAI-Organization", "org-2")
	f.Add(uint8(2), `{"model":"gpt-4o-mini","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":9}`, "OpenAI-Beta", "x")
	f.Add(uint8(2), `{"model":"gpt-4o-mini","input":"x","user":"cut"}`, "Accept", "*/*")
	f.Add(uint8(3), `{"model":"text-embedding-3-small","input":[[1,2],[3]]}`, "X-Tokenring-Priority", "interactive")
	f.Add(uint8(3), `{"model":"text-embedding-3-small","input":"fail"}`, "Idempotency-Key", "k")
	clock := newFakeClock()
	lim := limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 20, Window: time.Minute}
	up := twinUpstream(f)
	counter := prompt.NewCounter()
	plain, ref := twinProxy(f, lim, clock.Now, up, counter), twinProxy(f, lim, clock.Now, up, counter)
	plainURL, refURL := serveHTTP(f, plain), serveHTTP(f, ref)
	paths := [...]string{"/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings"}
	f.Fuzz(func(t *testing.T, path uint8, body, name, value string) {
		st := proxyStep{path: paths[int(path)%len(paths)], headers: []string{"Authorization: Bearer sk-a", name + ": " + value}, body: body}
		var head http1.Request
		if _, err := http1.ParseHead([]byte(st.raw()), http1.DefaultMaxBody, &head); err != nil {
			t.Skip("not a plain head: net/http's alone")
		}
		got, taken := proxyViaPlain(t, plain, st)
		if !taken {
			got = proxyViaWire(t, plainURL, st)
		}
		want := proxyViaWire(t, refURL, st)
		if got.String() != want.String() {
			t.Fatalf("%q (taken by ServePlain: %v):\nplain:\n%v\n\nnet/http:\n%v", st.raw(), taken, got, want)
		}
		if a, b := tenantAnswer(plain), tenantAnswer(ref); a != b {
			t.Fatalf("%q: the tenant differs:\nplain %s\nnet/http %s", st.raw(), a, b)
		}
	})
}
