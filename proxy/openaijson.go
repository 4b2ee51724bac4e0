package proxy

import "github.com/tokenring/tokenring/internal/jsonwire"

// Decoders of OpenAI answers and stream chunks (openAIAnswer) and of
// requests (openAIRequest, openaireq.go) for the plainest of them, without
// reflection: encoding/json spent a tenth of a streamed completion's CPU
// time in the proxy on the chunks alone, and 6% of a whole one's on the
// request. They are internal/jsonwire's Decoders, tables of the structs'
// fields, which take only text that encoding/json decodes without error
// and to the same values (jsonwire's FuzzDecoder; TestOpenAIDecodersMatch
// checks the tables against the structs): keys and the strings decoded in
// printable ASCII without escapes, known keys once per object (in any
// case, as encoding/json matches them), values of their fields' types,
// the values skipped or kept raw any valid JSON nested at most
// jsonwire.MaxDepth deep. Anything else is encoding/json's.

// openAIFunction is an openAIToolCall's function, as a type to decode.
type openAIFunction = struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// The decoders of an answer: every field of the structs, other keys
// skipped (an LLM's answer has many).
var (
	openAIFunctionDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.String("name", func(f *openAIFunction) *string { return &f.Name }),
		jsonwire.String("arguments", func(f *openAIFunction) *string { return &f.Arguments }),
	)
	openAIToolCallDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Object("function", func(tc *openAIToolCall) *openAIFunction { return &tc.Function }, openAIFunctionDecoder),
	)
	openAIDeltaDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.String("content", func(d *openAIDelta) *string { return &d.Content }),
		jsonwire.String("refusal", func(d *openAIDelta) *string { return &d.Refusal }),
		jsonwire.String("reasoning_content", func(d *openAIDelta) *string { return &d.ReasoningContent }),
		jsonwire.Slice("tool_calls", func(d *openAIDelta) *[]openAIToolCall { return &d.ToolCalls }, openAIToolCallDecoder),
	)
	openAIChoiceDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Object("message", func(c *openAIChoice) *openAIDelta { return &c.Message }, openAIDeltaDecoder),
		jsonwire.Object("delta", func(c *openAIChoice) *openAIDelta { return &c.Delta }, openAIDeltaDecoder),
	)
	openAIPromptDetailDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Int("cached_tokens", func(d *openAIPromptDetail) *int64 { return &d.CachedTokens }),
	)
	openAIUsageDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Int("prompt_tokens", func(u *openAIUsage) *int64 { return &u.PromptTokens }),
		jsonwire.Int("completion_tokens", func(u *openAIUsage) *int64 { return &u.CompletionTokens }),
		jsonwire.Object("prompt_tokens_details", func(u *openAIUsage) *openAIPromptDetail { return &u.PromptDetails }, openAIPromptDetailDecoder),
	)
	openAIAnswerDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Slice("choices", func(a *openAIAnswer) *[]openAIChoice { return &a.Choices }, openAIChoiceDecoder),
		jsonwire.Pointer("usage", func(a *openAIAnswer) **openAIUsage { return &a.Usage }, openAIUsageDecoder),
	)
)

// decodeOpenAIAnswer decodes b into a, a zero openAIAnswer; false means b
// is outside the subset (a is then undefined: decode into a fresh one).
func decodeOpenAIAnswer(b []byte, a *openAIAnswer) bool {
	return openAIAnswerDecoder.Decode(b, a)
}
