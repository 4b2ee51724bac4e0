// Package fakeupstream is a fake OpenAI and Anthropic API for tests: non-streaming
// and SSE answers in each provider's event sequence, configurable usage, cut
// streams, errors, and a record of the requests it received.
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
// An Upstream belongs to one test; t.Cleanup releases held answers and
// closes the server. Its methods are safe for concurrent use.
type Upstream struct {
	srv     *httptest.Server
	key     string
	closing chan struct{} // closed by cleanup: held answers return

	mu    sync.Mutex // guards reply and reqs
	reply UpstreamReply
	reqs  []UpstreamRequest
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
	u := &Upstream{key: apiKey, closing: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, false) })
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, true) })
	u.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		close(u.closing)
		u.srv.Close()
	})
	return u
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

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request, claude bool) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if json.Unmarshal(raw, &body) != nil {
		body = nil
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, UpstreamRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Raw: raw})
	reply := u.reply
	n := len(u.reqs)
	u.mu.Unlock()

	if reply.Hold != nil {
		select {
		case <-reply.Hold:
		case <-r.Context().Done():
			return
		case <-u.closing:
			return
		}
	}
	if reply.Text == nil {
		reply.Text = []string{"Hello", " there", "!"}
	}
	w.Header().Set("x-ratelimit-limit-requests", "99999")
	w.Header().Set("x-request-id", "req_fake")
	got := r.Header.Get("x-api-key")
	if !claude {
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	switch {
	case u.key != "" && got != u.key:
		reply.Status, reply.Text = http.StatusUnauthorized, []string{"fake upstream: wrong API key"}
	case body == nil:
		reply.Status, reply.Text = http.StatusBadRequest, []string{"fake upstream: body is not JSON"}
	}
	model, _ := body["model"].(string)
	id := fmt.Sprintf("%d", n)
	if reply.Status != 0 && reply.Status != http.StatusOK {
		msg := strings.Join(reply.Text, "")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.Status)
		if claude {
			fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, msg)
		} else {
			fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, msg)
		}
		return
	}
	if stream, _ := body["stream"].(bool); !stream {
		u.whole(w, reply, claude, model, id)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	ev := func(event string, v any) {
		b, _ := json.Marshal(v)
		if event != "" {
			fmt.Fprintf(w, "event: %s\n", event)
		}
		fmt.Fprintf(w, "data: %s\n\n", b)
		_ = rc.Flush()
	}
	pause := func() bool {
		if reply.ChunkDelay <= 0 {
			return true
		}
		select {
		case <-time.After(reply.ChunkDelay):
			return true
		case <-r.Context().Done():
		case <-u.closing:
		}
		return false
	}
	if claude {
		u.streamAnthropic(ev, pause, reply, model, id)
	} else {
		opts, _ := body["stream_options"].(map[string]any)
		includeUsage, _ := opts["include_usage"].(bool)
		u.streamOpenAI(w, ev, pause, reply, model, id, includeUsage)
	}
	_ = rc.Flush()
	if reply.Linger > 0 {
		select {
		case <-time.After(reply.Linger):
		case <-r.Context().Done():
		case <-u.closing:
		}
	}
}

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

func (u *Upstream) streamOpenAI(w http.ResponseWriter, ev func(string, any), pause func() bool, reply UpstreamReply, model, id string, includeUsage bool) {
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
	ev("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
	for i, t := range reply.Text {
		if reply.CutAfter > 0 && i == reply.CutAfter {
			cut()
		}
		if !pause() {
			return
		}
		ev("", chunk(map[string]any{"content": t}, nil))
	}
	ev("", chunk(map[string]any{}, "stop"))
	if includeUsage && !reply.NoUsage {
		ev("", map[string]any{
			"id": "chatcmpl-fake" + id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{},
			"usage": map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": reply.CompletionTokens,
				"total_tokens": reply.PromptTokens + reply.CompletionTokens},
		})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (u *Upstream) streamAnthropic(ev func(string, any), pause func() bool, reply UpstreamReply, model, id string) {
	startUsage := map[string]any{"input_tokens": reply.PromptTokens, "output_tokens": 1}
	if reply.NoUsage {
		startUsage = map[string]any{}
	}
	ev("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": "msg_fake" + id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}})
	ev("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}})
	ev("ping", map[string]any{"type": "ping"})
	for i, t := range reply.Text {
		if reply.CutAfter > 0 && i == reply.CutAfter {
			cut()
		}
		if !pause() {
			return
		}
		ev("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": t}})
	}
	ev("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil}}
	if !reply.NoUsage {
		delta["usage"] = map[string]any{"output_tokens": reply.CompletionTokens}
	}
	ev("message_delta", delta)
	ev("message_stop", map[string]any{"type": "message_stop"})
}
