package proxy

import (
	"encoding/json"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// TestWithIncludeUsage: the body forwarded has stream_options.include_usage
// true and every other member as the client sent it, whichever way it was
// made (appended to the client's bytes, or the object rewritten).
func TestWithIncludeUsage(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		noOptions  bool
		appended   bool // the client's bytes kept, the member added at the end
		want       string
	}{
		{"no options", `{"model":"m","stream":true}`, true, true, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{"spaces", " {\n \"model\": \"m\" \n}\n", true, true, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"null options", `{"stream_options":null,"model":"m"}`, true, false, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"escaped null options", `{"stream\u005foptions":null,"model":"m"}`, true, true, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"options kept", `{"stream_options":{"include_usage":false,"x":1},"model":"m"}`, false, false, `{"model":"m","stream_options":{"include_usage":true,"x":1}}`},
		{"name as a value", `{"model":"m","messages":[{"content":"stream_options"}]}`, true, false, `{"model":"m","messages":[{"content":"stream_options"}],"stream_options":{"include_usage":true}}`},
		{"name quoted in a value", `{"model":"m","messages":[{"content":"\"stream_options\""}]}`, true, true, `{"model":"m","messages":[{"content":"\"stream_options\""}],"stream_options":{"include_usage":true}}`},
		{"empty object", `{}`, true, false, `{"stream_options":{"include_usage":true}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withIncludeUsage([]byte(tc.body), tc.noOptions)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := appendIncludeUsage([]byte(tc.body)); ok != tc.appended {
				t.Errorf("appended: %t, want %t", ok, tc.appended)
			}
			var gotV, wantV any
			if err := json.Unmarshal(got, &gotV); err != nil {
				t.Fatalf("%s: %v", got, err)
			}
			if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(gotV, wantV) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestAppendIncludeUsageMatchesRewrite: on random request objects without
// stream_options, in random layouts, the appended body means what the
// rewritten one does.
func TestAppendIncludeUsageMatchesRewrite(t *testing.T) {
	value := rapid.OneOf(rapid.Just[any](nil), rapid.Just[any](true), rapid.Just[any](1.5),
		rapid.Map(rapid.String(), func(s string) any { return s }),
		rapid.Map(rapid.SliceOfN(rapid.String(), 0, 3), func(s []string) any { return s }))
	rapid.Check(t, func(rt *rapid.T) {
		obj := rapid.MapOfN(rapid.SampledFrom([]string{"model", "messages", "stream", "n", "x", "é"}), value, 1, 6).Draw(rt, "obj")
		var body []byte
		var err error
		if rapid.Bool().Draw(rt, "indent") {
			body, err = json.MarshalIndent(obj, " ", "\t")
			body = append(body, "\r\n"...)
		} else {
			body, err = json.Marshal(obj)
		}
		if err != nil {
			rt.Fatal(err)
		}
		fast, ok := appendIncludeUsage(body)
		if !ok {
			rt.Fatalf("not appended to %s", body)
		}
		slow, err := withIncludeUsage(body, false) // the rewrite
		if err != nil {
			rt.Fatal(err)
		}
		var fastV, slowV any
		if err := json.Unmarshal(fast, &fastV); err != nil {
			rt.Fatalf("%s: %v", fast, err)
		}
		if err := json.Unmarshal(slow, &slowV); err != nil {
			rt.Fatal(err)
		}
		if !reflect.DeepEqual(fastV, slowV) {
			rt.Fatalf("appended %s, rewritten %s", fast, slow)
		}
	})
}
