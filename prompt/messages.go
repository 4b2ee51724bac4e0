package prompt

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// ImageTokens is the fixed estimate for one image, and for any other non-text
// content part (audio, file, document): 85 tokens, the figure OpenAI publishes
// for a low-detail image. A high-detail image costs more (85 plus 170 per
// 512-pixel tile for gpt-4o); the settle with the provider's reported usage
// corrects the difference.
const ImageTokens = 85

// OpenAI's chat formatting overhead, from the OpenAI cookbook "How to count
// tokens with tiktoken" (num_tokens_from_messages): the same constants for
// gpt-3.5-turbo-0125, gpt-4-0613, gpt-4o and gpt-4o-mini.
const (
	tokensPerMessage = 3 // <|start|>{role/name}\n{content}<|end|>\n
	tokensPerName    = 1 // a message with a name
	replyPriming     = 3 // every reply is primed with <|start|>assistant<|message|>
)

// maxDepth bounds how deeply nested content (an Anthropic tool_result holding
// blocks) is followed; deeper content is counted as raw JSON text.
const maxDepth = 4

// Message is one chat message, OpenAI or Anthropic, as it appears in a request
// body. Unknown JSON fields are ignored.
//
// Content is kept raw because it takes several shapes: a JSON string, null or
// absent (an assistant message with only tool calls), or an array of parts:
// strings, or objects with a "type" (see Counter.Messages for how each is
// counted).
type Message struct {
	Role       string          `json:"role"`                   // "system", "user", "assistant", "tool", ...
	Name       string          `json:"name,omitempty"`         // OpenAI participant name
	Content    json.RawMessage `json:"content,omitempty"`      // a JSON string, null, or an array of parts
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`   // OpenAI assistant tool calls
	ToolCallID string          `json:"tool_call_id,omitempty"` // OpenAI tool-result message
}

// Messages returns the prompt tokens of an OpenAI chat completion request with
// msgs, following OpenAI's cookbook: each message costs 3 tokens plus the
// tokens of its role, content and name, plus 1 when it has a name, and the
// reply priming adds 3. With the cookbook's example conversation this gives
// 129 for gpt-4 and 124 for gpt-4o, the counts the OpenAI API reported.
//
// Content parts: "text" parts count their text, "refusal" parts their refusal;
// a bare string in the array counts as text; every other part ("image_url",
// "input_audio", "file", ...) counts ImageTokens. Tool calls count the tokens
// of each function's name and arguments, and ToolCallID its own tokens. Tool
// definitions (the request's "tools") are not messages and are not counted.
// Content of an unexpected JSON shape counts as the tokens of its JSON text.
// These extensions of the cookbook's formula are estimates.
//
// No messages count 0. Messages never panics, whatever the content holds.
func (c *Counter) Messages(model string, msgs []Message) int {
	if len(msgs) == 0 {
		return 0
	}
	ct := c.contentCounter(Encoding(model))
	n := replyPriming
	for i := range msgs {
		m := &msgs[i]
		n += tokensPerMessage + ct.count(m.Role) + ct.content(m.Content, 0)
		if m.Name != "" {
			n += ct.count(m.Name) + tokensPerName
		}
		n += ct.count(m.ToolCallID) + ct.toolCalls(m.ToolCalls)
	}
	return n
}

// AnthropicMessages estimates the input tokens of an Anthropic Messages API
// request with the given system prompt and messages. Anthropic's tokenizer is
// not public, so this counts with cl100k_base, whatever model says, and uses
// OpenAI's per-message overhead: the system prompt, when not empty, counts as
// a message with role "system". Expect it to be off by some percent (newer
// Claude tokenizers produce more tokens than cl100k_base); the settle with
// the reported usage corrects it.
//
// Content blocks: "text" counts its text, "thinking" its thinking, "tool_use"
// its name and the JSON text of its input, "tool_result" its content (a string
// or blocks), and every other block ("image", "document", ...) counts
// ImageTokens. A system prompt given as blocks can be passed as the first
// message with role "system" and an empty system.
//
// No system and no messages count 0. AnthropicMessages never panics.
func (c *Counter) AnthropicMessages(model, system string, msgs []Message) int {
	_ = model // the estimate is the same for every Claude model
	if system == "" && len(msgs) == 0 {
		return 0
	}
	ct := c.contentCounter(Cl100kBase)
	n := replyPriming
	if system != "" {
		n += tokensPerMessage + ct.count("system") + ct.count(system)
	}
	for i := range msgs {
		m := &msgs[i]
		n += tokensPerMessage + ct.count(m.Role) + ct.content(m.Content, 0)
	}
	return n
}

// contentCounter counts message content in one encoding (bpe nil: the
// fallback estimate, see Counter.Text), remembering the counts in cache.
type contentCounter struct {
	bpe   *bpe
	cache *countCache
}

// count returns the tokens of s, from the cache when s was counted lately.
func (ct contentCounter) count(s string) int {
	if s == "" || ct.bpe == nil {
		return count(ct.bpe, s)
	}
	if n, ok := ct.cache.get(s); ok {
		return n
	}
	n := count(ct.bpe, s)
	ct.cache.put(s, n)
	return n
}

// part is the union of the content part and block shapes that are counted.
type part struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Refusal  string          `json:"refusal"`
	Thinking string          `json:"thinking"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Content  json.RawMessage `json:"content"`
}

// content counts raw message content: a string, null, or an array of parts.
func (ct contentCounter) content(raw json.RawMessage, depth int) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0
	}
	switch raw[0] {
	case '"':
		if s, ok := plainJSONString(raw); ok {
			return ct.count(s)
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return ct.count(s)
		}
	case '[':
		var parts []json.RawMessage
		if depth < maxDepth && json.Unmarshal(raw, &parts) == nil {
			n := 0
			for _, p := range parts {
				n += ct.part(p, depth)
			}
			return n
		}
	}
	return ct.count(string(raw))
}

// plainJSONString returns the value of raw when raw is a JSON string
// without escapes, whose value is its bytes between the quotes; false
// otherwise (json.Unmarshal then decodes it).
func plainJSONString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, b := range body {
		if b == '\\' || b == '"' || b < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(body) { // json.Unmarshal would replace the invalid bytes
		return "", false
	}
	return string(body), true
}

// part counts one element of a content array.
func (ct contentCounter) part(raw json.RawMessage, depth int) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return ct.content(raw, depth+1) // a string, null, or something odd
	}
	var p part
	if json.Unmarshal(raw, &p) != nil {
		return ct.count(string(raw))
	}
	switch p.Type {
	case "text", "input_text", "output_text":
		return ct.count(p.Text)
	case "refusal":
		return ct.count(p.Refusal)
	case "thinking":
		return ct.count(p.Thinking)
	case "tool_use", "server_tool_use":
		return ct.count(p.Name) + ct.count(string(bytes.TrimSpace(p.Input)))
	case "tool_result":
		return ct.content(p.Content, depth+1)
	}
	return ImageTokens
}

// toolCalls counts OpenAI tool calls: each function's name and arguments.
func (ct contentCounter) toolCalls(raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0
	}
	var calls []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &calls) != nil {
		return ct.count(string(raw))
	}
	n := 0
	for _, c := range calls {
		n += ct.count(c.Function.Name) + ct.count(c.Function.Arguments)
	}
	return n
}
