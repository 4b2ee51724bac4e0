package client

// The decision API's JSON on the client side, without reflection where it
// costs: answers are read as the node writes them (exact.go), else by
// internal/jsonwire's Decoders, tables of answerWire's fields, and handed
// to encoding/json when they are anything else (an escaped error message,
// say), with the same result (jsonwire's FuzzDecoder for the tables,
// FuzzDecodeAnswer for the whole); requests append themselves.

import (
	"encoding/json"
	"strconv"

	"github.com/tokenring/tokenring/internal/jsonwire"
)

// poolWire is answerWire's pool, as a type to decode.
type poolWire = struct {
	Name string `json:"name"`
}

// The decoders of answers: every field of answerWire, other keys skipped
// (TestAnswerDecoderMatches).
var (
	dimDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Int("limit", func(d *dimWire) *int64 { return &d.Limit }),
		jsonwire.Int("remaining", func(d *dimWire) *int64 { return &d.Remaining }),
		jsonwire.Int("reset_ms", func(d *dimWire) *int64 { return &d.ResetMS }),
		jsonwire.Int("overdraft", func(d *dimWire) *int64 { return &d.Overdraft }),
	)
	limitsDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Object("requests", func(l *limitsWire) *dimWire { return &l.Requests }, dimDecoder),
		jsonwire.Object("tokens", func(l *limitsWire) *dimWire { return &l.Tokens }, dimDecoder),
		jsonwire.Object("concurrency", func(l *limitsWire) *dimWire { return &l.Concurrency }, dimDecoder),
	)
	poolDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.String("name", func(p *poolWire) *string { return &p.Name }),
	)
	answerDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Bool("allowed", func(a *answerWire) *bool { return &a.Allowed }),
		jsonwire.String("lease", func(a *answerWire) *string { return &a.Lease }),
		jsonwire.Int("reserved_tokens", func(a *answerWire) *int64 { return &a.ReservedTokens }),
		jsonwire.String("reason", func(a *answerWire) *string { return &a.Reason }),
		jsonwire.Int("retry_after_ms", func(a *answerWire) *int64 { return &a.RetryAfterMS }),
		jsonwire.Object("limits", func(a *answerWire) *limitsWire { return &a.Limits }, limitsDecoder),
		jsonwire.Pointer("pool", func(a *answerWire) **poolWire { return &a.Pool }, poolDecoder),
		jsonwire.Bool("fallback", func(a *answerWire) *bool { return &a.Fallback }),
		jsonwire.String("owner", func(a *answerWire) *string { return &a.Owner }),
		jsonwire.Bool("settled", func(a *answerWire) *bool { return &a.Settled }),
		jsonwire.Bool("renewed", func(a *answerWire) *bool { return &a.Renewed }),
		jsonwire.String("error", func(a *answerWire) *string { return &a.Error }),
	)
	// A batch's slots: each body's strings equal to the slot's before
	// (its owner, a reason) are shared, not copied.
	slotDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Int("status", func(sl *slot) *int { return &sl.status }),
		jsonwire.Present(jsonwire.Object("body", func(sl *slot) *answerWire { return &sl.answer }, answerDecoder),
			func(sl *slot) *bool { return &sl.hasBody }),
		jsonwire.Int("retry_after_ms", func(sl *slot) *int64 { return &sl.retryAfterMS }),
	)
	batchDecoder = jsonwire.NewDecoder(jsonwire.SkipUnknown,
		jsonwire.Slice("results", func(b *batchSlots) *[]slot { return &b.Results }, slotDecoder),
	)
)

// batchSlots is a /v1/batch answer as fastBatch reads it.
type batchSlots struct {
	Results []slot `json:"results"`
}

// decodeAnswer reads an answer's body into a (zero): as the node writes
// it (exactAnswer), else by the table, else by encoding/json.
func decodeAnswer(b []byte, a *answerWire) error {
	if exactAnswer(b, a) {
		return nil
	}
	*a = answerWire{}
	if fastAnswer(b, a) {
		return nil
	}
	*a = answerWire{}
	return json.Unmarshal(b, a)
}

// fastAnswer reads b into a if it is in the table's subset.
func fastAnswer(b []byte, a *answerWire) bool { return answerDecoder.Decode(b, a) }

// batchAnswer is the 200 answer of /v1/batch, as encoding/json reads it
// (when the fast path does not).
type batchAnswer struct {
	Results []slotWire `json:"results"`
}

// slotWire is one result of /v1/batch, its body undecoded.
type slotWire struct {
	Status       int             `json:"status"`
	Body         json.RawMessage `json:"body"`
	RetryAfterMS int64           `json:"retry_after_ms"`
}

// slot is one result of /v1/batch, its body decoded: err when it did not
// decode (as decodeAnswer would fail on it).
type slot struct {
	status       int
	retryAfterMS int64
	answer       answerWire
	err          error
	hasBody      bool // the slot had a body (fastBatch's, for err)
}

// decodeBatch appends the slots of a /v1/batch answer to dst, each body
// decoded as decodeAnswer decodes it.
func decodeBatch(b []byte, dst []slot) ([]slot, error) {
	n := len(dst)
	if out, ok := exactBatch(b, dst); ok {
		return out, nil
	}
	if out, ok := fastBatch(b, dst[:n]); ok {
		return out, nil
	}
	dst = dst[:n]
	var in batchAnswer
	if err := json.Unmarshal(b, &in); err != nil {
		return dst, err
	}
	for _, r := range in.Results {
		sl := slot{status: r.Status, retryAfterMS: r.RetryAfterMS}
		sl.err = decodeAnswer(r.Body, &sl.answer)
		dst = append(dst, sl)
	}
	return dst, nil
}

// errNoBody is the error of a slot without a body (encoding/json's, for an
// empty one).
var errNoBody = json.Unmarshal(nil, &answerWire{})

// fastBatch appends the slots of b to dst, each body read by the table
// into its answer, if b is in the table's subset (dst's spare capacity
// holds what was read before it failed).
func fastBatch(b []byte, dst []slot) ([]slot, bool) {
	in := batchSlots{Results: dst[len(dst):]}
	if !batchDecoder.Decode(b, &in) {
		return dst, false
	}
	for i := range in.Results {
		if !in.Results[i].hasBody {
			in.Results[i].err = errNoBody
		}
	}
	return append(dst, in.Results...), true
}

// bodyAppender is a request body that writes its own JSON: the same
// object json.Marshal writes for it.
type bodyAppender interface {
	appendJSON(dst []byte) []byte
}

func (w acquireWire) appendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	if w.Op != "" {
		dst = jsonwire.AppendString(append(dst, `"op":`...), w.Op)
		dst = append(dst, ',')
	}
	dst = jsonwire.AppendString(append(dst, `"tenant":`...), w.Tenant)
	if w.Model != "" {
		dst = jsonwire.AppendString(append(dst, `,"model":`...), w.Model)
	}
	if w.PromptTokens != nil {
		dst = strconv.AppendInt(append(dst, `,"prompt_tokens":`...), *w.PromptTokens, 10)
	}
	if w.Prompt != nil {
		dst = jsonwire.AppendString(append(dst, `,"prompt":`...), *w.Prompt)
	}
	if w.MaxTokens != 0 {
		dst = strconv.AppendInt(append(dst, `,"max_tokens":`...), w.MaxTokens, 10)
	}
	if w.Priority != "" {
		dst = jsonwire.AppendString(append(dst, `,"priority":`...), w.Priority)
	}
	if w.WaitMS != 0 {
		dst = strconv.AppendInt(append(dst, `,"wait_ms":`...), w.WaitMS, 10)
	}
	return append(dst, '}')
}

func (w leaseWire) appendJSON(dst []byte) []byte {
	dst = append(dst, '{')
	if w.Op != "" {
		dst = jsonwire.AppendString(append(dst, `"op":`...), w.Op)
		dst = append(dst, ',')
	}
	dst = jsonwire.AppendString(append(dst, `"tenant":`...), w.Tenant)
	dst = jsonwire.AppendString(append(dst, `,"lease":`...), w.Lease)
	if u := w.Usage; u != nil {
		dst = strconv.AppendInt(append(dst, `,"usage":{"prompt_tokens":`...), u.PromptTokens, 10)
		dst = strconv.AppendInt(append(dst, `,"completion_tokens":`...), u.CompletionTokens, 10)
		if u.CachedTokens != 0 {
			dst = strconv.AppendInt(append(dst, `,"cached_tokens":`...), u.CachedTokens, 10)
		}
		if u.CacheWriteTokens != 0 {
			dst = strconv.AppendInt(append(dst, `,"cache_write_tokens":`...), u.CacheWriteTokens, 10)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// appendBatch appends the body of a /v1/batch of calls.
func appendBatch(dst []byte, calls []*pending) []byte {
	dst = append(dst, `{"calls":[`...)
	for i, p := range calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = p.appendJSON(dst, true)
	}
	return append(dst, "]}"...)
}
