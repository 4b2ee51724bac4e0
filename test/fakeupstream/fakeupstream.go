// Package fakeupstream is a fake OpenAI and Anthropic API for tests: non-streaming
// and SSE answers in each provider's event sequence, configurable usage, cut
// streams, errors, and a record of the requests it received. NewUpstream
// serves it on an httptest server that belongs to one test; New makes the
// bare http.Handler, which cmd/fakellm serves as a command.
package fakeupstream

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Upstream is a fake LLM provider for the proxy's tests: OpenAI's POST
// /v1/chat/completions and Anthropic's POST /v1/messages on an httptest
// server on loopback. It answers non-streaming and streaming (SSE) requests
// with the text and usage of its UpstreamReply: OpenAI chunks, with the final
// usage-only chunk when the request asks for stream_options.include_usage;
// Anthropic's event sequence message_start, content_block_start, ping,
// content_block_delta…, content_block_stop, message_delta (usage),
// message_stop. It can cut a stream midway, hold answers until released, and
// answer errors, and it records every request it gets.
//
// Every answer carries x-ratelimit-limit-requests: 99999 and x-request-id:
// req_fake, the first to check that the proxy replaces the upstream's own
// rate-limit headers, the second that it passes the others through.
//
// An Upstream made by NewUpstream belongs to one test; t.Cleanup releases
// held answers and closes the server. One made by New is an http.Handler
// that serves no address of its own; Close releases its held answers. Its
// methods are safe for concurrent use.
type Upstream struct {
	srv       *httptest.Server // nil for an Upstream made by New
	mux       *http.ServeMux
	key       string
	closing   chan struct{} // closed by Close: held answers return
	closeOnce sync.Once

	mu     sync.Mutex // guards reply, reqs and served
	reply  UpstreamReply
	reqs   []UpstreamRequest
	served int  // requests received so far: the ids of the answers
	keep   bool // keep every request for Requests (NewUpstream's, not New's)
}

// UpstreamReply is how an Upstream answers. Zero fields take the defaults
// given.
type UpstreamReply struct {
	// Text is the completion, one stream chunk (content delta) per element,
	// joined for a non-streaming answer. Nil: "Hello", " there", "!".
	Text []string
	// PromptTokens and CompletionTokens are the usage reported.
	PromptTokens, CompletionTokens int64
	// NoUsage: report no usage at all (an OpenAI-compatible server that
	// ignores include_usage).
	NoUsage bool
	// Status, when not 0 or 200, is answered with an error body in the
	// provider's shape instead of a completion.
	Status int
	// CutAfter > 0 cuts a stream after that many text chunks: the
	// connection is dropped without the final chunks and usage.
	CutAfter int
	// ChunkDelay is a pause before each stream chunk after the first.
	ChunkDelay time.Duration
	// Hold, when not nil, delays the answer until it is closed (or the
	// request ends).
	Hold <-chan struct{}
	// Linger keeps a stream open this long after its last event, as a
	// server may before it ends the body.
	Linger time.Duration
}

// UpstreamRequest is one request an Upstream got.
type UpstreamRequest struct {
	Path   string
	Header http.Header
	Body   map[string]any // the JSON body decoded; nil if it was not JSON
	Raw    []byte
}

// NewUpstream starts a fake upstream. When apiKey is not empty it answers
// 401 to requests without it (OpenAI: Authorization: Bearer; Anthropic:
// x-api-key), as a real provider would.
func NewUpstream(t testing.TB, apiKey string) *Upstream {
	u := New(apiKey)
	u.keep = true
	u.srv = httptest.NewServer(u)
	t.Cleanup(u.Close)
	return u
}

// New makes a fake upstream that is only an http.Handler: it serves POST
// /v1/chat/completions and POST /v1/messages on whatever server the caller
// puts it on, with the same answers and apiKey check as NewUpstream's. URL
// and Client are for an Upstream made by NewUpstream, and only such an
// Upstream records requests: one made by New, meant to run for as long as a
// command does, keeps none, and its Requests is empty.
func New(apiKey string) *Upstream {
	u := &Upstream{key: apiKey, closing: make(chan struct{}), mux: http.NewServeMux()}
	u.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, false) })
	u.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, true) })
	return u
}

// ServeHTTP answers one request as the fake provider.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.mux.ServeHTTP(w, r) }

// Close releases held answers and, for an Upstream made by NewUpstream,
// closes its server. Calls after the first do nothing.
func (u *Upstream) Close() {
	u.closeOnce.Do(func() {
		close(u.closing)
		if u.srv != nil {
			u.srv.Close()
		}
	})
}

// URL is the base URL to configure as upstream.base_url: "http://127.0.0.1:port/v1".
func (u *Upstream) URL() string { return u.srv.URL + "/v1" }

// Client is an http.Client for the upstream; its idle connections are
// closed with the server.
func (u *Upstream) Client() *http.Client { return u.srv.Client() }

// SetReply sets how the following requests are answered.
func (u *Upstream) SetReply(r UpstreamReply) {
	u.mu.Lock()
	u.reply = r
	u.mu.Unlock()
}

// Requests returns the requests received so far, oldest first.
func (u *Upstream) Requests() []UpstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]UpstreamRequest(nil), u.reqs...)
}

// defaultText is the completion of a reply whose Text is nil.
var defaultText = []string{"Hello", " there", "!"}

// serve records and answers one request on OpenAI's API, or on Anthropic's
// when claude is set: after the reply's Hold, with the reply's error, a
// whole completion or a stream, as the request and the reply ask.
func (u *Upstream) serve(w http.ResponseWriter, r *http.Request, claude bool) {
	body, reply, id := u.record(r)
	if reply.Hold != nil && !u.awaitRelease(r, reply.Hold) {
		return
	}
	if reply.Text == nil {
		reply.Text = defaultText
	}
	w.Header().Set("x-ratelimit-limit-requests", "99999")
	w.Header().Set("x-request-id", "req_fake")
	if status, msg := u.rejection(r, body, claude); status != 0 {
		reply.Status, reply.Text = status, []string{msg}
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		writeError(w, reply.Status, strings.Join(reply.Text, ""), claude)
		return
	}
	model, _ := body["model"].(string)
	if stream, _ := body["stream"].(bool); !stream {
		u.whole(w, reply, claude, model, id)
		return
	}
	s := u.startStream(w, r, reply.ChunkDelay)
	if claude {
		u.streamAnthropic(s, reply, model, id)
	} else {
		opts, _ := body["stream_options"].(map[string]any)
		includeUsage, _ := opts["include_usage"].(bool)
		u.streamOpenAI(s, reply, model, id, includeUsage)
	}
	_ = s.rc.Flush()
	u.sleep(r, reply.Linger)
}

// record counts r among the requests received (and appends it to them if
// u keeps requests) and returns its body decoded (nil if it is not JSON),
// the reply in force and r's id: its number among the requests, from 1.
func (u *Upstream) record(r *http.Request) (body map[string]any, reply UpstreamReply, id string) {
	raw, _ := io.ReadAll(r.Body)
	if json.Unmarshal(raw, &body) != nil {
		body = nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.served++
	if u.keep {
		u.reqs = append(u.reqs, UpstreamRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Raw: raw})
	}
	return body, u.reply, fmt.Sprintf("%d", u.served)
}

// awaitRelease waits until hold is closed. It returns false if r ends or
// the upstream is closed first.
func (u *Upstream) awaitRelease(r *http.Request, hold <-chan struct{}) bool {
	select {
	case <-hold:
		return true
	case <-r.Context().Done():
	case <-u.closing:
	}
	return false
}

// sleep waits d, if it is positive. It returns false if r ends or the
// upstream is closed first.
func (u *Upstream) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
	case <-u.closing:
	}
	return false
}

// rejection returns the status and message a real provider would refuse r
// with whatever the reply: 401 when u has an API key and r does not carry
// it (Anthropic's x-api-key, OpenAI's Authorization: Bearer), 400 when r's
// body is not JSON. The status is 0 if r is acceptable.
func (u *Upstream) rejection(r *http.Request, body map[string]any, claude bool) (status int, msg string) {
	got := r.Header.Get("x-api-key")
	if !claude {
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	switch {
	case u.key != "" && got != u.key:
		return http.StatusUnauthorized, "fake upstream: wrong API key"
	case body == nil:
		return http.StatusBadRequest, "fake upstream: body is not JSON"
	}
	return 0, ""
}

// writeError answers status with an error body carrying msg, in
// Anthropic's shape when claude is set, else in OpenAI's.
func writeError(w http.ResponseWriter, status int, msg string, claude bool) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if claude {
		fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, msg)
	} else {
		fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, msg)
	}
}

// eventStream is the SSE body of one streaming answer. Every event is
// flushed to the client as soon as it is written.
type eventStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	r     *http.Request
	u     *Upstream
	delay time.Duration // the pause before each text chunk after the first
}

// startStream sends the 200 and the headers of an SSE answer to r, and
// returns the stream to write its events on.
func (u *Upstream) startStream(w http.ResponseWriter, r *http.Request, delay time.Duration) *eventStream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &eventStream{w: w, rc: http.NewResponseController(w), r: r, u: u, delay: delay}
}

// event writes one event: v as JSON data, under an event: line when name is
// not empty (Anthropic names its events; OpenAI does not).
func (s *eventStream) event(name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	_ = s.rc.Flush()
}

// pause waits the chunk delay. It returns false if the request ends or the
// upstream is closed first, and the stream must then stop.
func (s *eventStream) pause() bool { return s.u.sleep(s.r, s.delay) }

// whole answers a non-streaming request.
func (u *Upstream) whole(w http.ResponseWriter, reply UpstreamReply, claude bool, model, id string) {
	text := strings.Join(reply.Text, "")
	var out map[string]any
	if claude {
		out = map[string]any{
			"id": "msg_fake" + id, "type": "message", "role": "assistant", "model": model,
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": reply.PromptTokens, "output_tokens": reply.CompletionTokens},
		}
	} else {
		out = map[string]any{
			"id": "chatcmpl-fake" + id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": text, "refusal": nil},
				"logprobs":      nil,
				"finish_reason": "stop",
			}},
			"usage": map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": reply.CompletionTokens,
				"total_tokens": reply.PromptTokens + reply.CompletionTokens},
		}
	}
	if reply.NoUsage {
		delete(out, "usage")
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// cut drops the connection mid-stream: the client sees an incomplete body.
func cut() { panic(http.ErrAbortHandler) }

// streamOpenAI writes the chunks of an OpenAI chat completion stream of
// reply on s: the role, the text chunks, the finish reason, the usage-only
// chunk when includeUsage is set (and the reply has usage), and [DONE].
func (u *Upstream) streamOpenAI(s *eventStream, reply UpstreamReply, model, id string, includeUsage bool) {
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": "chatcmpl-fake" + id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if includeUsage {
			c["usage"] = nil
		}
		return c
	}
	s.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
	for i, t := range reply.Text {
		if reply.CutAfter > 0 && i == reply.CutAfter {
			cut()
		}
		if !s.pause() {
			return
		}
		s.event("", chunk(map[string]any{"content": t}, nil))
	}
	s.event("", chunk(map[string]any{}, "stop"))
	if includeUsage && !reply.NoUsage {
		s.event("", map[string]any{
			"id": "chatcmpl-fake" + id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{},
			"usage": map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": reply.CompletionTokens,
				"total_tokens": reply.PromptTokens + reply.CompletionTokens},
		})
	}
	fmt.Fprint(s.w, "data: [DONE]\n\n")
}

// streamAnthropic writes the event sequence of an Anthropic message stream
// of reply on s, from message_start to message_stop.
func (u *Upstream) streamAnthropic(s *eventStream, reply UpstreamReply, model, id string) {
	startUsage := map[string]any{"input_tokens": reply.PromptTokens, "output_tokens": 1}
	if reply.NoUsage {
		startUsage = map[string]any{}
	}
	s.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake" + id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}})
	s.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}})
	s.event("ping", map[string]any{"type": "ping"})
	for i, t := range reply.Text {
		if reply.CutAfter > 0 && i == reply.CutAfter {
			cut()
		}
		if !s.pause() {
			return
		}
		s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": t}})
	}
	s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}}
	if !reply.NoUsage {
		delta["usage"] = map[string]any{"output_tokens": reply.CompletionTokens}
	}
	s.event("message_delta", delta)
	s.event("message_stop", map[string]any{"type": "message_stop"})
}
