package client

// The decision API's JSON on the client side, without reflection where it
// costs: answers are read by a scanner of the subset the node writes
// (internal/jsonwire) and handed to encoding/json when they are anything
// else (an escaped error message, say), with the same result
// (FuzzDecodeAnswer); requests append themselves.

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/tokenring/tokenring/internal/jsonwire"
)

// answerKeys are answerWire's keys; a key equal to one but for case is
// encoding/json's to read (it matches keys in any case).
var answerKeys = []string{"allowed", "lease", "reserved_tokens", "reason", "retry_after_ms", "limits", "pool",
	"fallback", "owner", "settled", "renewed", "error"}

// decodeAnswer reads an answer's body into a (zero): as the node writes
// it (exactAnswer), else by the scanner, else by encoding/json.
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

// fastAnswer reads b into a if it is in the scanner's subset.
func fastAnswer(b []byte, a *answerWire) bool {
	s := jsonwire.New(b)
	return s.Object(func(key []byte) bool { return answerField(&s, key, a, nil) }) && s.End()
}

// answerField reads the value of key into a. prev, if not nil, is the
// answer read before a (a batch's previous slot): a string of a equal to
// prev's is prev's, not a copy (a batch's owner is the same in every slot).
func answerField(s *jsonwire.Scanner, key []byte, a, prev *answerWire) bool {
	var ok bool
	switch string(key) {
	case "allowed":
		a.Allowed, ok = s.Bool()
	case "fallback":
		a.Fallback, ok = s.Bool()
	case "settled":
		a.Settled, ok = s.Bool()
	case "renewed":
		a.Renewed, ok = s.Bool()
	case "lease":
		a.Lease, ok = s.String()
	case "reason":
		a.Reason, ok = sharedString(s, prev, func(a *answerWire) string { return a.Reason })
	case "owner":
		a.Owner, ok = sharedString(s, prev, func(a *answerWire) string { return a.Owner })
	case "error":
		a.Error, ok = s.String()
	case "reserved_tokens":
		a.ReservedTokens, ok = s.Int()
	case "retry_after_ms":
		a.RetryAfterMS, ok = s.Int()
	case "limits":
		ok = limitsField(s, &a.Limits)
	case "pool":
		a.Pool = &struct {
			Name string `json:"name"`
		}{}
		ok = s.Object(func(key []byte) bool {
			if string(key) == "name" {
				var ok bool
				a.Pool.Name, ok = s.String()
				return ok
			}
			return skipUnknown(s, key, "name")
		})
	default:
		return skipUnknown(s, key, answerKeys...)
	}
	return ok
}

// sharedString reads a string: field(prev) if prev is not nil and it is
// equal, else a copy.
func sharedString(s *jsonwire.Scanner, prev *answerWire, field func(*answerWire) string) (string, bool) {
	b, ok := s.Raw()
	if prev != nil {
		if v := field(prev); v == string(b) {
			return v, ok
		}
	}
	return string(b), ok
}

// limitsField reads a "limits" object.
func limitsField(s *jsonwire.Scanner, l *limitsWire) bool {
	return s.Object(func(key []byte) bool {
		var d *dimWire
		switch string(key) {
		case "requests":
			d = &l.Requests
		case "tokens":
			d = &l.Tokens
		case "concurrency":
			d = &l.Concurrency
		default:
			return skipUnknown(s, key, "requests", "tokens", "concurrency")
		}
		return s.Object(func(key []byte) bool {
			var ok bool
			switch string(key) {
			case "limit":
				d.Limit, ok = s.Int()
			case "remaining":
				d.Remaining, ok = s.Int()
			case "reset_ms":
				d.ResetMS, ok = s.Int()
			default:
				return skipUnknown(s, key, "limit", "remaining", "reset_ms")
			}
			return ok
		})
	})
}

// skipUnknown skips the value of a key the struct does not have, unless
// it is one of known but for case.
func skipUnknown(s *jsonwire.Scanner, key []byte, known ...string) bool {
	for _, k := range known {
		if strings.EqualFold(string(key), k) {
			return false
		}
	}
	_, ok := s.Skip(4)
	return ok
}

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

// fastBatch appends the slots of b to dst, each body read by the scanner
// into its answer, if b is in the scanner's subset.
func fastBatch(b []byte, dst []slot) ([]slot, bool) {
	s := jsonwire.New(b)
	ok := s.Object(func(key []byte) bool {
		if string(key) != "results" {
			return skipUnknown(&s, key, "results")
		}
		return s.Array(func() bool {
			dst = append(dst, slot{})
			sl := &dst[len(dst)-1]
			var prev *answerWire
			if len(dst) > 1 {
				prev = &dst[len(dst)-2].answer
			}
			body := false
			ok := s.Object(func(key []byte) bool {
				var ok bool
				switch string(key) {
				case "status":
					var v int64
					v, ok = s.Int()
					sl.status = int(v)
				case "body":
					body = true
					ok = s.Object(func(key []byte) bool { return answerField(&s, key, &sl.answer, prev) })
				case "retry_after_ms":
					sl.retryAfterMS, ok = s.Int()
				default:
					return skipUnknown(&s, key, "status", "body", "retry_after_ms")
				}
				return ok
			})
			if !body {
				sl.err = errNoBody
			}
			return ok
		})
	})
	return dst, ok && s.End()
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
