package proxy

// OpenAI's Responses API (POST /v1/responses) as a provider: what the
// current OpenAI SDKs call (client.responses.create). It is charged as a
// chat completion is: the prompt counted from instructions and input with
// the chat counter (prompt.Counter.Messages, each input item a message),
// max_output_tokens reserved as max_tokens, and the reservation settled
// with the answer's usage (input_tokens, output_tokens), or, for a stream,
// with the usage of its terminal event (response.completed, and
// response.incomplete and response.failed, which end a stream too). A
// Responses stream always reports its usage: nothing is added to the
// request, and every event is passed on.
//
// input_tokens counts every input token, cached ones included
// (input_tokens_details.cached_tokens is a part of it, not an addition):
// the prompt is charged whole, as a chat completion's prompt_tokens is.
//
// Decoding: the request and a whole answer are read once a call, by
// encoding/json (as Anthropic's are). A stream's events are read by a
// jsonwire table (responsesjson.go): a stream has an event a token, the
// chat stream's chunks are read the same way, for the same reason.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// openAIResponses is the Responses provider: OpenAI's upstream, key,
// errors and account headers (the embedded openAI), its own path, request
// and usage.
type openAIResponses struct{ openAI }

func (openAIResponses) upstream(cfg Config) (Upstream, string) {
	return cfg.OpenAI, "/responses"
}

// responsesRequest is what the proxy reads of a Responses request. Input
// and Instructions are kept raw: input is a string or a list of items,
// and either may be absent (a request that continues a stored response
// or names a stored prompt).
type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    json.RawMessage `json:"instructions"`
	MaxOutputTokens *int64          `json:"max_output_tokens"`
	Stream          bool            `json:"stream"`
}

func (openAIResponses) parse(c *proxyCall, body []byte) error {
	var in responsesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	if err := router.CheckName("model", in.Model, true); err != nil {
		return err
	}
	msgs, err := responsesMessages(in.Instructions, in.Input)
	if err != nil {
		return err
	}
	if err := c.setMaxTokens("max_output_tokens", in.MaxOutputTokens); err != nil {
		return err
	}
	c.model, c.stream, c.body = in.Model, in.Stream, body
	c.setCount(router.MessagesBytes(msgs), func(k router.Counter) int { return k.Messages(in.Model, msgs) })
	return nil
}

// responsesMessages turns a Responses request's instructions and input
// into the chat messages its prompt is counted as: the instructions as a
// system message, a string input as a user message, each input item as
// responsesItem says. The raw values are valid JSON (the body decoded).
func responsesMessages(instructions, input json.RawMessage) ([]prompt.Message, error) {
	var msgs []prompt.Message
	switch ins := bytes.TrimSpace(instructions); {
	case len(ins) == 0 || string(ins) == "null":
	case ins[0] == '"':
		msgs = append(msgs, prompt.Message{Role: "system", Content: ins})
	default:
		return nil, errors.New("instructions must be a string")
	}
	switch in := bytes.TrimSpace(input); {
	case len(in) == 0 || string(in) == "null":
	case in[0] == '"':
		msgs = append(msgs, prompt.Message{Role: "user", Content: in})
	case in[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(in, &items); err != nil {
			return nil, fmt.Errorf("input: %v", err)
		}
		for i, raw := range items {
			m, err := responsesItem(raw)
			if err != nil {
				return nil, fmt.Errorf("input[%d]: %v", i, err)
			}
			msgs = append(msgs, m)
		}
	default:
		return nil, errors.New("input must be a string or an array of input items")
	}
	return msgs, nil
}

// responsesInputItem is what the count reads of one input item.
type responsesInputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      json.RawMessage `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesItem is the chat message one input item is counted as: a
// message (an item with a role: a string or text parts, as
// prompt.Counter.Messages counts content) as itself; a function call as an
// assistant's tool call (its name and arguments); a function call's output
// as a tool message; any other item (reasoning, a reference, a built-in
// tool's call) by the tokens of its JSON text. raw is valid JSON.
func responsesItem(raw json.RawMessage) (prompt.Message, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return prompt.Message{}, errors.New("an input item must be an object")
	}
	var it responsesInputItem
	if err := json.Unmarshal(raw, &it); err != nil {
		return prompt.Message{}, err
	}
	switch {
	case it.Role != "":
		return prompt.Message{Role: it.Role, Content: it.Content}, nil
	case it.Type == "function_call":
		call := make([]byte, 0, len(it.Name)+len(it.Arguments)+40)
		call = append(call, `[{"function":{"name":`...)
		call = append(call, orNull(it.Name)...)
		call = append(call, `,"arguments":`...)
		call = append(call, orNull(it.Arguments)...)
		return prompt.Message{Role: "assistant", ToolCalls: append(call, "}}]"...)}, nil
	case it.Type == "function_call_output":
		return prompt.Message{Role: "tool", Content: it.Output}, nil
	}
	return prompt.Message{Role: it.Type, Content: raw}, nil
}

// orNull is raw, or null when it is empty (an absent member).
func orNull(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// readAnswer reads a whole response: its usage, or, without one, the text
// of its output.
func (openAIResponses) readAnswer(s *usageSeen, raw []byte) bool {
	var u struct {
		Usage *responsesUsage `json:"usage"`
	}
	if json.Unmarshal(raw, &u) != nil {
		return false
	}
	if u.Usage != nil {
		u.Usage.addTo(s)
		return true
	}
	var out struct {
		Output []json.RawMessage `json:"output"`
	}
	if json.Unmarshal(raw, &out) != nil {
		return false
	}
	for _, item := range out.Output {
		addOutputItem(s, item)
	}
	return true
}

// responsesUsage is the Responses API's usage object: input_tokens counts
// the cached tokens too (see the file's comment).
type responsesUsage struct {
	InputTokens  int64              `json:"input_tokens"`
	OutputTokens int64              `json:"output_tokens"`
	InputDetails openAIPromptDetail `json:"input_tokens_details"`
}

func (u *responsesUsage) addTo(s *usageSeen) {
	s.prompt, s.promptSet, s.cached = u.InputTokens, true, u.InputDetails.CachedTokens
	s.completion, s.final = u.OutputTokens, true
}

// responsesOutputItem is the text of one output item: a message's text
// and refusal parts, a function call's name and arguments, a reasoning
// item's summary and text.
type responsesOutputItem struct {
	Content []struct {
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// addOutputItem adds the text of one output item to s; an item of another
// shape adds nothing.
func addOutputItem(s *usageSeen, raw json.RawMessage) {
	var it responsesOutputItem
	if json.Unmarshal(raw, &it) != nil {
		return
	}
	for _, c := range it.Content {
		s.addText(c.Text)
		s.addText(c.Refusal)
	}
	s.addText(it.Name)
	s.addText(it.Arguments)
	for _, r := range it.Summary {
		s.addText(r.Text)
	}
}

// responsesTextDeltas are the stream events whose delta is completion
// text (an audio or image event's delta is not text, and is not counted).
var responsesTextDeltas = map[string]bool{
	"response.output_text.delta":             true,
	"response.refusal.delta":                 true,
	"response.function_call_arguments.delta": true,
	"response.reasoning_text.delta":          true,
	"response.reasoning_summary_text.delta":  true,
	"response.custom_tool_call_input.delta":  true,
	"response.mcp_call_arguments.delta":      true,
}

// readEvent: the text deltas carry the completion, and a terminal event
// (response.completed, response.incomplete, response.failed) its
// response's usage; it ends the stream, settled before it is written.
// Every event is passed on. A stream cut before its terminal event settles
// as a chat stream's cut does: the counted prompt and the text seen.
func (openAIResponses) readEvent(_ *proxyCall, s *usageSeen, data []byte) (end, pass bool) {
	var e responsesEvent
	if !decodeResponsesEvent(data, &e) {
		if e = (responsesEvent{}); json.Unmarshal(data, &e) != nil {
			return false, true
		}
	}
	switch e.Type {
	case "response.completed", "response.incomplete", "response.failed":
		var r struct {
			Usage *responsesUsage `json:"usage"`
		}
		if json.Unmarshal(e.Response, &r) == nil && r.Usage != nil {
			r.Usage.addTo(s)
		}
		return true, true
	}
	if responsesTextDeltas[e.Type] {
		s.addText(jsonText(e.Delta))
	}
	return false, true
}

// responsesEvent is what the proxy reads of a Responses stream event.
// Delta is kept raw: the decoder then takes text with escapes and any
// UTF-8, and only the text deltas' are decoded (jsonText).
type responsesEvent struct {
	Type     string          `json:"type"`
	Delta    json.RawMessage `json:"delta"`
	Response json.RawMessage `json:"response"`
}

// jsonText is the value of raw, a JSON value, when it is a string; ""
// otherwise.
func jsonText(raw json.RawMessage) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body) // no escape: the bytes are the text
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
