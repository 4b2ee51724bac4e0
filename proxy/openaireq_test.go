package proxy

import (
	"encoding/json"
	"reflect"
	"testing"
)

// openAIRequests are chat completion requests as SDKs send them.
var openAIRequests = []string{
	`{"model":"gpt-4o-mini","max_tokens":100,"stream":false,"messages":[{"role":"user","content":"Say hello."}]}`,
	`{"messages":[{"role":"system","content":"Be brief.\nVery brief: \"ok\" \u00e9"},{"role":"user","name":"ann","content":[{"type":"text","text":"hé"},{"type":"image_url","image_url":{"url":"data:x"}}]}],"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"n":2,"max_completion_tokens":50,"temperature":0.7}`,
	`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"42"},null],"max_tokens":null,"stream":null,"stream_options":null,"n":null}`,
	` { "MODEL" : "m" , "Messages" : [ { "ROLE" : "user" , "content" : "x" } ] , "tools" : [ { "x" : [ 1e-3 , -0 , true ] } ] } `,
}

// TestDecodeOpenAIRequestTakesWhatSDKsSend: the usual requests are decoded
// without encoding/json, to its values (content kept raw, escapes and all).
func TestDecodeOpenAIRequestTakesWhatSDKsSend(t *testing.T) {
	for _, c := range openAIRequests {
		var got, want openAIRequest
		if !decodeOpenAIRequest([]byte(c), &got) {
			t.Errorf("not taken: %s", c)
			continue
		}
		if err := json.Unmarshal([]byte(c), &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, encoding/json %+v (%v)", c, got, want, err)
		}
	}
}

// TestDecodeOpenAIRequestLeavesTheRest: outside the subset, encoding/json
// decides: an escaped model or role, a key with an escape, a repeated
// field, a wrong type, invalid JSON.
func TestDecodeOpenAIRequestLeavesTheRest(t *testing.T) {
	for _, c := range []string{
		`{"model":"g\u0070t","messages":[]}`,
		`{"model":"m","messages":[{"role":"us\ner"}]}`,
		`{"mod\u0065l":"m"}`,
		`{"model":"m","Model":"n"}`,
		`{"model":"m","stream":"yes"}`,
		`{"model":"m","max_tokens":1.5}`,
		`{"model":"m","messages":[{"content":"x\q"}]}`,
		`{"model":"m","messages":[{"content":"\u12"}]}`,
		`{"model":"m","messages":[{"content":"\uzzzz"}]}`,
		`{"model":"m",}`,
		`{"model":"m"}{}`,
	} {
		var in openAIRequest
		if decodeOpenAIRequest([]byte(c), &in) {
			t.Errorf("taken: %s", c)
		}
	}
}

// BenchmarkDecodeOpenAIRequest decodes a plain chat completion request,
// the fast path against encoding/json.
func BenchmarkDecodeOpenAIRequest(b *testing.B) {
	body := []byte(openAIRequests[0])
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var in openAIRequest
			if !decodeOpenAIRequest(body, &in) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var in openAIRequest
			if err := json.Unmarshal(body, &in); err != nil {
				b.Fatal(err)
			}
		}
	})
}
