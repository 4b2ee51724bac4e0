// Package tracing is tokenring's OpenTelemetry traces: the spans of a
// decision (the HTTP entry, the router's decision, a forward to the key's
// owner and the owner's side of it; the LLM proxy's upstream call), and
// the W3C propagation of their context. The exporter that sends them over
// OTLP is built apart, by tracing/otlp (tokenringd alone links it).
//
// Invariants:
//
//   - Tracing off is a nil *Tracer. Every hook in the decision path checks
//     for nil before it does anything, so with tracing off a decision runs
//     the code it ran before this package existed: no span, no context
//     value, no allocation (the api package's Allocs tests, and
//     BenchmarkTracingOff in router, measure it).
//   - Propagation is W3C trace context: the traceparent and tracestate
//     headers over HTTP (an incoming request's, and the proxy's request to
//     its upstream), and over the peer protocol the traceparent's three
//     fields in binary (node/peer's TraceContext), sent only for a sampled
//     span and only to a member that said it reads them.
//
// It imports nothing of tokenring's.
package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of every span tokenring makes.
const Scope = "github.com/tokenring/tokenring"

// Tracer makes one node's spans. Nil is tracing off: callers test for nil
// before calling any method.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns the Tracer of tp (one node's provider: its resource names
// the node).
func New(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer(Scope), prop: propagation.TraceContext{}}
}

// Start starts a span of kind named name, a child of ctx's span (or remote
// parent), and returns ctx holding it.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if len(attrs) == 0 && int(kind) < len(kinds) {
		return t.tracer.Start(ctx, name, kinds[kind]...) // no option made a call
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// kinds are the start options of a span of each kind, made once.
var kinds = func() [][]trace.SpanStartOption {
	out := make([][]trace.SpanStartOption, trace.SpanKindConsumer+1)
	for k := range out {
		out[k] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKind(k))}
	}
	return out
}()

// Extract returns ctx with the remote parent that carrier's traceparent
// (and tracestate) name; ctx unchanged when it holds none, or none valid.
func (t *Tracer) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return t.prop.Extract(ctx, carrier)
}

// Inject writes ctx's span as the traceparent and tracestate headers of h
// (nothing without a valid span).
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// InSampled reports whether ctx holds a sampled span: the spans below
// the HTTP entry (the router's, a forward's, the owner's) only join a
// trace the entry started or continued, and only a sampled one, so that
// background work (debts, replication) and traces sampled out cost no span.
func InSampled(ctx context.Context) bool {
	return trace.SpanContextFromContext(ctx).IsSampled()
}

// Sampled returns the trace id, span id and trace flags of ctx's span
// (W3C traceparent's trace-id, parent-id and trace-flags) when it is
// sampled: what a forward carries to the key's owner. ok is false for no
// span, an invalid one, or one not sampled (nothing is sent then).
func Sampled(ctx context.Context) (traceID [16]byte, spanID [8]byte, flags byte, ok bool) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return traceID, spanID, 0, false
	}
	return sc.TraceID(), sc.SpanID(), byte(sc.TraceFlags()), true
}

// WithRemoteParent returns ctx with the remote span another member sent
// (Sampled's values) as the parent of the spans started from it; ctx
// unchanged when the ids are not valid (all zeros).
func WithRemoteParent(ctx context.Context, traceID [16]byte, spanID [8]byte, flags byte) context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.TraceFlags(flags), Remote: true,
	})
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Carry returns a context derived from base that holds from's span, if
// any: for work whose cancellation must not follow from (the proxy's
// exchange outlives the connection handler's context on the plain path).
func Carry(base, from context.Context) context.Context {
	if sp := trace.SpanFromContext(from); sp.SpanContext().IsValid() {
		return trace.ContextWithSpan(base, sp)
	}
	return base
}

// EndError ends span with err recorded as its error status, or with no
// status when err is nil.
func EndError(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// The attributes tokenring's spans carry, beside OpenTelemetry's semantic
// conventions for HTTP (http.request.method, http.response.status_code,
// url.path, server.address).
const (
	AttrTenant    = attribute.Key("tokenring.tenant")     // the request's tenant
	AttrModel     = attribute.Key("tokenring.model")      // the request's model, when it names one
	AttrKey       = attribute.Key("tokenring.key")        // the limiter key of one call
	AttrOp        = attribute.Key("tokenring.op")         // the peer operation (acquire, settle, run, ...)
	AttrAllowed   = attribute.Key("tokenring.allowed")    // an acquire's verdict
	AttrReason    = attribute.Key("tokenring.reason")     // the dimension that refused
	AttrRefusedBy = attribute.Key("tokenring.refused_by") // the level that refused (tenant, group:..., pool)
	AttrFallback  = attribute.Key("tokenring.fallback")   // a key decided by the fallback, its owner unreachable
	AttrOwner     = attribute.Key("tokenring.owner")      // the member that decided
	AttrCalls     = attribute.Key("tokenring.calls")      // the calls of a run, or a lease's keys
	AttrHops      = attribute.Key("tokenring.hops")       // how many times the call was forwarded before
	AttrFound     = attribute.Key("tokenring.found")      // a settle, release or renew found its lease
	AttrPeer      = attribute.Key("server.address")       // the peer address a forward went to
)
