package proxy

import (
	"encoding/json"

	"github.com/tokenring/tokenring/internal/jsonwire"
	"github.com/tokenring/tokenring/prompt"
)

// decodeOpenAIRequest decodes a chat completion request into in, a zero
// openAIRequest, as encoding/json would (see openaijson.go for the subset
// it takes); false leaves the body to encoding/json (in is then undefined:
// decode into a fresh one). A message's content and tool calls are kept
// raw, so their text may hold escapes and any UTF-8.
func decodeOpenAIRequest(b []byte, in *openAIRequest) bool {
	s := fastJSON{jsonwire.New(b)}
	return s.Peek() == '{' && s.request(in) && s.End()
}

func (s *fastJSON) request(in *openAIRequest) bool {
	var f fields
	dup := false
	return s.Members(func(key []byte) bool {
		switch {
		case f.is(key, 0, "model", &dup):
			return !dup && s.text(&in.Model)
		case f.is(key, 1, "messages", &dup):
			return !dup && s.messages(&in.Messages)
		case f.is(key, 2, "max_tokens", &dup):
			return !dup && s.intPointer(&in.MaxTokens)
		case f.is(key, 3, "stream", &dup):
			return !dup && s.boolean(&in.Stream)
		case f.is(key, 4, "max_completion_tokens", &dup):
			return !dup && s.intPointer(&in.MaxCompletionTokens)
		case f.is(key, 5, "n", &dup):
			return !dup && s.intPointer(&in.N)
		case f.is(key, 6, "stream_options", &dup):
			return !dup && s.streamOptions(in)
		}
		return s.skip()
	})
}

func (s *fastJSON) messages(msgs *[]prompt.Message) bool {
	return arrayOf(s, msgs, func(m *prompt.Message) bool {
		var f fields
		dup := false
		return s.Members(func(key []byte) bool {
			switch {
			case f.is(key, 0, "role", &dup):
				return !dup && s.text(&m.Role)
			case f.is(key, 1, "name", &dup):
				return !dup && s.text(&m.Name)
			case f.is(key, 2, "content", &dup):
				return !dup && s.rawMessage(&m.Content)
			case f.is(key, 3, "tool_calls", &dup):
				return !dup && s.rawMessage(&m.ToolCalls)
			case f.is(key, 4, "tool_call_id", &dup):
				return !dup && s.text(&m.ToolCallID)
			}
			return s.skip()
		})
	})
}

// rawMessage reads any value into v, its bytes as encoding/json fills a
// json.RawMessage (a null included), in place: a request's body is never
// changed (a body the proxy rewrites is a new one).
func (s *fastJSON) rawMessage(v *json.RawMessage) bool {
	b, ok := s.Any(maxFastDepth)
	if ok {
		*v = b
	}
	return ok
}

// intPointer reads an integer into a new *v, or a null, which sets v nil.
func (s *fastJSON) intPointer(v **int64) bool {
	if s.Null() {
		*v = nil
		return true
	}
	n := new(int64)
	*v = n
	return s.Peek() != 'n' && s.int(n)
}

// boolean reads true or false into v, or a null, which leaves v.
func (s *fastJSON) boolean(v *bool) bool { return orNull(s, v, s.Bool) }

func (s *fastJSON) streamOptions(in *openAIRequest) bool {
	if s.Null() {
		in.StreamOptions = nil
		return true
	}
	in.StreamOptions = &struct {
		IncludeUsage bool `json:"include_usage"`
	}{}
	var f fields
	dup := false
	return s.Members(func(key []byte) bool {
		if f.is(key, 0, "include_usage", &dup) {
			return !dup && s.boolean(&in.StreamOptions.IncludeUsage)
		}
		return s.skip()
	})
}
