package api

// The decision API's JSON without reflection. Decoding: internal/jsonwire's
// Decoders, tables of the bodies' fields, read the bodies gateways send
// (objects of known keys, plain ASCII strings, integers) straight into
// acquireRequest and completeRequest; any body outside that subset
// (escapes, non-ASCII, a float, a repeated key, "messages"...) is handed to
// encoding/json, which stays the reference: the fast path accepts a body
// only when encoding/json would decode it to the same value (jsonwire's
// FuzzDecoder; FuzzBatchCalls for a batch's calls), and every refusal,
// with its message, is encoding/json's. Encoding: the answers append
// themselves, byte for byte what json.Encoder writes
// (TestAppendJSONMatchesEncodingJSON); a string that needs escaping is
// escaped by encoding/json.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"time"

	"github.com/tokenring/tokenring/internal/jsonwire"
	"github.com/tokenring/tokenring/limiter"
)

// The decoders of the bodies, by table (internal/jsonwire). Each refuses
// a key it does not know, as decodeBody's json.Decoder does
// (DisallowUnknownFields): prompt, messages and the limits a gateway
// sends, which the tables leave out, are encoding/json's
// (TestDecodersMatchTheirStructs checks the tables against the structs).
var (
	acquireDecoder = jsonwire.NewDecoder(jsonwire.RefuseUnknown,
		jsonwire.String("tenant", func(in *acquireRequest) *string { return &in.Tenant }),
		jsonwire.String("model", func(in *acquireRequest) *string { return &in.Model }),
		jsonwire.IntPointer("prompt_tokens", func(in *acquireRequest) **int64 { return &in.PromptTokens }),
		jsonwire.IntPointer("max_tokens", func(in *acquireRequest) **int64 { return &in.MaxTokens }),
		jsonwire.String("priority", func(in *acquireRequest) *string { return &in.Priority }),
		jsonwire.Int("wait_ms", func(in *acquireRequest) *int64 { return &in.WaitMS }),
	)
	usageDecoder = jsonwire.NewDecoder(jsonwire.RefuseUnknown,
		jsonwire.Int("prompt_tokens", func(u *usageJSON) *int64 { return &u.PromptTokens }),
		jsonwire.Int("completion_tokens", func(u *usageJSON) *int64 { return &u.CompletionTokens }),
		jsonwire.Int("total_tokens", func(u *usageJSON) *int64 { return &u.TotalTokens }),
		jsonwire.Int("cached_tokens", func(u *usageJSON) *int64 { return &u.CachedTokens }),
		jsonwire.Int("cache_write_tokens", func(u *usageJSON) *int64 { return &u.CacheWriteTokens }),
	)
	leaseDecoder = jsonwire.NewDecoder(jsonwire.RefuseUnknown,
		jsonwire.String("tenant", func(in *completeRequest) *string { return &in.Tenant }),
		jsonwire.String("lease", func(in *completeRequest) *string { return &in.Lease }),
		jsonwire.Pointer("usage", func(in *completeRequest) **usageJSON { return &in.Usage }, usageDecoder),
	)
	// A batch's calls: "op" (first, as clients write it) beside the
	// single endpoint's fields.
	batchAcquireDecoder = jsonwire.NewDecoder(jsonwire.RefuseUnknown, append(
		[]jsonwire.Field[batchAcquire]{jsonwire.String("op", func(in *batchAcquire) *string { return &in.Op })},
		jsonwire.Embed(func(in *batchAcquire) *acquireRequest { return &in.acquireRequest }, acquireDecoder)...)...)
	batchLeaseDecoder = jsonwire.NewDecoder(jsonwire.RefuseUnknown, append(
		[]jsonwire.Field[batchLease]{jsonwire.String("op", func(in *batchLease) *string { return &in.Op })},
		jsonwire.Embed(func(in *batchLease) *completeRequest { return &in.completeRequest }, leaseDecoder)...)...)
)

// decodeFast decodes body into v (*acquireRequest, *completeRequest,
// *batchAcquire, *batchLease or *batchRequest) and reports whether it
// could; false leaves v zero, for encoding/json.
func decodeFast(body []byte, v any) (ok bool) {
	switch in := v.(type) {
	case *acquireRequest:
		ok = acquireDecoder.Decode(body, in)
	case *completeRequest:
		ok = leaseDecoder.Decode(body, in)
	case *batchAcquire:
		ok = batchAcquireDecoder.Decode(body, in)
	case *batchLease:
		ok = batchLeaseDecoder.Decode(body, in)
	case *batchRequest:
		s := jsonwire.New(body)
		ok = batchCalls(&s, body, in, nil) && s.End()
	}
	if !ok {
		reflect.ValueOf(v).Elem().SetZero()
	}
	return ok
}

// batchCalls reads {"calls": [call, ...]} from body, each call an object
// (of any JSON) kept raw, as encoding/json keeps a json.RawMessage, for
// batchCall. The raw calls are copied out of body, whose buffer is reused.
// With pre not nil, a call that decodes as a batchAcquire (decodeFast's,
// the same bytes) is decoded in the same pass into (*pre)[i], its strings
// shared with the call's before when equal ("op", a model): the batch is
// read once, not split and then read again. FuzzBatchCalls checks it
// against encoding/json and decodeFast.
func batchCalls(s *jsonwire.Scanner, body []byte, in *batchRequest, pre *[]decodedCall) bool {
	var calls [][2]int // each call's bounds in body
	ok := s.Object(func(key []byte) bool {
		if string(key) != "calls" || s.Peek() != '[' {
			return false
		}
		calls = [][2]int{} // an empty array, not null
		return s.Array(func() bool {
			if s.Peek() != '{' {
				return false
			}
			start := s.Pos()
			if pre != nil {
				mark := *s
				var d decodedCall
				var prev *batchAcquire
				if n := len(*pre); n > 0 {
					prev = &(*pre)[n-1].acquire
				}
				if d.ok = batchAcquireDecoder.Read(s, &d.acquire, prev); !d.ok {
					*s, d = mark, decodedCall{}
				}
				*pre = append(*pre, d)
				if d.ok {
					calls = append(calls, [2]int{start, s.Pos()})
					return true
				}
			}
			_, ok := s.Any(jsonwire.MaxDepth)
			calls = append(calls, [2]int{start, s.Pos()})
			return ok
		})
	})
	if !ok || calls == nil {
		return false // no "calls" (null) is encoding/json's to decode
	}
	var own []byte
	if len(calls) > 0 {
		own = append([]byte(nil), body[calls[0][0]:calls[len(calls)-1][1]]...)
	}
	in.Calls = make([]json.RawMessage, len(calls))
	for i, c := range calls {
		off := calls[0][0]
		in.Calls[i] = own[c[0]-off : c[1]-off : c[1]-off]
	}
	return true
}

// decodedCall is what batchCalls decoded of one call beside keeping it
// raw: the call as a batchAcquire, when ok.
type decodedCall struct {
	acquire batchAcquire
	ok      bool
}

// decodeBatchFast is decodeFast for a batch, its acquires decoded in the
// same pass (batchCalls) into pre, one per call; false leaves in zero and
// pre nil, for encoding/json.
func decodeBatchFast(body []byte, in *batchRequest) (pre []decodedCall, ok bool) {
	sc := jsonwire.New(body)
	s := &sc
	// One per call: about one per "op" in the body (a guess, for the
	// capacity only), at most maxBatchCalls, over which the batch is a 400.
	pre = make([]decodedCall, 0, min(bytes.Count(body, []byte(`"op"`)), maxBatchCalls))
	if batchCalls(s, body, in, &pre) && s.End() {
		return pre, true
	}
	*in = batchRequest{}
	return nil, false
}

// jsonAppender is an answer that writes its own JSON: exactly what
// json.Marshal writes for it.
type jsonAppender interface {
	appendJSON(dst []byte) []byte
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(dst []byte, s string) []byte { return jsonwire.AppendString(dst, s) }

func appendBool(dst []byte, v bool) []byte { return strconv.AppendBool(dst, v) }

func (d dimJSON) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"limit":`...)
	dst = strconv.AppendInt(dst, d.Limit, 10)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	if d.Overdraft != 0 {
		dst = append(dst, `,"overdraft":`...)
		dst = strconv.AppendInt(dst, d.Overdraft, 10)
	}
	dst = append(dst, `,"reset_ms":`...)
	dst = strconv.AppendInt(dst, d.ResetMS, 10)
	return append(dst, '}')
}

func (l limitsJSON) appendJSON(dst []byte) []byte {
	dst = l.Requests.appendJSON(append(dst, `{"requests":`...))
	dst = l.Tokens.appendJSON(append(dst, `,"tokens":`...))
	dst = l.Concurrency.appendJSON(append(dst, `,"concurrency":`...))
	if b := l.Budget; b != nil {
		dst = b.appendJSON(append(dst, `,"budget":`...))
	}
	return append(dst, '}')
}

func (b *budgetJSON) appendJSON(dst []byte) []byte {
	usd := func(dst []byte, name string, v int64) []byte {
		return append(limiter.AppendUSD(append(append(dst, name...), '"'), v), '"')
	}
	dst = usd(dst, `{"limit_usd":`, b.Limit)
	dst = usd(dst, `,"spent_usd":`, b.Spent)
	dst = usd(dst, `,"held_usd":`, b.Held)
	dst = usd(dst, `,"remaining_usd":`, b.Remaining)
	if b.Overdraft > 0 {
		dst = usd(dst, `,"overdraft_usd":`, b.Overdraft)
	}
	if !b.Start.IsZero() {
		dst = append(b.Start.UTC().AppendFormat(append(dst, `,"period_start":"`...), time.RFC3339), '"')
	}
	dst = append(dst, `,"reset_ms":`...)
	dst = strconv.AppendInt(dst, b.ResetMS, 10)
	return append(dst, '}')
}

func (p *poolJSON) appendJSON(dst []byte) []byte {
	dst = appendString(append(dst, `{"name":`...), p.Name)
	dst = p.Limits.appendJSON(append(dst, `,"limits":`...))
	return append(dst, '}')
}

func (a *acquireResponse) appendJSON(dst []byte) []byte {
	dst = appendBool(append(dst, `{"allowed":`...), a.Allowed)
	if a.Lease != "" {
		dst = appendString(append(dst, `,"lease":`...), a.Lease)
	}
	if a.ReservedTokens != 0 {
		dst = strconv.AppendInt(append(dst, `,"reserved_tokens":`...), a.ReservedTokens, 10)
	}
	if a.Reason != "" {
		dst = appendString(append(dst, `,"reason":`...), a.Reason)
	}
	if a.RetryAfterMS != 0 {
		dst = strconv.AppendInt(append(dst, `,"retry_after_ms":`...), a.RetryAfterMS, 10)
	}
	dst = a.Limits.appendJSON(append(dst, `,"limits":`...))
	if a.Pool != nil {
		dst = a.Pool.appendJSON(append(dst, `,"pool":`...))
	}
	if a.Fallback {
		dst = append(dst, `,"fallback":true`...)
	}
	if a.Owner != "" {
		dst = appendString(append(dst, `,"owner":`...), a.Owner)
	}
	if a.RefusedBy != "" {
		dst = appendString(append(dst, `,"refused_by":`...), a.RefusedBy)
	}
	return append(dst, '}')
}

// settleAnswer is the 200 answer of POST /v1/complete.
type settleAnswer struct {
	Limits  limitsJSON `json:"limits"`
	Settled bool       `json:"settled"`
}

func (s *settleAnswer) appendJSON(dst []byte) []byte {
	dst = s.Limits.appendJSON(append(dst, `{"limits":`...))
	dst = appendBool(append(dst, `,"settled":`...), s.Settled)
	return append(dst, '}')
}

// errorBody is the {"error": msg} answer.
type errorBody struct {
	Error string `json:"error"`
}

func (e *errorBody) appendJSON(dst []byte) []byte {
	dst = appendString(append(dst, `{"error":`...), e.Error)
	return append(dst, '}')
}

func (b *batchResponse) appendJSON(dst []byte) []byte {
	if b.Results == nil {
		return append(dst, `{"results":null}`...)
	}
	dst = append(dst, `{"results":[`...)
	for i, res := range b.Results {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(append(dst, `{"status":`...), int64(res.Status), 10)
		dst = append(dst, `,"body":`...)
		if a, ok := res.Body.(jsonAppender); ok {
			dst = a.appendJSON(dst)
		} else {
			body, _ := json.Marshal(res.Body) // the other bodies are maps of strings and numbers: they always marshal
			dst = append(dst, body...)
		}
		if res.RetryAfterMS != 0 {
			dst = strconv.AppendInt(append(dst, `,"retry_after_ms":`...), res.RetryAfterMS, 10)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}
