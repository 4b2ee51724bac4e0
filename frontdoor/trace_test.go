package frontdoor

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/tracing"
)

// tracedDoor is a door whose spans rec records, sampled by sampler.
func tracedDoor(t testing.TB, sampler sdktrace.Sampler) (*Door, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return benchDoor(t, Config{Tracer: tracing.New(tp)}), rec
}

const (
	callerTrace = "0af7651916cd43dd8448eb211c80319c"
	callerSpan  = "b7ad6b7169203331"
)

// callerHead is a request's header lines naming the caller's span.
var callerHead = []byte("Content-Type: application/json\r\nTraceParent: 00-" + callerTrace + "-" + callerSpan + "-01\r\n")

// On the fast path the request's span is the child of the span its
// traceparent header names (a header name in any case), and the router's
// span its child; a request the handler declines (here ServeQuick, for
// a wait_ms it cannot take) leaves no span behind.
func TestFastPathSpans(t *testing.T) {
	d, rec := tracedDoor(t, sdktrace.AlwaysSample())
	var resp http1.Response
	req := http1.Request{Path: []byte("/v1/acquire"), Head: callerHead, Body: []byte(`{"tenant":"t1","prompt_tokens":10,"max_tokens":10}`)}
	if !d.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
		t.Fatalf("ServePlain: %d %s", resp.Status, resp.Body)
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want 2: %v", len(spans), spanNames(spans))
	}
	admit, entry := spans[0], spans[1] // a child ends first
	if entry.Name() != "POST /v1/acquire" || entry.SpanKind() != trace.SpanKindServer || admit.Name() != "router.admit" {
		t.Fatalf("spans %v, want router.admit then POST /v1/acquire (server)", spanNames(spans))
	}
	if got := entry.SpanContext().TraceID().String(); got != callerTrace {
		t.Errorf("trace id %s, want the caller's %s", got, callerTrace)
	}
	if p := entry.Parent(); p.SpanID().String() != callerSpan || !p.IsRemote() {
		t.Errorf("entry's parent %s (remote %v), want the caller's %s", p.SpanID(), p.IsRemote(), callerSpan)
	}
	if admit.Parent().SpanID() != entry.SpanContext().SpanID() || admit.SpanContext().TraceID() != entry.SpanContext().TraceID() {
		t.Errorf("router.admit's parent %s, want the entry %s", admit.Parent().SpanID(), entry.SpanContext().SpanID())
	}
	want := map[attribute.Key]string{"http.response.status_code": "200", "url.path": "/v1/acquire", "http.request.method": "POST"}
	for _, a := range entry.Attributes() {
		if v, ok := want[a.Key]; ok && a.Value.Emit() == v {
			delete(want, a.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("entry lacks %v: %v", want, entry.Attributes())
	}
	waits := http1.Request{Path: []byte("/v1/acquire"), Head: callerHead, Body: []byte(`{"tenant":"t1","prompt_tokens":10,"max_tokens":10,"wait_ms":50}`)}
	if d.ServeQuick(context.Background(), &waits, &resp) {
		t.Fatal("ServeQuick took an acquire with wait_ms")
	}
	if n := len(rec.Ended()); n != 2 {
		t.Fatalf("%d spans ended after a declined request, want still 2: %v", n, spanNames(rec.Ended()))
	}
}

// A request whose traceparent says "not sampled" starts no recorded span,
// whatever the node's own sampling: the caller decided (parent-based).
func TestFastPathFollowsTheCallersSampling(t *testing.T) {
	d, rec := tracedDoor(t, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	var resp http1.Response
	head := []byte("traceparent: 00-" + callerTrace + "-" + callerSpan + "-00\r\n")
	req := http1.Request{Path: []byte("/v1/acquire"), Head: head, Body: []byte(`{"tenant":"t1","prompt_tokens":10,"max_tokens":10}`)}
	if !d.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
		t.Fatalf("ServePlain: %d %s", resp.Status, resp.Body)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded for an unsampled caller: %v", n, spanNames(rec.Ended()))
	}
}

// Tracing off, the front door's fast path allocates exactly what the
// handlers it calls do: the hook costs nothing (api's Allocs tests bound
// those).
func TestTracingOffAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	d := benchDoor(t, Config{})
	var resp http1.Response
	req := http1.Request{Path: []byte("/v1/acquire"), Body: []byte(`{"tenant":"t1","prompt_tokens":100,"max_tokens":100}`)}
	run := func(serve func(context.Context, *http1.Request, *http1.Response) bool) float64 {
		return testing.AllocsPerRun(1000, func() {
			resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
			if !serve(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
				t.Fatalf("%d %s", resp.Status, resp.Body)
			}
		})
	}
	hooked, bare := run(d.ServePlain), run(d.servePlain)
	if hooked != bare {
		t.Fatalf("tracing off, ServePlain allocates %.2f a decision, its handlers %.2f", hooked, bare)
	}
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s(%s)", s.Name(), s.SpanKind()))
	}
	return out
}
