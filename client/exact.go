package client

// The answers exactly as a node writes them, read in one pass without
// closures: no white space, no escapes, known keys only (each once, in any
// order), integers and booleans as the scanner reads them. Anything else
// (a key the client does not know, a pool with its limits, a renew's
// expires_in_ms, white space) fails, and the caller reads the text with the
// scanner (wire.go) or encoding/json instead, to the same values
// (FuzzDecodeAnswer).

import "github.com/tokenring/tokenring/internal/jsonwire"

// exact reads b from i.
type exact struct {
	b []byte
	i int
}

// lit consumes s.
func (r *exact) lit(s string) bool {
	if len(r.b)-r.i >= len(s) && string(r.b[r.i:r.i+len(s)]) == s {
		r.i += len(s)
		return true
	}
	return false
}

// next reports whether the next byte is c, and consumes it if so.
func (r *exact) next(c byte) bool {
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return true
	}
	return false
}

// str reads a string of printable ASCII without escapes, in place.
func (r *exact) str() ([]byte, bool) {
	if !r.next('"') {
		return nil, false
	}
	start := r.i
	r.i += jsonwire.PlainLen(r.b[start:])
	if !r.next('"') {
		return nil, false // an escape, a control or non-ASCII byte, or the end
	}
	return r.b[start : r.i-1], true
}

// int reads an integer as jsonwire.Scanner.Int does (no leading zero, at
// most 18 digits) followed by ',' or '}' (not consumed).
func (r *exact) int() (int64, bool) {
	neg := r.next('-')
	start := r.i
	var v int64
	for ; r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9'; r.i++ {
		v = v*10 + int64(r.b[r.i]-'0')
	}
	n := r.i - start
	if n == 0 || n > 18 || (n > 1 && r.b[start] == '0') || !r.ends() {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// ends reports whether a value ends here: ',' or '}' is next.
func (r *exact) ends() bool {
	return r.i < len(r.b) && (r.b[r.i] == ',' || r.b[r.i] == '}')
}

// bool reads true or false followed by ',' or '}'.
func (r *exact) bool() (v, ok bool) {
	switch {
	case r.lit("true"):
		return true, r.ends()
	case r.lit("false"):
		return false, r.ends()
	}
	return false, false
}

// object reads {"key":value,...}, calling field for each key with its
// index by keys (keys returns -1 for a key it does not know, which
// fails, as does a key seen before).
func (r *exact) object(keys func(key []byte) int, field func(k int) bool) bool {
	if !r.next('{') {
		return false
	}
	if r.next('}') {
		return true
	}
	var seen uint32
	for {
		key, ok := r.str()
		if !ok || !r.next(':') {
			return false
		}
		k := keys(key)
		if k < 0 || seen&(1<<k) != 0 || !field(k) {
			return false
		}
		seen |= 1 << k
		if r.next('}') {
			return true
		}
		if !r.next(',') {
			return false
		}
	}
}

// The keys exact reads, by index (a switch, not a search: it runs for
// every key of every answer).

func exactAnswerKeys(key []byte) int {
	switch string(key) {
	case "allowed":
		return 0
	case "lease":
		return 1
	case "reserved_tokens":
		return 2
	case "reason":
		return 3
	case "retry_after_ms":
		return 4
	case "limits":
		return 5
	case "fallback":
		return 6
	case "owner":
		return 7
	case "settled":
		return 8
	case "renewed":
		return 9
	case "error":
		return 10
	}
	return -1
}

func exactLimitsKeys(key []byte) int {
	switch string(key) {
	case "requests":
		return 0
	case "tokens":
		return 1
	case "concurrency":
		return 2
	}
	return -1
}

func exactDimKeys(key []byte) int {
	switch string(key) {
	case "limit":
		return 0
	case "remaining":
		return 1
	case "reset_ms":
		return 2
	case "overdraft":
		return 3
	}
	return -1
}

func exactSlotKeys(key []byte) int {
	switch string(key) {
	case "status":
		return 0
	case "body":
		return 1
	case "retry_after_ms":
		return 2
	}
	return -1
}

// answer reads an answer into a (zero). prev, if not nil, is the answer
// read before it: its owner and reason are shared when equal.
func (r *exact) answer(a, prev *answerWire) bool {
	var prevReason, prevOwner string
	if prev != nil {
		prevReason, prevOwner = prev.Reason, prev.Owner
	}
	return r.object(exactAnswerKeys, func(k int) bool {
		var ok bool
		switch k {
		case 0:
			a.Allowed, ok = r.bool()
		case 1:
			a.Lease, ok = r.string("")
		case 2:
			a.ReservedTokens, ok = r.int()
		case 3:
			a.Reason, ok = r.string(prevReason)
		case 4:
			a.RetryAfterMS, ok = r.int()
		case 5:
			ok = r.limits(&a.Limits)
		case 6:
			a.Fallback, ok = r.bool()
		case 7:
			a.Owner, ok = r.string(prevOwner)
		case 8:
			a.Settled, ok = r.bool()
		case 9:
			a.Renewed, ok = r.bool()
		case 10:
			a.Error, ok = r.string("")
		}
		return ok
	})
}

// string reads a string: shared if equal to it, else a copy.
func (r *exact) string(shared string) (string, bool) {
	b, ok := r.str()
	if shared == string(b) {
		return shared, ok
	}
	return string(b), ok
}

// limits reads a "limits" object.
func (r *exact) limits(l *limitsWire) bool {
	return r.object(exactLimitsKeys, func(k int) bool {
		d := [...]*dimWire{&l.Requests, &l.Tokens, &l.Concurrency}[k]
		return r.object(exactDimKeys, func(k int) bool {
			var ok bool
			switch k {
			case 0:
				d.Limit, ok = r.int()
			case 1:
				d.Remaining, ok = r.int()
			case 2:
				d.ResetMS, ok = r.int()
			case 3:
				d.Overdraft, ok = r.int()
			}
			return ok
		})
	})
}

// exactAnswer reads a single answer into a (zero); false leaves a to be
// reset.
func exactAnswer(b []byte, a *answerWire) bool {
	r := exact{b: b}
	return r.answer(a, nil) && r.end()
}

// end reports whether only white space is left.
func (r *exact) end() bool {
	for ; r.i < len(r.b); r.i++ {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return true
}

// exactBatch appends the slots of a /v1/batch answer to dst; false when b
// is not as a node writes it (dst then holds what was read before it
// failed: the caller truncates it).
func exactBatch(b []byte, dst []slot) ([]slot, bool) {
	r := exact{b: b}
	if !r.lit(`{"results":[`) {
		return dst, false
	}
	if r.next(']') {
		return dst, r.next('}') && r.end()
	}
	for {
		dst = append(dst, slot{})
		sl := &dst[len(dst)-1]
		var prev *answerWire
		if len(dst) > 1 {
			prev = &dst[len(dst)-2].answer
		}
		body := false
		ok := r.object(exactSlotKeys, func(k int) bool {
			var ok bool
			switch k {
			case 0:
				var v int64
				v, ok = r.int()
				sl.status = int(v)
			case 1:
				body, ok = true, r.answer(&sl.answer, prev)
			case 2:
				sl.retryAfterMS, ok = r.int()
			}
			return ok
		})
		if !ok || !body { // a slot without a body: the slower paths say how it fails
			return dst, false
		}
		if r.next(']') {
			return dst, r.next('}') && r.end()
		}
		if !r.next(',') {
			return dst, false
		}
	}
}
