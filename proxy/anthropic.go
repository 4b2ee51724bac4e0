package proxy

// Anthropic's Messages API (POST /v1/messages) as a provider.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// anthropic is the Anthropic Messages provider.
type anthropic struct{}

func (anthropic) name() string { return "anthropic" }

func (anthropic) upstream(cfg Config) (Upstream, string) {
	return cfg.Anthropic, "/messages"
}

func (anthropic) authorize(h http.Header, key string) { h.Set("x-api-key", key) }

func (anthropic) limitHeaders(h http.Header, st limiter.Status, now time.Time) {
	anthropicRateLimitHeaders(h, st, now)
}

// anthropicRequest is what the proxy reads of a Messages request.
type anthropicRequest struct {
	chatRequest
	System json.RawMessage `json:"system"`
}

func (anthropic) parse(c *proxyCall, body []byte) error {
	var in anthropicRequest
	if err := decodeChat(body, &in, &in.chatRequest); err != nil {
		return err
	}
	if err := c.setMaxTokens("max_tokens", in.MaxTokens); err != nil {
		return err
	}
	var system string
	msgs := in.Messages
	switch sys := bytes.TrimSpace(in.System); {
	case len(sys) == 0 || string(sys) == "null":
	case sys[0] == '"':
		if err := json.Unmarshal(sys, &system); err != nil {
			return fmt.Errorf("system: %v", err)
		}
	case sys[0] == '[': // blocks: counted as a first message, as prompt.AnthropicMessages says
		msgs = append([]prompt.Message{{Role: "system", Content: in.System}}, in.Messages...)
	default:
		return errors.New("system must be a string or an array of content blocks")
	}
	c.model, c.stream, c.body = in.Model, in.Stream, body
	c.setCount(len(system)+router.MessagesBytes(msgs), func(k router.Counter) int {
		if ac, ok := k.(interface {
			AnthropicMessages(model, system string, msgs []prompt.Message) int
		}); ok {
			return ac.AnthropicMessages(in.Model, system, msgs)
		}
		if system != "" {
			msgs = append([]prompt.Message{{Role: "system", Content: json.RawMessage(strconv.Quote(system))}}, msgs...)
		}
		return k.Messages(in.Model, msgs)
	})
	return nil
}

type anthropicErrorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicErrorTypes are Anthropic's error types by kind.
var anthropicErrorTypes = [...]string{
	errInvalid:      "invalid_request_error",
	errAuth:         "authentication_error",
	errTooLarge:     "request_too_large",
	errOverloaded:   "overloaded_error",
	errServer:       "api_error",
	errRateRequests: "rate_limit_error",
	errRateTokens:   "rate_limit_error",
	errQuota:        "rate_limit_error",
}

func (anthropic) fail(w http.ResponseWriter, e apiError) {
	var b anthropicErrorBody
	b.Type, b.Error.Type, b.Error.Message = "error", anthropicErrorTypes[e.kind], e.msg
	writeJSON(w, e.status, b)
}

func (anthropic) readAnswer(s *usageSeen, raw []byte) bool {
	var m struct {
		Content []anthropicBlock `json:"content"`
		Usage   *anthropicUsage  `json:"usage"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, b := range m.Content {
		b.addTo(s)
	}
	if m.Usage != nil {
		m.Usage.addTo(s, true)
	}
	return true
}

// readEvent: message_start reports the prompt, content blocks and their
// deltas carry the completion, message_delta its count, and message_stop
// ends the stream. Every event is passed on.
func (anthropic) readEvent(_ *proxyCall, s *usageSeen, data []byte) (end, pass bool) {
	var e struct {
		Type    string `json:"type"`
		Message *struct {
			Content []anthropicBlock `json:"content"`
			Usage   *anthropicUsage  `json:"usage"`
		} `json:"message"`
		ContentBlock *anthropicBlock `json:"content_block"`
		Delta        *anthropicBlock `json:"delta"`
		Usage        *anthropicUsage `json:"usage"`
	}
	if json.Unmarshal(data, &e) != nil {
		return false, true
	}
	switch e.Type {
	case "message_start":
		if e.Message != nil && e.Message.Usage != nil {
			e.Message.Usage.addTo(s, false)
		}
	case "content_block_start":
		if e.ContentBlock != nil {
			e.ContentBlock.addTo(s)
		}
	case "content_block_delta":
		if e.Delta != nil {
			e.Delta.addTo(s)
		}
	case "message_delta":
		if e.Usage != nil {
			e.Usage.addTo(s, true)
		}
	case "message_stop":
		return true, true
	}
	return false, true
}

// anthropicUsage is Anthropic's usage object. Its prompt is every input
// token the model processed, cached or not: what the prompt was counted as.
type anthropicUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
}

// addTo records u; final marks output_tokens as the final count
// (message_delta, or a whole message).
func (u *anthropicUsage) addTo(s *usageSeen, final bool) {
	if u.InputTokens != nil { // message_delta may repeat it, cumulative
		s.prompt, s.promptSet = max(s.prompt, *u.InputTokens+u.CacheCreationInputTokens+u.CacheReadInputTokens), true
		s.cached, s.cacheWrite = max(s.cached, u.CacheReadInputTokens), max(s.cacheWrite, u.CacheCreationInputTokens)
	}
	if u.OutputTokens != nil {
		s.completion = max(s.completion, *u.OutputTokens)
		s.final = s.final || final
	}
}

// anthropicBlock is the part of a content block, or of a streamed delta,
// whose text counts as completion.
type anthropicBlock struct {
	Text        string          `json:"text"`
	Thinking    string          `json:"thinking"`
	PartialJSON string          `json:"partial_json"`
	Name        string          `json:"name"`
	Input       json.RawMessage `json:"input"`
}

func (b *anthropicBlock) addTo(s *usageSeen) {
	for _, t := range []string{b.Text, b.Thinking, b.PartialJSON, b.Name} {
		s.addText(t)
	}
	if in := bytes.TrimSpace(b.Input); len(in) > 0 && string(in) != "{}" {
		s.addText(string(in))
	}
}
