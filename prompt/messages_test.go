package prompt

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// cookbookMessages is example_messages from the OpenAI cookbook "How to count
// tokens with tiktoken", for which the OpenAI API reported 129 prompt tokens
// (gpt-3.5-turbo, gpt-4-0613, gpt-4) and 124 (gpt-4o, gpt-4o-mini).
const cookbookMessages = `[
  {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
  {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
  {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
  {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
  {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
  {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."}
]`

func decode(t testing.TB, s string) []Message {
	t.Helper()
	var msgs []Message
	if err := json.Unmarshal([]byte(s), &msgs); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestMessagesCookbook(t *testing.T) {
	msgs := decode(t, cookbookMessages)
	for _, tc := range []struct {
		model string
		want  int
	}{
		{"gpt-3.5-turbo", 129},
		{"gpt-4-0613", 129},
		{"gpt-4", 129},
		{"gpt-4o", 124},
		{"gpt-4o-mini", 124},
	} {
		if got := counter.Messages(tc.model, msgs); got != tc.want {
			t.Errorf("Messages(%s, cookbook) = %d, want %d", tc.model, got, tc.want)
		}
	}
}

func TestMessages(t *testing.T) {
	hello := counter.Text("gpt-4o", "hello world") // 2
	image := `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUJD", 1000) + `"}}`
	for _, tc := range []struct {
		name string
		msgs string
		want int
	}{
		{"no messages", `[]`, 0},
		{"empty content", `[{"role":"user","content":""}]`, 3 + 1 + 3},
		{"null content", `[{"role":"user","content":null}]`, 3 + 1 + 3},
		{"absent content", `[{"role":"user"}]`, 3 + 1 + 3},
		{"string", `[{"role":"user","content":"hello world"}]`, 3 + 1 + hello + 3},
		{"name", `[{"role":"user","name":"bob","content":"hello world"}]`, 3 + 1 + hello + 1 + 1 + 3},
		{"text part", `[{"role":"user","content":[{"type":"text","text":"hello world"}]}]`, 3 + 1 + hello + 3},
		{"two text parts", `[{"role":"user","content":[{"type":"text","text":"hello world"},{"type":"text","text":"hello world"}]}]`, 3 + 1 + 2*hello + 3},
		{"image part", `[{"role":"user","content":[{"type":"text","text":"hello world"},` + image + `]}]`, 3 + 1 + hello + ImageTokens + 3},
		{"audio part", `[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]}]`, 3 + 1 + ImageTokens + 3},
		{"string part", `[{"role":"user","content":["hello world"]}]`, 3 + 1 + hello + 3},
		{"refusal part", `[{"role":"assistant","content":[{"type":"refusal","refusal":"hello world"}]}]`, 3 + 1 + hello + 3},
		{"tool calls", `[{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"hello","arguments":"hello world"}}]}]`,
			3 + 1 + 1 + hello + 3},
		{"tool result", `[{"role":"tool","tool_call_id":"hello","content":"hello world"}]`, 3 + 1 + 1 + hello + 3},
		{"number content", `[{"role":"user","content":12}]`, 3 + 1 + 1 + 3},
		{"bad part", `[{"role":"user","content":[{"type":"text","text":5}]}]`, 3 + 1 + counter.Text("gpt-4o", `{"type":"text","text":5}`) + 3},
	} {
		if got := counter.Messages("gpt-4o", decode(t, tc.msgs)); got != tc.want {
			t.Errorf("%s: Messages = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := counter.Messages("gpt-4o", nil); got != 0 {
		t.Errorf("Messages(nil) = %d, want 0", got)
	}
}

func TestAnthropicMessages(t *testing.T) {
	hello := counter.Text("gpt-4", "hello world") // cl100k_base: 2
	for _, tc := range []struct {
		name   string
		system string
		msgs   string
		want   int
	}{
		{"nothing", "", `[]`, 0},
		{"system only", "hello world", `[]`, 3 + 1 + hello + 3},
		{"string", "", `[{"role":"user","content":"hello world"}]`, 3 + 1 + hello + 3},
		{"system and string", "hello world", `[{"role":"user","content":"hello world"}]`, 3 + 1 + hello + 3 + 1 + hello + 3},
		{"text block", "", `[{"role":"user","content":[{"type":"text","text":"hello world"}]}]`, 3 + 1 + hello + 3},
		{"image block", "", `[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"QUJD"}}]}]`, 3 + 1 + ImageTokens + 3},
		{"tool use", "", `[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"hello","input":{}}]}]`,
			3 + 1 + 1 + counter.Text("gpt-4", "{}") + 3},
		{"tool result blocks", "", `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"hello world"}]}]}]`,
			3 + 1 + hello + 3},
		{"tool result string", "", `[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"hello world"}]}]`,
			3 + 1 + hello + 3},
		{"thinking", "", `[{"role":"assistant","content":[{"type":"thinking","thinking":"hello world","signature":"xyz"}]}]`,
			3 + 1 + hello + 3},
	} {
		// The model does not matter: always cl100k_base.
		for _, model := range []string{"claude-sonnet-4-5", "gpt-4o"} {
			if got := counter.AnthropicMessages(model, tc.system, decode(t, tc.msgs)); got != tc.want {
				t.Errorf("%s: AnthropicMessages(%s) = %d, want %d", tc.name, model, got, tc.want)
			}
		}
	}
}

// TestDeepNesting checks that nesting is bounded rather than recursive.
func TestDeepNesting(t *testing.T) {
	deep := strings.Repeat(`[`, 500) + strings.Repeat(`]`, 500)
	msgs := []Message{{Role: "user", Content: json.RawMessage(deep)}}
	if n := counter.Messages("gpt-4o", msgs); n <= 0 {
		t.Errorf("Messages(deep) = %d", n)
	}
	blocks := `"x"`
	for range 50 {
		blocks = `[{"type":"tool_result","content":` + blocks + `}]`
	}
	msgs = []Message{{Role: "user", Content: json.RawMessage(blocks)}}
	if n := counter.AnthropicMessages("claude", "", msgs); n <= 0 {
		t.Errorf("AnthropicMessages(deep) = %d", n)
	}
}

func FuzzMessagesJSON(f *testing.F) {
	for _, s := range []string{
		cookbookMessages,
		`[]`, `null`, `[{}]`, `[{"content":[]}]`, `[{"content":[null,1,"x",[],{}]}]`,
		`[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}]`,
		`[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]`,
		`[{"role":"assistant","tool_calls":{"a":1}}]`,
		`[{"role":"user","content":[{"type":"tool_result","content":[{"type":"tool_result","content":"x"}]}]}]`,
		`[{"role":"user","content":"<|endoftext|>\u0000\ud800"}]`,
	} {
		f.Add([]byte(s))
	}
	c := NewCounter()
	if err := c.Load(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var msgs []Message
		if json.Unmarshal(data, &msgs) != nil {
			return
		}
		for _, model := range []string{"gpt-4", "gpt-4o"} {
			// The count is the reply priming plus each message's own count:
			// adding a message adds at least its overhead, never less.
			n := c.Messages(model, msgs)
			if len(msgs) == 0 && n != 0 {
				t.Fatalf("%s: no messages count %d, want 0", model, n)
			}
			sum := replyPriming
			for i := range msgs {
				one := c.Messages(model, msgs[i:i+1]) - replyPriming
				least := tokensPerMessage
				if msgs[i].Name != "" {
					least += tokensPerName
				}
				if one < least {
					t.Fatalf("%s: message %d counts %d, less than its overhead %d", model, i, one, least)
				}
				sum += one
				if prefix := c.Messages(model, msgs[:i+1]); prefix != sum {
					t.Fatalf("%s: the first %d messages count %d, want %d (priming plus each message's count)", model, i+1, prefix, sum)
				}
			}
		}
		// Anthropic: the same sum, and a system prompt counts as a first
		// message with role "system" and that text as content.
		system := string(data) // valid JSON, so never empty
		n := c.AnthropicMessages("claude", system, msgs)
		sum := c.AnthropicMessages("claude", system, nil)
		for i := range msgs {
			sum += c.AnthropicMessages("claude", "", msgs[i:i+1]) - replyPriming
		}
		if n != sum {
			t.Fatalf("AnthropicMessages = %d, want %d (priming plus the system prompt plus each message)", n, sum)
		}
		if utf8.ValidString(system) { // json.Marshal would replace invalid UTF-8
			content, _ := json.Marshal(system)
			asMessage := append([]Message{{Role: "system", Content: content}}, msgs...)
			if got := c.AnthropicMessages("claude", "", asMessage); got != n {
				t.Fatalf("system prompt as a message counts %d, as the system %d", got, n)
			}
		}
	})
}
