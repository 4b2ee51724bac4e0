package proxy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// openAIChunks are answers and stream chunks as OpenAI sends them.
var openAIChunks = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1796129162,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}`,
	`{"choices":[{"delta":{"content":" there"},"finish_reason":null,"index":0,"logprobs":null}],"created":1796129162,"id":"chatcmpl-fake1","model":"gpt-4o-mini","object":"chat.completion.chunk","usage":null}`,
	`{"choices":[],"created":1,"id":"x","usage":{"completion_tokens":7,"prompt_tokens":12,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"id":"chatcmpl-2","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there!","tool_calls":[{"id":"c1","type":"function","function":{"name":"get","arguments":"{}"}}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}`,
	`{"choices":[{"delta":{"reasoning_content":"think","tool_calls":[null,{"function":null},{"function":{"name":null}}]}},null],"usage":{"prompt_tokens":-0,"completion_tokens":null}}`,
	` { "Choices" : [ { "DELTA" : { "Content" : "x" } } ] , "x" : [ 1.5e3 , true , false , { } , [ ] ] } `,
}

// TestDecodeOpenAIAnswerTakesWhatOpenAISends: the usual chunks and answers
// are decoded without encoding/json, to its values.
func TestDecodeOpenAIAnswerTakesWhatOpenAISends(t *testing.T) {
	for _, c := range openAIChunks {
		var got, want openAIAnswer
		if !decodeOpenAIAnswer([]byte(c), &got) {
			t.Errorf("not taken: %s", c)
			continue
		}
		if err := json.Unmarshal([]byte(c), &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, encoding/json %+v (%v)", c, got, want, err)
		}
	}
}

// TestDecodeOpenAIAnswerLeavesTheRest: text outside the subset is left to
// encoding/json: escapes, non-ASCII, a repeated field, a wrong type, a
// number an int64 does not take, invalid JSON.
func TestDecodeOpenAIAnswerLeavesTheRest(t *testing.T) {
	for _, c := range []string{
		`{"choices":[{"delta":{"content":"a\nb"}}]}`,
		`{"choices":[{"delta":{"content":"é"}}]}`,
		`{"choices":[],"Choices":[]}`,
		`{"choices":[{"delta":{"content":1}}]}`,
		`{"usage":{"prompt_tokens":1.0}}`,
		`{"usage":{"prompt_tokens":1234567890123456789}}`,
		`{"choices":[{"delta":{"content":"x"}}]`,
		`{"choices":[{"delta":{"content":"x"}}]} x`,
		`{"a":01}`,
		`null`,
		`{"a":"tab	inside"}`,
	} {
		var a openAIAnswer
		if decodeOpenAIAnswer([]byte(c), &a) {
			t.Errorf("taken: %s", c)
		}
	}
}

// TestOpenAIDecodersMatch: the tables are the structs' fields, every one
// (they skip other keys), so that what they take they read as
// encoding/json does (jsonwire's FuzzDecoder fuzzes the kinds of field).
func TestOpenAIDecodersMatch(t *testing.T) {
	for _, err := range []error{openAIAnswerDecoder.Check(), openAIRequestDecoder.Check()} {
		if err != nil {
			t.Error(err)
		}
	}
}

// BenchmarkDecodeOpenAIAnswer decodes a streamed chunk and a whole answer
// as OpenAI sends them, the fast path against encoding/json.
func BenchmarkDecodeOpenAIAnswer(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
	}{{"chunk", []byte(openAIChunks[1])}, {"answer", []byte(openAIChunks[3])}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var a openAIAnswer
				if !decodeOpenAIAnswer(c.body, &a) {
					b.Fatal("not decoded")
				}
			}
		})
		b.Run(c.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var a openAIAnswer
				if err := json.Unmarshal(c.body, &a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
