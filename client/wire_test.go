package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// What a node answers takes the fast path, and reads as encoding/json
// reads it.
func TestNodeAnswersTakeTheFastPath(t *testing.T) {
	for _, body := range []string{
		`{"allowed":true,"lease":"v2.AbC-_d.e","reserved_tokens":200,"limits":{"requests":{"limit":100,"remaining":99,"reset_ms":60000},"tokens":{"limit":0,"remaining":0,"reset_ms":0},"concurrency":{"limit":5,"remaining":4,"reset_ms":0}},"pool":{"name":"gpt","limits":{"requests":{"limit":1,"remaining":0,"reset_ms":1}}},"owner":"n2"}` + "\n",
		`{"allowed":false,"reason":"requests","retry_after_ms":1500,"limits":{"requests":{"limit":100,"remaining":0,"reset_ms":1500}},"fallback":true}`,
		`{"limits":{"requests":{"limit":1,"remaining":1,"reset_ms":0}},"settled":true}`,
		`{"expires_in_ms":120000,"limits":{},"renewed":true}`,
		`{"error":"lease not found: completed, expired or unknown"}`,
	} {
		var fast, ref answerWire
		if !fastAnswer([]byte(body), &fast) {
			t.Errorf("%s: not read by the fast path", body)
			continue
		}
		if err := json.Unmarshal([]byte(body), &ref); err != nil || !reflect.DeepEqual(fast, ref) {
			t.Errorf("%s: fast %+v, encoding/json %+v (%v)", body, fast, ref, err)
		}
	}
	for _, body := range []string{nodeAcquire, nodeRefusal, nodeOverdrawn, `{"limits":{"requests":{"limit":1,"remaining":1,"reset_ms":0}},"settled":true}`,
		`{"error":"lease not found: completed, expired or unknown"}` + "\n"} {
		var exact, ref answerWire
		if !exactAnswer([]byte(body), &exact) {
			t.Errorf("%s: not read by the exact path", body)
		} else if err := json.Unmarshal([]byte(body), &ref); err != nil || !reflect.DeepEqual(exact, ref) {
			t.Errorf("%s: exact %+v, encoding/json %+v (%v)", body, exact, ref, err)
		}
	}
	batch := `{"results":[{"status":200,"body":{"allowed":true,"lease":"x","limits":{}}},{"status":429,"body":{"allowed":false},"retry_after_ms":1000},{"status":400,"body":{"error":"bad"}}]}`
	if exact, ok := exactBatch([]byte(batch), nil); !ok {
		t.Error("a batch answer not read by the exact path")
	} else if ref, err := refBatch([]byte(batch)); err != nil || !sameSlots(exact, ref) {
		t.Errorf("batch: exact %+v, encoding/json %+v (%v)", exact, ref, err)
	}
	fast, ok := fastBatch([]byte(batch), nil)
	if !ok {
		t.Fatal("a batch answer not read by the fast path")
	}
	if ref, err := refBatch([]byte(batch)); err != nil || !sameSlots(fast, ref) {
		t.Fatalf("batch: fast %+v, encoding/json %+v (%v)", fast, ref, err)
	}
	want := []slot{{status: 200, answer: answerWire{Allowed: true, Lease: "x"}}, {status: 429, retryAfterMS: 1000},
		{status: 400, answer: answerWire{Error: "bad"}}}
	if !sameSlots(fast, want) {
		t.Fatalf("batch: %+v, want %+v", fast, want)
	}
}

// refBatch reads a batch answer with encoding/json only: the slots, then
// each body (an error when it does not decode).
func refBatch(b []byte) ([]slot, error) {
	var in batchAnswer
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	var out []slot
	for _, r := range in.Results {
		sl := slot{status: r.Status, retryAfterMS: r.RetryAfterMS}
		sl.err = json.Unmarshal(r.Body, &sl.answer)
		out = append(out, sl)
	}
	return out, nil
}

// sameSlots compares slots, their errors by whether there is one.
func sameSlots(a, b []slot) bool {
	return slices.EqualFunc(a, b, func(x, y slot) bool {
		return x.status == y.status && x.retryAfterMS == y.retryAfterMS && (x.err == nil) == (y.err == nil) &&
			(x.err != nil || reflect.DeepEqual(x.answer, y.answer))
	})
}

// nodeAcquire, nodeRefusal and nodeOverdrawn are answers as a node
// writes them.
const (
	nodeOverdrawn = `{"limits":{"requests":{"limit":100,"remaining":98,"reset_ms":59000},"tokens":{"limit":1000,"remaining":0,"overdraft":170,"reset_ms":59000},"concurrency":{"limit":2,"remaining":2,"reset_ms":0}},"settled":true}`
	nodeAcquire   = `{"allowed":true,"lease":"AgCqyd20j9SWkeEBAAJ4MQADYm0xV89ozje0_kdcEPv1FhLCHOl_TDiuCD5_DQfpGb1S6is","reserved_tokens":200,"limits":{"requests":{"limit":100000000,"remaining":99999999,"reset_ms":60268},"tokens":{"limit":100000000000,"remaining":99999999800,"reset_ms":60268},"concurrency":{"limit":100000,"remaining":99999,"reset_ms":120000}},"owner":"bm1"}`
	nodeRefusal   = `{"allowed":false,"reason":"requests","retry_after_ms":1500,"limits":{"requests":{"limit":100,"remaining":0,"reset_ms":1500},"tokens":{"limit":0,"remaining":0,"reset_ms":0},"concurrency":{"limit":0,"remaining":0,"reset_ms":0}},"fallback":true,"owner":"n2"}`
)

// The answer's table is answerWire's fields, every one (it skips other
// keys), so that what it takes it reads as encoding/json does (jsonwire's
// FuzzDecoder fuzzes the kinds of field). The slots' table, over a struct
// of unexported fields, is FuzzDecodeAnswer's.
func TestAnswerDecoderMatches(t *testing.T) {
	if err := answerDecoder.Check(); err != nil {
		t.Error(err)
	}
}

// FuzzDecodeAnswer: whatever the exact reader (exact.go) or the batch's
// table reads, encoding/json reads too, to the same values; decodeBatch,
// the exact reader, the table and encoding/json in turn, reads every batch
// as encoding/json does. (The answer's table is fuzzed in
// internal/jsonwire: FuzzDecoder.)
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{
		`{"allowed":true,"lease":"l","limits":{"requests":{"limit":1,"remaining":0,"reset_ms":5}},"Owner":"x"}`,
		`{"allowed":true,"allowed":false}`, `{"pool":{"name":"a","Name":"b"}}`, `{"extra":{"a":[1]}}`,
		`{"results":[{"status":200,"body":{"allowed":true}}]}`, `{"results":[],"Results":null}`, `{"error":"a\"b"}`,
		`{"retry_after_ms":-5,"limits":{"requests":{"limit":-1,"remaining":-0,"reset_ms":0}}}`, `{"allowed":true }`,
		nodeAcquire, nodeRefusal, nodeOverdrawn, `{"results":[{"status":200,"body":` + nodeAcquire + `},{"status":429,"body":` + nodeRefusal + `,"retry_after_ms":1500}]}`,
		`{"results":[null,{"status":200},{"status":200,"body":null},{"STATUS":201,"Body":{"owner":"a"}},{"body":{"owner":"a"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ea, ra answerWire
		if exactAnswer(b, &ea) {
			if err := json.Unmarshal(b, &ra); err != nil || !reflect.DeepEqual(ea, ra) {
				t.Fatalf("answer %q: exact %+v, encoding/json %+v (%v)", b, ea, ra, err)
			}
		}
		if fb, ok := fastBatch(b, nil); ok {
			if rb, err := refBatch(b); err != nil || !sameSlots(fb, rb) {
				t.Fatalf("batch %q: fast %+v, encoding/json %+v (%v)", b, fb, rb, err)
			}
		}
		if eb, ok := exactBatch(b, nil); ok {
			if rb, err := refBatch(b); err != nil || !sameSlots(eb, rb) {
				t.Fatalf("batch %q: exact %+v, encoding/json %+v (%v)", b, eb, rb, err)
			}
		}
		db, err := decodeBatch(b, []slot{{status: 1}})
		if rb, rerr := refBatch(b); (err == nil) != (rerr == nil) || err == nil && !sameSlots(db[1:], rb) {
			t.Fatalf("batch %q: decodeBatch %+v (%v), encoding/json %+v (%v)", b, db, err, rb, rerr)
		}
	})
}

// The requests' own JSON is what encoding/json writes for them.
func TestRequestJSONMatchesEncodingJSON(t *testing.T) {
	str := rapid.OneOf(rapid.StringMatching(`[a-z0-9._-]{0,10}`), rapid.String())
	num := rapid.OneOf(rapid.Int64Range(-2, 2), rapid.Int64())
	rapid.Check(t, func(t *rapid.T) {
		a := acquireWire{Op: str.Draw(t, "op"), Tenant: str.Draw(t, "tenant"), Model: str.Draw(t, "model"),
			MaxTokens: num.Draw(t, "max"), Priority: str.Draw(t, "priority"), WaitMS: num.Draw(t, "wait")}
		if rapid.Bool().Draw(t, "counted") {
			v := num.Draw(t, "prompt_tokens")
			a.PromptTokens = &v
		} else if rapid.Bool().Draw(t, "prompt") {
			v := str.Draw(t, "prompt text")
			a.Prompt = &v
		}
		l := leaseWire{Op: str.Draw(t, "lease op"), Tenant: str.Draw(t, "lease tenant"), Lease: str.Draw(t, "lease")}
		if rapid.Bool().Draw(t, "usage") {
			l.Usage = &Usage{PromptTokens: num.Draw(t, "pt"), CompletionTokens: num.Draw(t, "ct"),
				CachedTokens: num.Draw(t, "cached"), CacheWriteTokens: num.Draw(t, "written")}
		}
		for _, w := range []bodyAppender{a, l} {
			want, err := json.Marshal(w)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.appendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("appendJSON wrote\n%s\nencoding/json writes\n%s", got, want)
			}
		}
		// A batch: each call as its single body with "op" first; a single
		// body without it.
		pa := &pending{op: opAcquire, acq: a}
		pl := &pending{op: op(rapid.IntRange(int(opComplete), int(opRenew)).Draw(t, "lease op kind")), lease: l}
		a.Op, l.Op = "acquire", opNames[pl.op]
		batch := struct {
			Calls []any `json:"calls"`
		}{Calls: []any{a, l}}
		for _, tc := range []struct {
			got  []byte
			want any
		}{
			{appendBatch(nil, []*pending{pa, pl}), batch},
			{appendBatch(nil, nil), struct {
				Calls []any `json:"calls"`
			}{Calls: []any{}}},
			{pa.appendJSON(nil, false), func() acquireWire { w := a; w.Op = ""; return w }()},
			{pl.appendJSON(nil, false), func() leaseWire { w := l; w.Op = ""; return w }()},
		} {
			want, err := json.Marshal(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(tc.got, want) {
				t.Fatalf("wrote\n%s\nencoding/json writes\n%s", tc.got, want)
			}
		}
	})
}

// BenchmarkDecodeBatch is the client's decoding of a /v1/batch answer of
// 16 admissions as a node writes it (the exact path): ns/op ÷ 16 is its
// part of a batched decision.
func BenchmarkDecodeBatch(b *testing.B) {
	body := []byte(`{"results":[`)
	for i := range 16 {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(append(append(body, `{"status":200,"body":`...), nodeAcquire...), '}')
	}
	body = append(body, "]}"...)
	var slots []slot
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if slots, err = decodeBatch(body, slots[:0]); err != nil || len(slots) != 16 || !slots[15].answer.Allowed {
			b.Fatalf("%d slots, %v", len(slots), err)
		}
	}
}

// BenchmarkFastAnswer reads an admission as a node writes it with the
// scanner (the path of an answer the exact reader does not take), and a
// batch of 16 of them, against encoding/json.
func BenchmarkFastAnswer(b *testing.B) {
	body := []byte(nodeAcquire)
	batch := []byte(`{"results":[`)
	for i := range 16 {
		if i > 0 {
			batch = append(batch, ',')
		}
		batch = append(append(append(batch, `{"status":200,"body":`...), nodeAcquire...), '}')
	}
	batch = append(batch, "]}"...)
	b.Run("answer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a answerWire
			if !fastAnswer(body, &a) || !a.Allowed {
				b.Fatal("not read")
			}
		}
	})
	b.Run("answer/encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a answerWire
			if err := json.Unmarshal(body, &a); err != nil || !a.Allowed {
				b.Fatal("not read", err)
			}
		}
	})
	b.Run("batch", func(b *testing.B) {
		b.ReportAllocs()
		var slots []slot
		for b.Loop() {
			var ok bool
			if slots, ok = fastBatch(batch, slots[:0]); !ok || len(slots) != 16 {
				b.Fatal("not read")
			}
		}
	})
}

// An overdrawn dimension's overdraft, which a node writes only when there
// is one, reaches Dim.Overdraft by the exact path.
func TestOverdraftRead(t *testing.T) {
	var a answerWire
	if !exactAnswer([]byte(nodeOverdrawn), &a) {
		t.Fatal("not read by the exact path")
	}
	l := a.Limits.limits()
	if l.Tokens != (Dim{Limit: 1000, Remaining: 0, Overdraft: 170, Reset: 59 * time.Second}) || l.Requests.Overdraft != 0 {
		t.Fatalf("limits %+v", l)
	}
}
