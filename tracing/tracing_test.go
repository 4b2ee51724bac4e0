package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// What a forward sends (Sampled) the owner reads back as the remote parent
// of its span (WithRemoteParent); an unsampled or absent span sends
// nothing, and all-zero ids name no parent.
func TestPeerContextRoundTrip(t *testing.T) {
	ctx := context.Background()
	if _, _, _, ok := Sampled(ctx); ok || InSampled(ctx) {
		t.Fatal("a context without a span is sampled")
	}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := New(tp)
	sctx, span := tr.Start(ctx, "peer.call acquire", trace.SpanKindClient)
	defer span.End()
	traceID, spanID, flags, ok := Sampled(sctx)
	if !ok || !InSampled(sctx) || flags != byte(trace.FlagsSampled) {
		t.Fatalf("Sampled: %v %v %v %v", traceID, spanID, flags, ok)
	}
	remote := trace.SpanContextFromContext(WithRemoteParent(ctx, traceID, spanID, flags))
	if !remote.IsRemote() || remote.TraceID() != span.SpanContext().TraceID() || remote.SpanID() != span.SpanContext().SpanID() || !remote.IsSampled() {
		t.Fatalf("remote parent %+v, want %+v", remote, span.SpanContext())
	}
	if got := WithRemoteParent(ctx, [16]byte{}, [8]byte{}, 1); got != ctx {
		t.Fatal("all-zero ids made a parent")
	}
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = never.Shutdown(context.Background()) })
	uctx, unsampled := New(never).Start(ctx, "x", trace.SpanKindServer)
	defer unsampled.End()
	if _, _, _, ok := Sampled(uctx); ok || InSampled(uctx) {
		t.Fatal("an unsampled span is sent")
	}
}
