package frontdoor

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tokenring/tokenring/tracing"
)

// BenchmarkDecisionsTraced is BenchmarkDecisions with tracing on: every
// request's trace sampled out (what a small sample_ratio costs most
// requests), or sampled, its spans handed to an exporter that drops them
// (the spans' own cost; a real exporter's batching and sending come on
// top).
func BenchmarkDecisionsTraced(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"unsampled", sdktrace.NeverSample()}, {"sampled", sdktrace.AlwaysSample()}} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()), sdktrace.WithSampler(c.sampler))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			decisions(b, benchDoor(b, Config{Tracer: tracing.New(tp)}).ServePlain, nil)
		})
	}
}
