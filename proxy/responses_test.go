package proxy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tokenring/tokenring/prompt"
)

// msg is a chat message of role with raw content.
func msg(role, content string) prompt.Message {
	return prompt.Message{Role: role, Content: json.RawMessage(content)}
}

// TestResponsesCountsInput: a Responses request's prompt is counted as the
// chat messages its instructions and input items are, with the chat
// counter, for every input shape.
func TestResponsesCountsInput(t *testing.T) {
	k := prompt.NewCounter()
	const model = "gpt-4o"
	for _, tc := range []struct {
		name, body string
		want       []prompt.Message
	}{
		{"string", `{"model":"gpt-4o","input":"Say hello."}`, []prompt.Message{msg("user", `"Say hello."`)}},
		{"instructions", `{"model":"gpt-4o","instructions":"Be brief.","input":"Say hello."}`,
			[]prompt.Message{msg("system", `"Be brief."`), msg("user", `"Say hello."`)}},
		{"messages", `{"model":"gpt-4o","input":[{"role":"developer","content":"Be brief."},{"type":"message","role":"user","content":[{"type":"input_text","text":"Say hello."},{"type":"input_image","image_url":"data:x"}]},{"role":"assistant","content":[{"type":"output_text","text":"Hi."}]}]}`,
			[]prompt.Message{msg("developer", `"Be brief."`),
				msg("user", `[{"type":"input_text","text":"Say hello."},{"type":"input_image","image_url":"data:x"}]`),
				msg("assistant", `[{"type":"output_text","text":"Hi."}]`)}},
		{"tool calls", `{"model":"gpt-4o","input":[{"type":"function_call","call_id":"c1","name":"weather","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call_output","call_id":"c1","output":"sunny"}]}`,
			[]prompt.Message{{Role: "assistant", ToolCalls: json.RawMessage(`[{"function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]`)}, msg("tool", `"sunny"`)}},
		{"other items", `{"model":"gpt-4o","input":[{"type":"item_reference","id":"msg_1"}]}`,
			[]prompt.Message{msg("item_reference", `{"type":"item_reference","id":"msg_1"}`)}},
		{"no input", `{"model":"gpt-4o","previous_response_id":"resp_1","input":null}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := proxyCall{p: openAIResponses{}}
			if err := c.p.parse(&c, []byte(tc.body)); err != nil {
				t.Fatal(err)
			}
			got, want := c.count(k), k.Messages(model, tc.want)
			if got != want || (tc.want != nil && want == 0) {
				t.Errorf("counted %d, want %d (the messages %s)", got, want, tc.want)
			}
			if c.promptBytes == 0 && tc.want != nil {
				t.Error("no bytes to count")
			}
			if c.model != model || c.stream || c.maxTokens != 0 || string(c.body) != tc.body {
				t.Errorf("call %+v", c)
			}
		})
	}
	c := proxyCall{p: openAIResponses{}}
	if err := c.p.parse(&c, []byte(`{"model":"gpt-4o","input":"x","max_output_tokens":300,"stream":true}`)); err != nil || c.maxTokens != 300 || !c.stream || c.stripUsage || c.noCompletion {
		t.Errorf("max_output_tokens and stream: %+v %v", c, err)
	}
}

// TestResponsesRefusesMalformed: a body the proxy cannot count is the
// client's error (a 400), with its reason.
func TestResponsesRefusesMalformed(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":`:                                         "invalid JSON body",
		`[1]`:                                               "invalid JSON body",
		`{"input":"x"}`:                                     "model",
		`{"model":"m","input":5}`:                           "input must be a string or an array",
		`{"model":"m","input":{"role":"user"}}`:             "input must be a string or an array",
		`{"model":"m","input":["hi"]}`:                      "input[0]: an input item must be an object",
		`{"model":"m","input":[{"role":5}]}`:                "input[0]",
		`{"model":"m","input":"x","instructions":[1]}`:      "instructions must be a string",
		`{"model":"m","input":"x","max_output_tokens":-1}`:  "max_output_tokens",
		`{"model":"m","input":"x","max_output_tokens":1.5}`: "invalid JSON body",
		`{"model":"m","input":"x","stream":"yes"}`:          "invalid JSON body",
	} {
		c := proxyCall{p: openAIResponses{}}
		if err := c.p.parse(&c, []byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", body, err, want)
		}
	}
}

// TestResponsesUsage: a whole response settles with its usage, the cached
// input tokens inside input_tokens (not added to it); without usage, with
// the text of its output.
func TestResponsesUsage(t *testing.T) {
	k := prompt.NewCounter()
	for _, tc := range []struct {
		name, body           string
		prompt, completion   int64
		promptSet, finalSeen bool
	}{
		{"usage", `{"id":"resp_1","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi there"}]}],"usage":{"input_tokens":120,"input_tokens_details":{"cached_tokens":0},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":129}}`,
			120, 9, true, true},
		{"cached", `{"usage":{"input_tokens":2006,"input_tokens_details":{"cached_tokens":1920},"output_tokens":300,"total_tokens":2306}}`,
			2006, 300, true, true},
		{"no usage", `{"status":"completed","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"Think."}]},{"type":"message","content":[{"type":"output_text","text":"Hi there"},{"type":"refusal","refusal":" No."}]},{"type":"function_call","name":"f","arguments":"{}"},{"type":"web_search_call","action":{"query":"x"}}],"usage":null}`,
			100, int64(k.Text("gpt-4o", "Think.Hi there No.f{}")), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := usageSeen{countText: textCounter(k, "gpt-4o")}
			if !(openAIResponses{}).readAnswer(&s, []byte(tc.body)) {
				t.Fatal("not read")
			}
			if s.promptSet != tc.promptSet || s.final != tc.finalSeen {
				t.Errorf("prompt set %v, final %v", s.promptSet, s.final)
			}
			if u := s.usage(100); u.PromptTokens != tc.prompt || u.CompletionTokens != tc.completion {
				t.Errorf("settles %+v, want prompt %d completion %d", u, tc.prompt, tc.completion)
			}
		})
	}
	s := usageSeen{countText: textCounter(k, "gpt-4o")}
	if (openAIResponses{}).readAnswer(&s, []byte(`{"usage":{"input_tokens":"many"}}`)) {
		t.Error("a usage of the wrong type was read")
	}
}

// responsesStream is a Responses stream's events' data, as OpenAI sends
// them (abridged).
var responsesStream = []string{
	`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null}}`,
	`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
	`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello","logprobs":[]}`,
	`{"type":"response.output_text.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" th\u00e9re\n","logprobs":[]}`,
	`{"type":"response.audio.delta","sequence_number":4,"delta":"UklGRg=="}`,
	`{"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_1","output_index":1,"delta":"{\"a\":1}"}`,
	`{"type":"response.output_text.done","sequence_number":6,"item_id":"msg_1","text":"Hello thére\n"}`,
	`{"type":"response.completed","sequence_number":7,"response":{"id":"resp_1","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hello thére\n"}]}],"usage":{"input_tokens":37,"input_tokens_details":{"cached_tokens":32},"output_tokens":11,"total_tokens":48}}}`,
}

// TestResponsesStream: the text deltas are counted as completion (not an
// audio delta, not the .done events that repeat them), response.completed
// ends the stream with its usage, and every event is passed on; a stream
// cut before response.completed settles with the prompt as counted and
// the text seen.
func TestResponsesStream(t *testing.T) {
	k := prompt.NewCounter()
	c := proxyCall{p: openAIResponses{}}
	s := usageSeen{countText: textCounter(k, "gpt-4o")}
	for i, d := range responsesStream {
		end, pass := c.p.readEvent(&c, &s, []byte(d))
		if !pass || end != (i == len(responsesStream)-1) {
			t.Fatalf("event %d: end %v pass %v", i, end, pass)
		}
		if i == 6 { // cut here: what the text deltas showed
			want := int64(k.Text("gpt-4o", "Hello thére\n{\"a\":1}"))
			if u := s.usage(50); u.PromptTokens != 50 || u.CompletionTokens != want {
				t.Errorf("cut before response.completed: %+v, want prompt 50 completion %d", u, want)
			}
		}
	}
	if u := s.usage(50); u.PromptTokens != 37 || u.CompletionTokens != 11 {
		t.Errorf("after response.completed: %+v, want its usage 37 + 11", u)
	}
	for _, terminal := range []string{
		`{"type":"response.incomplete","response":{"status":"incomplete","usage":{"input_tokens":5,"output_tokens":64}}}`,
		`{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error"},"usage":null}}`,
	} {
		s := usageSeen{countText: textCounter(k, "gpt-4o")}
		if end, pass := c.p.readEvent(&c, &s, []byte(terminal)); !end || !pass {
			t.Errorf("%s: end %v pass %v", terminal, end, pass)
		}
	}
	if end, pass := c.p.readEvent(&c, &s, []byte(`{"type":`)); end || !pass {
		t.Errorf("a broken event: end %v pass %v", end, pass)
	}
}

// TestDecodeResponsesEventTakesWhatOpenAISends: the events are decoded
// without encoding/json, to its values (deltas with escapes and UTF-8
// included: they are kept raw).
func TestDecodeResponsesEventTakesWhatOpenAISends(t *testing.T) {
	for _, d := range responsesStream {
		var got, want responsesEvent
		if !decodeResponsesEvent([]byte(d), &got) {
			t.Errorf("not taken: %s", d)
			continue
		}
		if err := json.Unmarshal([]byte(d), &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, encoding/json %+v (%v)", d, got, want, err)
		}
	}
	for _, d := range []string{`{"type":"a\nb"}`, `{"type":"é"}`, `{"type":"a","Type":"b"}`, `{"type":1}`, `{"delta":"x"`, `null`} {
		var e responsesEvent
		if decodeResponsesEvent([]byte(d), &e) {
			t.Errorf("taken: %s", d)
		}
	}
}

// TestResponsesDecoderMatches: the table is the struct's fields, every one.
func TestResponsesDecoderMatches(t *testing.T) {
	if err := responsesEventDecoder.Check(); err != nil {
		t.Error(err)
	}
}

// FuzzDecodeResponsesEvent: whatever the table takes, encoding/json takes
// to the same value; and reading any event never panics, and counts text
// only from a text delta.
func FuzzDecodeResponsesEvent(f *testing.F) {
	for _, d := range responsesStream {
		f.Add([]byte(d))
	}
	for _, d := range []string{`{"type":"response.output_text.delta","delta":"a\"b\u0000"}`, `{"TYPE":"x","Delta":[1,{"a":null}],"response":null}`,
		`{"type":"response.completed","response":{"usage":{"input_tokens":1e3}}}`, `{"type":"response.refusal.delta","delta":"\xff"}`, `{"delta":"x","delta":"y"}`} {
		f.Add([]byte(d))
	}
	k := prompt.NewCounter()
	f.Fuzz(func(t *testing.T, b []byte) {
		var got responsesEvent
		if decodeResponsesEvent(b, &got) {
			var want responsesEvent
			if err := json.Unmarshal(b, &want); err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: table %+v, encoding/json %+v (%v)", b, got, want, err)
			}
		}
		c := proxyCall{p: openAIResponses{}}
		s := usageSeen{countText: textCounter(k, "gpt-4o")}
		c.p.readEvent(&c, &s, b)
		var e responsesEvent
		if json.Unmarshal(b, &e) == nil && !responsesTextDeltas[e.Type] && s.text.Len() > 0 {
			t.Fatalf("%q: counted text %q from a %q event", b, s.text.String(), e.Type)
		}
	})
}

// FuzzParseResponses: parsing any body never panics; a body it takes is
// a JSON object encoding/json reads, whose prompt counts without panicking.
func FuzzParseResponses(f *testing.F) {
	for _, b := range []string{
		`{"model":"gpt-4o","input":"hi","instructions":"x","max_output_tokens":5}`,
		`{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","name":5}]}`,
		`{"model":"m","input":[{"type":"function_call_output","output":[{"type":"input_text","text":"x"}]},{"type":"reasoning","summary":[]}]}`,
		`{"model":"m","input":[{}]}`, `{"model":"m","input":[]}`, `{"model":"m","input":[1]}`,
	} {
		f.Add([]byte(b))
	}
	k := prompt.NewCounter()
	f.Fuzz(func(t *testing.T, b []byte) {
		c := proxyCall{p: openAIResponses{}}
		if c.p.parse(&c, b) != nil {
			return
		}
		var in responsesRequest
		if err := json.Unmarshal(b, &in); err != nil || in.Model != c.model {
			t.Fatalf("%q taken: encoding/json %v, model %q", b, err, in.Model)
		}
		if n := c.count(k); n < 0 {
			t.Fatalf("%q counted %d", b, n)
		}
	})
}

// BenchmarkDecodeResponsesEvent decodes a text delta as OpenAI streams it,
// the table against encoding/json: the reason a stream's events have a
// table of their own.
func BenchmarkDecodeResponsesEvent(b *testing.B) {
	d := []byte(responsesStream[2])
	b.Run("table", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e responsesEvent
			if !decodeResponsesEvent(d, &e) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e responsesEvent
			if err := json.Unmarshal(d, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
