package proxy

// OpenAI's chat completions (POST /v1/chat/completions) as a provider.
//
// Streams: parse adds stream_options.include_usage=true when the client did
// not ask for it, so that the proxy can settle, and readEvent then drops the
// final usage-only chunk (empty choices, usage set) from what the client
// receives, so the client gets the stream it asked for. The other chunks
// carry "usage":null when include_usage is on; they are passed through
// untouched.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/tokenring/tokenring/router"
)

// maxChoices bounds OpenAI's n when it multiplies max_tokens.
const maxChoices = 128

// openAI is the OpenAI chat completions provider.
type openAI struct{}

func (openAI) name() string { return "openai" }

func (openAI) upstream(cfg Config) (Upstream, string) {
	return cfg.OpenAI, "/chat/completions"
}

func (openAI) authorize(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) }

// openAIRequest is what the proxy reads of a chat completion request.
type openAIRequest struct {
	chatRequest
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	N                   *int64 `json:"n"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (openAI) parse(c *proxyCall, body []byte) error {
	var in openAIRequest
	var err error
	if decodeOpenAIRequest(body, &in) { // the plainest requests, without encoding/json
		err = checkChat(&in.chatRequest)
	} else {
		in = openAIRequest{}
		err = decodeChat(body, &in, &in.chatRequest)
	}
	if err != nil {
		return err
	}
	c.model, c.stream, c.body = in.Model, in.Stream, body
	mt, name := in.MaxTokens, "max_tokens"
	if in.MaxCompletionTokens != nil { // the newer name wins
		mt, name = in.MaxCompletionTokens, "max_completion_tokens"
	}
	if err := c.setMaxTokens(name, mt); err != nil {
		return err
	}
	if mt != nil && in.N != nil && *in.N > 1 { // each choice may use max_tokens
		c.maxTokens = min(c.maxTokens*min(*in.N, maxChoices), router.MaxTokens)
	}
	c.setCount(router.MessagesBytes(in.Messages), func(k router.Counter) int { return k.Messages(in.Model, in.Messages) })
	if in.Stream && (in.StreamOptions == nil || !in.StreamOptions.IncludeUsage) {
		b, err := withIncludeUsage(body, in.StreamOptions == nil)
		if err != nil {
			return err
		}
		c.body, c.stripUsage = b, true
	}
	return nil
}

// withIncludeUsage returns body with stream_options.include_usage set to
// true, keeping every other field. noOptions says that body, a JSON
// object, has no stream_options or a null one.
func withIncludeUsage(body []byte, noOptions bool) ([]byte, error) {
	if noOptions {
		if b, ok := appendIncludeUsage(body); ok {
			return b, nil
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("invalid JSON body: %v", err)
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := obj["stream_options"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, fmt.Errorf("stream_options must be an object: %v", err)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	var err error
	if obj["stream_options"], err = marshalRaw(opts); err != nil {
		return nil, err
	}
	return marshalRaw(obj)
}

// includeUsage is the member appendIncludeUsage adds.
const includeUsage = `"stream_options":{"include_usage":true}`

// appendIncludeUsage adds includeUsage as the last member of body, a JSON
// object without a stream_options member or with a null one, keeping the
// rest byte for byte; false when the name "stream_options" appears in body
// (the member may be there: withIncludeUsage rewrites the object) or body
// does not end its object with '}' after a member. A null member the name
// does not show (its key escaped) comes before the one added, and a JSON
// object's last member of a name is the one that counts.
func appendIncludeUsage(body []byte) ([]byte, bool) {
	if bytes.Contains(body, []byte(`"stream_options"`)) {
		return nil, false
	}
	obj := bytes.TrimRight(body, " \t\r\n")
	last := bytes.TrimRight(obj[:max(len(obj)-1, 0)], " \t\r\n")
	if len(obj) == 0 || obj[len(obj)-1] != '}' || len(last) == 0 || last[len(last)-1] == '{' {
		return nil, false
	}
	b := make([]byte, 0, len(obj)+len(includeUsage)+1)
	b = append(b, obj[:len(obj)-1]...)
	b = append(b, ',')
	b = append(b, includeUsage...)
	return append(b, '}'), true
}

// marshalRaw marshals v without escaping <, > and &, so that text passes
// through as the client wrote it.
func marshalRaw(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

type openAIErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func (openAI) fail(w http.ResponseWriter, e apiError) {
	var b openAIErrorBody
	b.Error.Message, b.Error.Type = e.msg, "invalid_request_error"
	var code string // "" is null
	switch e.kind {
	case errAuth:
		code = "invalid_api_key"
	case errOverloaded, errServer:
		b.Error.Type = "server_error"
	case errRateRequests: // OpenAI's types are requests and tokens; concurrency and queue_full count requests
		b.Error.Type, code = "requests", "rate_limit_exceeded"
	case errRateTokens:
		b.Error.Type, code = "tokens", "rate_limit_exceeded"
	case errQuota:
		b.Error.Type, code = "insufficient_quota", "insufficient_quota"
	}
	if code != "" {
		b.Error.Code = &code
	}
	writeJSON(w, e.status, b)
}

func (openAI) readAnswer(s *usageSeen, raw []byte) bool {
	var m openAIAnswer
	if !decodeOpenAIAnswer(raw, &m) {
		var u struct {
			Usage *openAIUsage `json:"usage"`
		}
		if json.Unmarshal(raw, &u) != nil {
			return false
		}
		if m = (openAIAnswer{Usage: u.Usage}); u.Usage == nil && json.Unmarshal(raw, &m) != nil {
			return false
		}
	}
	if m.Usage != nil { // the usage is final: the content need not be counted
		m.Usage.addTo(s)
		return true
	}
	m.addTo(s)
	return true
}

// readEvent: [DONE] ends the stream; a usage-only chunk the proxy asked for
// is not passed on.
func (openAI) readEvent(c *proxyCall, s *usageSeen, data []byte) (end, pass bool) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		return true, true
	}
	var chunk openAIAnswer
	if !decodeOpenAIAnswer(data, &chunk) {
		if chunk = (openAIAnswer{}); json.Unmarshal(data, &chunk) != nil {
			return false, true
		}
	}
	chunk.addTo(s)
	return false, chunk.Usage == nil || !(c.stripUsage && len(chunk.Choices) == 0)
}

// openAIAnswer is what the proxy reads of an OpenAI answer: a whole
// completion (choices[].message) or a stream chunk (choices[].delta).
// decodeOpenAIAnswer (openaijson.go) decodes the plainest ones without
// encoding/json, to the same values.
type openAIAnswer struct {
	Choices []openAIChoice `json:"choices"`
	Usage   *openAIUsage   `json:"usage"`
}

// openAIChoice is one of an answer's choices.
type openAIChoice struct {
	Message openAIDelta `json:"message"`
	Delta   openAIDelta `json:"delta"`
}

// addTo adds the answer's content and usage to s.
func (a *openAIAnswer) addTo(s *usageSeen) {
	for i := range a.Choices {
		a.Choices[i].Message.addTo(s)
		a.Choices[i].Delta.addTo(s)
	}
	if a.Usage != nil {
		a.Usage.addTo(s)
	}
}

// openAIUsage is OpenAI's usage object.
type openAIUsage struct {
	PromptTokens     int64              `json:"prompt_tokens"`
	CompletionTokens int64              `json:"completion_tokens"`
	PromptDetails    openAIPromptDetail `json:"prompt_tokens_details"`
}

// openAIPromptDetail is usage.prompt_tokens_details (chat completions)
// and usage.input_tokens_details (responses): the prompt tokens read from
// the prompt cache, a part of the prompt.
type openAIPromptDetail struct {
	CachedTokens int64 `json:"cached_tokens"`
}

func (u *openAIUsage) addTo(s *usageSeen) {
	s.prompt, s.promptSet, s.cached = u.PromptTokens, true, u.PromptDetails.CachedTokens
	s.completion, s.final = u.CompletionTokens, true
}

// openAIDelta is the part of a streamed delta, or of a whole message, whose
// text counts as completion.
type openAIDelta struct {
	Content          string           `json:"content"`
	Refusal          string           `json:"refusal"`
	ReasoningContent string           `json:"reasoning_content"`
	ToolCalls        []openAIToolCall `json:"tool_calls"`
}

// openAIToolCall is a tool call of a message or a delta.
type openAIToolCall struct {
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (d *openAIDelta) addTo(s *usageSeen) {
	for _, t := range []string{d.Content, d.Refusal, d.ReasoningContent} {
		s.addText(t)
	}
	for _, tc := range d.ToolCalls {
		s.addText(tc.Function.Name)
		s.addText(tc.Function.Arguments)
	}
}
