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

// decodeAnswer reads an answer's body into a.
func decodeAnswer(b []byte, a *answerWire) error {
	if fastAnswer(b, a) {
		return nil
	}
	*a = answerWire{}
	return json.Unmarshal(b, a)
}

// fastAnswer reads b into a if it is in the scanner's subset.
func fastAnswer(b []byte, a *answerWire) bool {
	s := jsonwire.New(b)
	return s.Object(func(key []byte) bool { return answerField(&s, key, a) }) && s.End()
}

func answerField(s *jsonwire.Scanner, key []byte, a *answerWire) bool {
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
		a.Reason, ok = s.String()
	case "owner":
		a.Owner, ok = s.String()
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

// batchAnswer is the 200 answer of /v1/batch.
type batchAnswer struct {
	Results []slotWire `json:"results"`
}

// decodeBatch reads a /v1/batch answer. Each slot's body is a slice of b.
func decodeBatch(b []byte, out *batchAnswer) error {
	if fastBatch(b, out) {
		return nil
	}
	*out = batchAnswer{}
	return json.Unmarshal(b, out)
}

// fastBatch reads b into out if it is in the scanner's subset.
func fastBatch(b []byte, out *batchAnswer) bool {
	s := jsonwire.New(b)
	ok := s.Object(func(key []byte) bool {
		if string(key) != "results" {
			return skipUnknown(&s, key, "results")
		}
		out.Results = []slotWire{}
		return s.Array(func() bool {
			var slot slotWire
			ok := s.Object(func(key []byte) bool {
				var ok bool
				switch string(key) {
				case "status":
					var v int64
					v, ok = s.Int()
					slot.Status = int(v)
				case "body":
					slot.Body, ok = s.Skip(4)
				case "retry_after_ms":
					slot.RetryAfterMS, ok = s.Int()
				default:
					return skipUnknown(&s, key, "status", "body", "retry_after_ms")
				}
				return ok
			})
			out.Results = append(out.Results, slot)
			return ok
		})
	})
	return ok && s.End()
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

func (w batchWire) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"calls":[`...)
	for i, c := range w.Calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = c.appendJSON(dst)
	}
	return append(dst, "]}"...)
}
