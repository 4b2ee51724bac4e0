package router

// The decision API's JSON without reflection. Decoding: a small scanner
// reads the bodies gateways send (flat objects of known keys, plain ASCII
// strings, integers) straight into acquireRequest and completeRequest; any
// body outside that subset (escapes, non-ASCII, null, a float, a key in
// another case, a repeated key, "messages"...) is handed to encoding/json,
// which stays the reference: the fast path accepts a body only when
// encoding/json would decode it to the same value (FuzzDecodeEquivalence),
// and every refusal, with its message, is encoding/json's. Encoding: the
// answers append themselves, byte for byte what json.Encoder writes
// (TestAppendJSONMatchesEncodingJSON); a string that needs escaping is
// escaped by encoding/json.

import (
	"encoding/json"
	"reflect"
	"strconv"
)

// jsonScanner reads one flat JSON object from b. Its methods report false
// for anything outside the subset it knows; the caller then falls back.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c, after white space.
func (s *jsonScanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek returns the next byte after white space, 0 at the end.
func (s *jsonScanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// raw reads a string of printable ASCII without escapes (what encoding/json
// decodes to the same bytes) and returns its bytes, in place.
func (s *jsonScanner) raw() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// int reads an integer as encoding/json decodes it into an int64: no
// leading zero, at most 18 digits (so never out of range). A fraction or an
// exponent after it is not a ',' or '}': the object fails there.
func (s *jsonScanner) int() (int64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || n > 18 || (n > 1 && s.b[digits] == '0') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

// object reads {"key": value, ...}, calling field for each key, which reads
// the value. A repeated key, or more than maxFastKeys, is refused
// (encoding/json merges repeated keys).
func (s *jsonScanner) object(field func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	var seen [maxFastKeys][]byte
	for n := 0; ; n++ {
		key, ok := s.raw()
		if !ok || n == maxFastKeys || !s.byte(':') {
			return false
		}
		for _, k := range seen[:n] {
			if string(k) == string(key) {
				return false
			}
		}
		seen[n] = key
		if !field(key) {
			return false
		}
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// maxFastKeys bounds the keys of an object the fast path reads: more than
// the decision API's objects have.
const maxFastKeys = 8

// end reports whether only white space is left.
func (s *jsonScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// int64Field reads an integer into *dst.
func (s *jsonScanner) int64Field(dst *int64) bool {
	v, ok := s.int()
	*dst = v
	return ok
}

// ptrField reads an integer into a new *dst.
func (s *jsonScanner) ptrField(dst **int64) bool {
	v, ok := s.int()
	*dst = &v
	return ok
}

// strField reads a string into *dst.
func (s *jsonScanner) strField(dst *string) bool {
	v, ok := s.raw()
	*dst = string(v)
	return ok
}

// decodeFast decodes body into v (*acquireRequest, *completeRequest,
// *batchAcquire, *batchLease or *batchRequest) and reports whether it
// could; false leaves v zero, for encoding/json.
func decodeFast(body []byte, v any) (ok bool) {
	s := &jsonScanner{b: body}
	switch in := v.(type) {
	case *acquireRequest:
		ok = s.object(func(key []byte) bool { return s.acquireField(key, in) })
	case *completeRequest:
		ok = s.object(func(key []byte) bool { return s.leaseField(key, in) })
	case *batchAcquire:
		ok = s.object(func(key []byte) bool {
			if string(key) == "op" {
				return s.strField(&in.Op)
			}
			return s.acquireField(key, &in.acquireRequest)
		})
	case *batchLease:
		ok = s.object(func(key []byte) bool {
			if string(key) == "op" {
				return s.strField(&in.Op)
			}
			return s.leaseField(key, &in.completeRequest)
		})
	case *batchRequest:
		ok = s.batch(in)
	}
	if ok = ok && s.end(); !ok {
		reflect.ValueOf(v).Elem().SetZero()
	}
	return ok
}

// acquireField reads the value of an acquire's field key into in.
func (s *jsonScanner) acquireField(key []byte, in *acquireRequest) bool {
	switch string(key) {
	case "tenant":
		return s.strField(&in.Tenant)
	case "model":
		return s.strField(&in.Model)
	case "prompt_tokens":
		return s.ptrField(&in.PromptTokens)
	case "max_tokens":
		return s.ptrField(&in.MaxTokens)
	case "priority":
		return s.strField(&in.Priority)
	case "wait_ms":
		return s.int64Field(&in.WaitMS)
	}
	return false // prompt and messages (escapes, non-ASCII) are encoding/json's
}

// leaseField reads the value of a complete's or renew's field key into in.
func (s *jsonScanner) leaseField(key []byte, in *completeRequest) bool {
	switch string(key) {
	case "tenant":
		return s.strField(&in.Tenant)
	case "lease":
		return s.strField(&in.Lease)
	case "usage":
		if s.peek() != '{' {
			return false
		}
		in.Usage = new(usageJSON)
		return s.object(func(key []byte) bool {
			switch string(key) {
			case "prompt_tokens":
				return s.int64Field(&in.Usage.PromptTokens)
			case "completion_tokens":
				return s.int64Field(&in.Usage.CompletionTokens)
			case "total_tokens":
				return s.int64Field(&in.Usage.TotalTokens)
			}
			return false
		})
	}
	return false
}

// batch reads {"calls": [call, ...]}, each call an object of the fast
// path's subset (at most one nested object deep), kept raw for batchCall.
// The raw calls are copied out of the scanned buffer, which is reused.
func (s *jsonScanner) batch(in *batchRequest) bool {
	var calls [][2]int // each call's bounds in s.b
	ok := s.object(func(key []byte) bool {
		if string(key) != "calls" || !s.byte('[') {
			return false
		}
		if s.byte(']') {
			calls = [][2]int{} // an empty array, not null
			return true
		}
		for {
			s.space()
			start := s.i
			if !s.skipObject(2) {
				return false
			}
			calls = append(calls, [2]int{start, s.i})
			if s.byte(']') {
				return true
			}
			if !s.byte(',') {
				return false
			}
		}
	})
	if !ok || calls == nil {
		return false // no "calls" (null) is encoding/json's to decode
	}
	var own []byte
	if len(calls) > 0 {
		own = append([]byte(nil), s.b[calls[0][0]:calls[len(calls)-1][1]]...)
	}
	in.Calls = make([]json.RawMessage, len(calls))
	for i, c := range calls {
		off := calls[0][0]
		in.Calls[i] = own[c[0]-off : c[1]-off : c[1]-off]
	}
	return true
}

// skipObject reads an object of strings, integers and (depth > 1) objects.
func (s *jsonScanner) skipObject(depth int) bool {
	return s.object(func([]byte) bool {
		switch c := s.peek(); {
		case c == '"':
			_, ok := s.raw()
			return ok
		case c == '{' && depth > 1:
			return s.skipObject(depth - 1)
		}
		_, ok := s.int()
		return ok
	})
}

// jsonAppender is an answer that writes its own JSON: exactly what
// json.Marshal writes for it.
type jsonAppender interface {
	appendJSON(dst []byte) []byte
}

// appendString appends s as a JSON string, as encoding/json writes it
// (which escapes <, > and & too).
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

func appendBool(dst []byte, v bool) []byte { return strconv.AppendBool(dst, v) }

func (d dimJSON) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"limit":`...)
	dst = strconv.AppendInt(dst, d.Limit, 10)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, d.Remaining, 10)
	dst = append(dst, `,"reset_ms":`...)
	dst = strconv.AppendInt(dst, d.ResetMS, 10)
	return append(dst, '}')
}

func (l limitsJSON) appendJSON(dst []byte) []byte {
	dst = l.Requests.appendJSON(append(dst, `{"requests":`...))
	dst = l.Tokens.appendJSON(append(dst, `,"tokens":`...))
	dst = l.Concurrency.appendJSON(append(dst, `,"concurrency":`...))
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
