// Package fakeupstream is a fake OpenAI and Anthropic API for tests: non-streaming
// and SSE answers in each provider's event sequence, configurable usage, cut
// streams, errors, and a record of the requests it received. NewUpstream
// serves it on an httptest server that belongs to one test; New makes the
// bare http.Handler, which cmd/fakellm serves as a command.
package fakeupstream

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Upstream is a fake LLM provider for the proxy's tests: OpenAI's POST
// /v1/chat/completions, POST /v1/responses, POST /v1/embeddings, GET
// /v1/models and GET /v1/models/{id}, and Anthropic's POST /v1/messages and
// POST /v1/messages/count_tokens, on an httptest server on loopback. It
// answers non-streaming and streaming (SSE) requests with the text and
// usage of its UpstreamReply: OpenAI chunks, with the final usage-only
// chunk when the request asks for stream_options.include_usage; the
// Responses API's events, response.created to response.completed (with
// the usage); Anthropic's event sequence message_start,
// content_block_start, ping, content_block_delta…, content_block_stop,
// message_delta (usage), message_stop. An embedding's usage is the reply's
// PromptTokens, as is count_tokens' input_tokens. It can cut a stream
// midway, hold answers until released, and answer errors, and it records
// every request it gets.
//
// Every answer carries x-ratelimit-limit-requests: 99999,
// anthropic-ratelimit-requests-limit: 99999 and x-request-id: req_fake, the
// first two to check that the proxy replaces the upstream's own rate-limit
// headers, the last that it passes the others through.
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
	// CachedTokens is the part of PromptTokens read from the prompt cache
	// (chat completions' usage.prompt_tokens_details.cached_tokens, a
	// Responses answer's usage.input_tokens_details.cached_tokens,
	// Anthropic's cache_read_input_tokens), and CacheWriteTokens the part
	// written to it (Anthropic's cache_creation_input_tokens). Anthropic's
	// input_tokens is the rest of PromptTokens, as its API reports.
	CachedTokens, CacheWriteTokens int64
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

// New makes a fake upstream that is only an http.Handler: it serves the
// endpoints Upstream lists on whatever server the caller puts it on, with the same answers and apiKey check as NewUpstream's. URL
// and Client are for an Upstream made by NewUpstream, and only such an
// Upstream records requests: one made by New, meant to run for as long as a
// command does, keeps none, and its Requests is empty.
func New(apiKey string) *Upstream {
	u := &Upstream{key: apiKey, closing: make(chan struct{}), mux: http.NewServeMux()}
	u.mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, chat) })
	u.mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, responses) })
	u.mux.HandleFunc("POST /v1/embeddings", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, embeddings) })
	u.mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, models) })
	u.mux.HandleFunc("GET /v1/models/{id...}", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, model) })
	u.mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, messages) })
	u.mux.HandleFunc("POST /v1/messages/count_tokens", func(w http.ResponseWriter, r *http.Request) { u.serve(w, r, countTokens) })
	return u
}

// api is one endpoint of the fake provider.
type api uint8

const (
	chat        api = iota // OpenAI's chat completions
	responses              // OpenAI's Responses API
	embeddings             // OpenAI's embeddings
	models                 // OpenAI's model list
	model                  // OpenAI's model
	messages               // Anthropic's messages
	countTokens            // Anthropic's token count
)

// anthropic reports whether a is one of Anthropic's endpoints.
func (a api) anthropic() bool { return a == messages || a == countTokens }

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

// serve records and answers one request on the endpoint a: after the
// reply's Hold, with the reply's error, a whole answer or a stream, as the
// request and the reply ask.
func (u *Upstream) serve(w http.ResponseWriter, r *http.Request, a api) {
	body, reply, id := u.record(r)
	if reply.Hold != nil && !u.awaitRelease(r, reply.Hold) {
		return
	}
	if reply.Text == nil {
		reply.Text = defaultText
	}
	claude := a.anthropic()
	w.Header().Set("x-ratelimit-limit-requests", "99999")
	w.Header().Set("anthropic-ratelimit-requests-limit", "99999")
	w.Header().Set("x-request-id", "req_fake")
	if status, msg := u.rejection(r, body, claude); status != 0 {
		reply.Status, reply.Text = status, []string{msg}
	}
	if reply.Status != 0 && reply.Status != http.StatusOK {
		writeError(w, reply.Status, strings.Join(reply.Text, ""), claude)
		return
	}
	modelName, _ := body["model"].(string)
	switch a {
	case embeddings:
		writeJSON(w, embeddingsAnswer(reply, body, modelName))
		return
	case models:
		writeJSON(w, map[string]any{"object": "list", "data": []any{modelObject("gpt-4o-mini"), modelObject("text-embedding-3-small")}})
		return
	case model:
		writeJSON(w, modelObject(r.PathValue("id")))
		return
	case countTokens:
		writeJSON(w, map[string]any{"input_tokens": reply.PromptTokens})
		return
	}
	if stream, _ := body["stream"].(bool); !stream {
		u.whole(w, reply, a, modelName, id)
		return
	}
	s := u.startStream(w, r, reply.ChunkDelay)
	switch a {
	case messages:
		u.streamAnthropic(s, reply, modelName, id)
	case responses:
		u.streamResponses(s, reply, modelName, id)
	default:
		opts, _ := body["stream_options"].(map[string]any)
		includeUsage, _ := opts["include_usage"].(bool)
		u.streamOpenAI(s, reply, modelName, id, includeUsage)
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
	case body == nil && r.Method != http.MethodGet:
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
func (u *Upstream) whole(w http.ResponseWriter, reply UpstreamReply, a api, model, id string) {
	text := strings.Join(reply.Text, "")
	var out map[string]any
	switch a {
	case responses:
		out = responseObject(reply, model, id, "completed", text)
	case messages:
		out = map[string]any{
			"id": "msg_fake" + id, "type": "message", "role": "assistant", "model": model,
			"content":     []any{map[string]any{"type": "text", "text": text}},
			"stop_reason": "end_turn", "stop_sequence": nil,
			"usage": anthropicUsage(reply, reply.CompletionTokens),
		}
	default:
		out = map[string]any{
			"id": "chatcmpl-fake" + id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": text, "refusal": nil},
				"logprobs":      nil,
				"finish_reason": "stop",
			}},
			"usage": chatUsage(reply),
		}
	}
	if reply.NoUsage {
		delete(out, "usage")
	}
	writeJSON(w, out)
}

// writeJSON answers 200 with v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// responseObject is a Responses API response of reply with status and
// the output text given ("" for none yet), and its usage once completed
// (null before, as the API sends it, and with NoUsage).
func responseObject(reply UpstreamReply, model, id, status, text string) map[string]any {
	out := map[string]any{
		"id": "resp_fake" + id, "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": model, "output": []any{}, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
		"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{}, "usage": nil,
	}
	if status == "completed" {
		out["output"] = []any{outputMessage(id, text, "completed")}
		if !reply.NoUsage {
			out["usage"] = map[string]any{
				"input_tokens": reply.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": reply.CachedTokens},
				"output_tokens": reply.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
				"total_tokens": reply.PromptTokens + reply.CompletionTokens,
			}
		}
	}
	return out
}

// outputMessage is a Responses output message holding text.
func outputMessage(id, text, status string) map[string]any {
	return map[string]any{"id": "msg_fake" + id, "type": "message", "status": status, "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}
}

// embeddingsAnswer is the answer to an embeddings request of body: an
// embedding of three numbers an input (a float list, or base64 of
// little-endian float32s when encoding_format asks, as the SDK does), and
// the reply's PromptTokens as its usage.
func embeddingsAnswer(reply UpstreamReply, body map[string]any, model string) map[string]any {
	n := 1
	if in, ok := body["input"].([]any); ok && len(in) > 0 {
		if _, ids := in[0].(float64); !ids { // a list of strings or of id lists: one embedding each
			n = len(in)
		}
	}
	vec := []float32{0.25, -0.5, 1}
	var emb any = vec
	if body["encoding_format"] == "base64" {
		b := make([]byte, 0, 4*len(vec))
		for _, f := range vec {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
		emb = base64.StdEncoding.EncodeToString(b)
	}
	data := make([]any, n)
	for i := range data {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	out := map[string]any{"object": "list", "data": data, "model": model,
		"usage": map[string]any{"prompt_tokens": reply.PromptTokens, "total_tokens": reply.PromptTokens}}
	if reply.NoUsage {
		delete(out, "usage")
	}
	return out
}

// modelObject is OpenAI's model object of id.
func modelObject(id string) map[string]any {
	return map[string]any{"id": id, "object": "model", "created": 1700000000, "owned_by": "fakeupstream"}
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
			"usage":   chatUsage(reply),
		})
	}
	fmt.Fprint(s.w, "data: [DONE]\n\n")
}

// streamResponses writes the events of a Responses API stream of reply on
// s, each under its event: line with its sequence_number: the response
// created and in progress, the output message and its text part added,
// the text deltas, their ends, and response.completed with the usage.
func (u *Upstream) streamResponses(s *eventStream, reply UpstreamReply, model, id string) {
	seq := 0
	event := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		s.event(typ, fields)
	}
	part := func(text string) map[string]any {
		return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	}
	at := map[string]any{"item_id": "msg_fake" + id, "output_index": 0, "content_index": 0}
	with := func(m map[string]any) map[string]any {
		for k, v := range at {
			m[k] = v
		}
		return m
	}
	event("response.created", map[string]any{"response": responseObject(reply, model, id, "in_progress", "")})
	event("response.in_progress", map[string]any{"response": responseObject(reply, model, id, "in_progress", "")})
	item := outputMessage(id, "", "in_progress")
	item["content"] = []any{}
	event("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	event("response.content_part.added", with(map[string]any{"part": part("")}))
	for i, t := range reply.Text {
		if reply.CutAfter > 0 && i == reply.CutAfter {
			cut()
		}
		if !s.pause() {
			return
		}
		event("response.output_text.delta", with(map[string]any{"delta": t, "logprobs": []any{}}))
	}
	text := strings.Join(reply.Text, "")
	event("response.output_text.done", with(map[string]any{"text": text, "logprobs": []any{}}))
	event("response.content_part.done", with(map[string]any{"part": part(text)}))
	event("response.output_item.done", map[string]any{"output_index": 0, "item": outputMessage(id, text, "completed")})
	event("response.completed", map[string]any{"response": responseObject(reply, model, id, "completed", text)})
}

// streamAnthropic writes the event sequence of an Anthropic message stream
// of reply on s, from message_start to message_stop.
func (u *Upstream) streamAnthropic(s *eventStream, reply UpstreamReply, model, id string) {
	startUsage := anthropicUsage(reply, 1)
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

// chatUsage is a chat completion's usage object for reply.
func chatUsage(reply UpstreamReply) map[string]any {
	return map[string]any{"prompt_tokens": reply.PromptTokens, "completion_tokens": reply.CompletionTokens,
		"total_tokens":          reply.PromptTokens + reply.CompletionTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": reply.CachedTokens}}
}

// anthropicUsage is an Anthropic message's usage object for reply with
// output output tokens: input_tokens the prompt neither read from nor
// written to the cache.
func anthropicUsage(reply UpstreamReply, output int64) map[string]any {
	return map[string]any{"input_tokens": reply.PromptTokens - reply.CachedTokens - reply.CacheWriteTokens, "output_tokens": output,
		"cache_read_input_tokens": reply.CachedTokens, "cache_creation_input_tokens": reply.CacheWriteTokens}
}
