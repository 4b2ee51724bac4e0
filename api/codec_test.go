package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// jsonDecode is the reference: what decodeBody did before the fast path.
func jsonDecode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	return decodeOne(dec, v)
}

func i64(v int64) *int64 { return &v }

// The bodies gateways send take the fast path, and decode to exactly what
// encoding/json makes of them.
func TestDecodeFastTakesGatewayBodies(t *testing.T) {
	acquires := map[string]acquireRequest{
		`{"tenant":"acme","prompt_tokens":100,"max_tokens":100}`: {Tenant: "acme", PromptTokens: i64(100), MaxTokens: i64(100)},
		` { "tenant" : "t-1" , "model":"gpt-4o", "prompt_tokens": 0, "max_tokens": 1, "priority": "batch", "wait_ms": 250 } `: {
			Tenant: "t-1", Model: "gpt-4o", PromptTokens: i64(0), MaxTokens: i64(1), Priority: "batch", WaitMS: 250},
		`{}`:                                {},
		`{"tenant":"a","wait_ms":-0}`:       {Tenant: "a"},
		`{"tenant":"a","prompt_tokens":-5}`: {Tenant: "a", PromptTokens: i64(-5)}, // decoded; refused later by router.CheckCount
		`{"Tenant":"a","MAX_TOKENS":2}`:     {Tenant: "a", MaxTokens: i64(2)},     // encoding/json matches keys in any case
		`{"tenant":null,"max_tokens":null}`: {},                                   // null leaves a field as it was
	}
	for body, want := range acquires {
		var got, ref acquireRequest
		if !decodeFast([]byte(body), &got) {
			t.Errorf("%s: not decoded by the fast path", body)
			continue
		}
		if err := jsonDecode([]byte(body), &ref); err != nil || !reflect.DeepEqual(ref, want) {
			t.Fatalf("%s: the test's expectation is wrong: encoding/json gives %+v, %v", body, ref, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: fast path decoded %+v, want %+v", body, got, want)
		}
	}
	leases := map[string]completeRequest{
		`{"tenant":"acme","lease":"v2.abc_-.def"}`: {Tenant: "acme", Lease: "v2.abc_-.def"},
		`{"tenant":"acme","lease":"x","usage":{"prompt_tokens":100,"completion_tokens":40,"total_tokens":140}}`: {
			Tenant: "acme", Lease: "x", Usage: &usageJSON{PromptTokens: 100, CompletionTokens: 40, TotalTokens: 140}},
		`{"usage":{}}`:   {Usage: &usageJSON{}},
		`{"usage":null}`: {},
	}
	for body, want := range leases {
		var got completeRequest
		if !decodeFast([]byte(body), &got) {
			t.Errorf("%s: not decoded by the fast path", body)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: fast path decoded %+v, want %+v", body, got, want)
		}
	}
}

// Anything outside the fast path's subset is left, untouched, to
// encoding/json: each of these once decoded differently from it, or would.
func TestDecodeFastLeavesTheRestToEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"tenant":"a\u0062"}`,                          // an escape
		`{"tenant":"é"}`,                                // non-ASCII
		`{"tenant":"a","tenant":"b"}`,                   // a repeated key
		`{"tenant":"a","TENANT":"b"}`,                   // so is this, to encoding/json
		`{"prompt_tokens":1.0}`,                         // a float
		`{"prompt_tokens":1e2}`,                         // an exponent
		`{"prompt_tokens":012}`,                         // a leading zero: a syntax error
		`{"prompt_tokens":1234567890123456789}`,         // 19 digits
		`{"prompt_tokens":"5"}`,                         // a string for a number
		`{"messages":[{"role":"user","content":"hi"}]}`, // messages: encoding/json's
		`{"prompt":"hello"}`,                            // so is prompt
		`{"tenant":"a"} {}`,                             // trailing data
		`{"tenant":"a",}`,                               // a trailing comma
		`{"nope":1}`,                                    // an unknown field
		`null`, `[]`, ``,
	} {
		var in acquireRequest
		if decodeFast([]byte(body), &in) {
			t.Errorf("%s: decoded by the fast path as %+v; want it left to encoding/json", body, in)
		}
		if !reflect.DeepEqual(in, acquireRequest{}) {
			t.Errorf("%s: the fast path left %+v behind; want the zero value for encoding/json", body, in)
		}
	}
	for _, body := range []string{
		`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, // encoding/json merges the two: {1,2}
		`{"usage":{"prompt_tokens":1,"extra":2}}`,
	} {
		var in completeRequest
		if decodeFast([]byte(body), &in) {
			t.Errorf("%s: decoded by the fast path as %+v; want it left to encoding/json", body, in)
		}
	}
}

// checkDecodeEquivalence fails t if the fast path decodes body, as any of
// the decision API's bodies, to anything but what encoding/json makes of it.
func checkDecodeEquivalence(t *testing.T, body []byte) {
	sameAsEncodingJSON[acquireRequest](t, body)
	sameAsEncodingJSON[completeRequest](t, body)
	sameAsEncodingJSON[batchAcquire](t, body)
	sameAsEncodingJSON[batchLease](t, body)
	checkBatchCalls(t, body)
}

// checkBatchCalls fails t if the fast path reads body, as a batch, to
// other calls than encoding/json, or its one pass differs from decodeFast.
func checkBatchCalls(t *testing.T, body []byte) {
	sameAsEncodingJSON[batchRequest](t, body)
	sameInOnePass(t, body)
}

// sameInOnePass fails t if decodeBatchFast reads body to other calls than
// decodeFast, or decodes a call as an acquire other than decodeFast reads
// that call alone (or leaves undecoded one decodeFast reads).
func sameInOnePass(t *testing.T, body []byte) {
	var in, one batchRequest
	ok := decodeFast(body, &in)
	pre, onePass := decodeBatchFast(body, &one)
	if onePass != ok || !reflect.DeepEqual(in, one) {
		t.Fatalf("batch %q: one pass %v %+v, decodeFast %v %+v", body, onePass, one, ok, in)
	}
	if !ok {
		if pre != nil {
			t.Fatalf("batch %q: not decoded, yet %+v", body, pre)
		}
		return
	}
	if len(pre) != len(in.Calls) {
		t.Fatalf("batch %q: %d calls, %d decoded", body, len(in.Calls), len(pre))
	}
	for i, raw := range in.Calls {
		var alone batchAcquire
		if decodeFast(raw, &alone) != pre[i].ok || !reflect.DeepEqual(alone, pre[i].acquire) {
			t.Fatalf("batch %q call %d: one pass %+v, alone %+v", body, i, pre[i], alone)
		}
	}
}

func sameAsEncodingJSON[T any](t *testing.T, body []byte) {
	var fast, ref T
	if !decodeFast(body, &fast) {
		return
	}
	if err := jsonDecode(body, &ref); err != nil || !reflect.DeepEqual(fast, ref) {
		t.Fatalf("%T %q: fast %+v, encoding/json %+v (err %v)", fast, body, fast, ref, err)
	}
}

// decodeSeeds are bodies of every kind, in the fast path's subset and out.
var decodeSeeds = []string{
	`{"tenant":"acme","prompt_tokens":100,"max_tokens":100}`,
	`{"tenant":"a","model":"m","priority":"batch","wait_ms":5}`,
	`{"tenant":"acme","lease":"x","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`,
	`{"tenant":"a","tenant":"b"}`, `{"prompt_tokens":-0}`, `{"wait_ms":00}`, ` {} `, `{"Tenant":null,"usage":null}`,
	`{"op":"acquire","tenant":"a","prompt_tokens":1}`, `{"op":"complete","lease":"x","usage":{"prompt_tokens":1}}`,
	`{"calls":[{"op":"acquire","tenant":"a"}, {"op":"renew","lease":"l","usage":{"total_tokens":2}} ]}`,
	`{"calls":[{"op":"acquire","tenant":"a","model":"m"},{"op":"acquire","tenant":"b","model":"m"},{"op":"acquire","messages":[{"content":"\u00e9"}]}]}`,
	`{"calls":[]}`, `{"calls":null}`, `{"calls":[{},{"a":{"b":{}}}]}`, `{"calls":[1,"x",null]}`, `{"Calls":[]}`,
}

// The decoders decode the seeds as encoding/json does: the tables are
// fuzzed in internal/jsonwire (FuzzDecoder), these are their golden bodies.
func TestDecodeEquivalence(t *testing.T) {
	for _, s := range decodeSeeds {
		checkDecodeEquivalence(t, []byte(s))
	}
}

// The tables are the structs' JSON fields, prompt, messages and sent
// limits left to encoding/json.
func TestDecodersMatchTheirStructs(t *testing.T) {
	for _, err := range []error{
		acquireDecoder.Check(leftToEncodingJSON...),
		leaseDecoder.Check(),
		batchAcquireDecoder.Check(leftToEncodingJSON...),
		batchLeaseDecoder.Check(),
	} {
		if err != nil {
			t.Error(err)
		}
	}
}

// leftToEncodingJSON are the acquire's fields the table leaves out.
var leftToEncodingJSON = []string{"prompt", "messages", "limits", "parents"}

// FuzzBatchCalls: whatever the fast path reads as a batch, encoding/json
// reads to the same calls, and the one pass (decodeBatchFast) decodes each
// call as decodeFast does alone. (The decoders of the bodies are tables,
// fuzzed in internal/jsonwire: FuzzDecoder.)
func FuzzBatchCalls(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkBatchCalls)
}

// The answers' own JSON is byte for byte encoding/json's, for any values.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	str := rapid.OneOf(rapid.StringMatching(`[a-z0-9._-]{0,12}`), rapid.String())
	num := rapid.OneOf(rapid.Int64Range(-3, 3), rapid.Int64())
	dim := rapid.Custom(func(t *rapid.T) dimJSON {
		return dimJSON{Limit: num.Draw(t, "limit"), Remaining: num.Draw(t, "remaining"), Overdraft: num.Draw(t, "overdraft"), ResetMS: num.Draw(t, "reset")}
	})
	limits := rapid.Custom(func(t *rapid.T) limitsJSON {
		l := limitsJSON{Requests: dim.Draw(t, "r"), Tokens: dim.Draw(t, "t"), Concurrency: dim.Draw(t, "c")}
		if rapid.Bool().Draw(t, "budgeted") {
			l.Budget = &budgetJSON{Limit: num.Draw(t, "limit_usd"), Spent: num.Draw(t, "spent"), Held: num.Draw(t, "held"),
				Remaining: num.Draw(t, "remaining_usd"), Overdraft: num.Draw(t, "over_usd"), ResetMS: num.Draw(t, "reset_usd")}
			if rapid.Bool().Draw(t, "started") {
				l.Budget.Start = time.Unix(num.Draw(t, "start")%(1<<33), 0)
			}
		}
		return l
	})
	rapid.Check(t, func(t *rapid.T) {
		a := acquireResponse{
			Allowed: rapid.Bool().Draw(t, "allowed"), Lease: str.Draw(t, "lease"),
			ReservedTokens: num.Draw(t, "reserved"), Reason: str.Draw(t, "reason"),
			RetryAfterMS: num.Draw(t, "retry"), Limits: limits.Draw(t, "limits"),
			Fallback: rapid.Bool().Draw(t, "fallback"), Owner: str.Draw(t, "owner"),
		}
		if rapid.Bool().Draw(t, "pool") {
			a.Pool = &poolJSON{Name: str.Draw(t, "pool name"), Limits: limits.Draw(t, "pool limits")}
		}
		s := settleAnswer{Settled: rapid.Bool().Draw(t, "settled"), Limits: a.Limits}
		e := errorBody{Error: str.Draw(t, "error")}
		renew := map[string]any{"renewed": true, "limits": a.Limits, "expires_in_ms": num.Draw(t, "expires")}
		bodies := []any{&a, &s, &e, renew, nil}
		var batch batchResponse
		if n := rapid.IntRange(-1, 4).Draw(t, "results"); n >= 0 {
			batch.Results = make([]batchResult, n)
			for i := range batch.Results {
				batch.Results[i] = batchResult{Status: rapid.IntRange(200, 599).Draw(t, "status"),
					Body: bodies[rapid.IntRange(0, len(bodies)-1).Draw(t, "body")], RetryAfterMS: num.Draw(t, "retry_after")}
			}
		}
		for _, c := range []struct {
			fast jsonAppender
			ref  any // what encoding/json was given before: the same bytes
		}{
			{&a, a},
			{&s, map[string]any{"settled": s.Settled, "limits": s.Limits}},
			{&e, map[string]string{"error": e.Error}},
			{&batch, batch},
		} {
			want, err := json.Marshal(c.ref)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.fast.appendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("appendJSON wrote\n%s\nencoding/json writes\n%s", got, want)
			}
		}
	})
}
