package proxy

import (
	"encoding/json"

	"github.com/tokenring/tokenring/internal/jsonwire"
	"github.com/tokenring/tokenring/prompt"
)

// openAIStreamOptions is an openAIRequest's stream_options, as a type to
// decode.
type openAIStreamOptions = struct {
	IncludeUsage bool `json:"include_usage"`
}

// The decoders of a request (see openaijson.go for the subset they take):
// every field of the structs, other keys (a request's other parameters)
// skipped. A message's content and tool calls are kept raw, so their text
// may hold escapes and any UTF-8.
var (
	openAIMessageDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.String("role", func(m *prompt.Message) *string { return &m.Role }),
		jsonwire.String("name", func(m *prompt.Message) *string { return &m.Name }),
		jsonwire.Raw("content", func(m *prompt.Message) *json.RawMessage { return &m.Content }),
		jsonwire.Raw("tool_calls", func(m *prompt.Message) *json.RawMessage { return &m.ToolCalls }),
		jsonwire.String("tool_call_id", func(m *prompt.Message) *string { return &m.ToolCallID }),
	)
	openAIStreamOptionsDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Bool("include_usage", func(o *openAIStreamOptions) *bool { return &o.IncludeUsage }),
	)
	openAIRequestDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.String("model", func(in *openAIRequest) *string { return &in.Model }),
		jsonwire.Slice("messages", func(in *openAIRequest) *[]prompt.Message { return &in.Messages }, openAIMessageDecoder),
		jsonwire.IntPointer("max_tokens", func(in *openAIRequest) **int64 { return &in.MaxTokens }),
		jsonwire.Bool("stream", func(in *openAIRequest) *bool { return &in.Stream }),
		jsonwire.IntPointer("max_completion_tokens", func(in *openAIRequest) **int64 { return &in.MaxCompletionTokens }),
		jsonwire.IntPointer("n", func(in *openAIRequest) **int64 { return &in.N }),
		jsonwire.Pointer("stream_options", func(in *openAIRequest) **openAIStreamOptions { return &in.StreamOptions },
			openAIStreamOptionsDecoder),
	)
)

// decodeOpenAIRequest decodes a chat completion request into in, a zero
// openAIRequest, as encoding/json would; false leaves the body to
// encoding/json (in is then undefined: decode into a fresh one). The
// messages' raw content is in place: a request's body is never changed (a
// body the proxy rewrites is a new one).
func decodeOpenAIRequest(b []byte, in *openAIRequest) bool {
	return openAIRequestDecoder.Decode(b, in)
}
