package peer

import (
	"context"
	"errors"
)

// Trace context over the peer protocol: a forwarded call may carry the
// caller's span, so that the owner's spans join the caller's trace.
//
// On the wire it is an item flag, not a field of the Call: a call item
// whose status has itemTraced holds, before the call's bytes, one byte n
// (traceHeadLen, or more from a later build: the bytes past the first
// traceHeadLen are skipped) and n bytes: the W3C traceparent's trace-id
// (16), parent-id (8) and trace-flags (1). Tracestate is not carried.
//
// Compatibility. A member of an older build reads the call's bytes from
// the item's start and would refuse a call so marked, so a client sends
// the flag only to a server that said it reads it: a server lists what it
// reads (features) in the State of its answer to every ping, and the
// first frame of each connection holds a ping (the hello, Client.install)
// whose answer the client notes on that connection (link.traces). An
// older server answers pings with an empty State: no flag is ever sent to
// it. An older client never sends the flag, and ignores a ping answer's
// State. So members of the two builds talk as before during a rolling
// upgrade; the calls forwarded to an older member just start no span
// there. Calls are sent with the flag only when their span is sampled
// (node: tracing on, and the trace sampled), so with tracing off every
// call item keeps its bytes.

// TraceContext is a sampled span's W3C trace context: its trace id, span
// id and trace flags (the traceparent's fields, version 00).
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

const (
	// itemTraced flags a call item whose body starts with a trace
	// context (see above).
	itemTraced byte = 0x40
	// traceHeadLen is the trace context's length on the wire.
	traceHeadLen = 16 + 8 + 1
)

// The features a server lists in its answers to pings, one byte each;
// a client ignores the ones it does not know.
const (
	featureTrace byte = 1 // reads itemTraced call items
)

// features is the State of a ping's answer: what this build's server
// reads.
var features = []byte{featureTrace}

// hasFeature reports whether the State of a ping's answer lists f.
func hasFeature(state []byte, f byte) bool {
	for _, b := range state {
		if b == f {
			return true
		}
	}
	return false
}

// tracedItem is call item id: tc, then body.
func tracedItem(id uint64, tc *TraceContext, body []byte) item {
	b := make([]byte, 0, 1+traceHeadLen+len(body))
	b = append(b, traceHeadLen)
	b = append(b, tc.TraceID[:]...)
	b = append(b, tc.SpanID[:]...)
	b = append(b, tc.Flags)
	return item{id: id, status: itemTraced, body: append(b, body...)}
}

var errTraceHead = errors.New("malformed trace context")

// splitTrace reads the trace context at the start of a traced item's
// body, and returns it and the call's bytes after it.
func splitTrace(body []byte) (TraceContext, []byte, error) {
	var tc TraceContext
	if len(body) < 1 || int(body[0]) < traceHeadLen || len(body) < 1+int(body[0]) {
		return tc, nil, errTraceHead
	}
	h := body[1:]
	copy(tc.TraceID[:], h[:16])
	copy(tc.SpanID[:], h[16:24])
	tc.Flags = h[24]
	return tc, body[1+int(body[0]):], nil
}

type traceKey struct{}

// WithTrace returns ctx carrying tc, the remote span a served call came
// with (Server hands it to ServerConfig.Handle so).
func WithTrace(ctx context.Context, tc TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, tc)
}

// TraceFrom is the remote span a served call came with, if it came with
// one.
func TraceFrom(ctx context.Context) (TraceContext, bool) {
	tc, ok := ctx.Value(traceKey{}).(TraceContext)
	return tc, ok
}

// CallTraced is Call carrying tc, the caller's sampled span, to the peer
// when it reads trace contexts (it said so on this connection: trace.go);
// to a peer that does not, it is Call.
func (p *Client) CallTraced(ctx context.Context, c *Call, tc TraceContext) (Answer, error) {
	return p.call(ctx, c, &tc)
}

// heard notes what the answer it to a ping that nobody waits for (the
// hello, a probe) says the peer reads.
func (l *link) heard(it item) {
	if it.status != itemOK {
		return
	}
	if a, err := DecodeAnswer(OpPing, it.body); err == nil && hasFeature(a.State, featureTrace) {
		l.traces.Store(true)
	}
}
