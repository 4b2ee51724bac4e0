package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/router"
	"github.com/tokenring/tokenring/tracing"
	"github.com/tokenring/tokenring/tracing/otlp"
)

// WithTracing gives every member a tracer whose spans recorder records,
// its resource naming the member (service.instance.id), as tokenringd's
// does. The providers are shut down when the test ends.
func WithTracing(t testing.TB, recorder *tracetest.SpanRecorder) InProcOption {
	return func(c *inProcConfig) {
		c.tracer = func(member string) *tracing.Tracer {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder), sdktrace.WithResource(otlp.NodeResource(member)))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			return tracing.New(tp)
		}
	}
}

// spansByName indexes the ended spans of one trace by name; a name seen
// twice fails the test.
func spansByName(t *testing.T, rec *tracetest.SpanRecorder, traceID trace.TraceID) map[string]sdktrace.ReadOnlySpan {
	t.Helper()
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() != traceID {
			continue
		}
		if _, dup := out[s.Name()]; dup {
			t.Fatalf("two spans named %q in trace %s", s.Name(), traceID)
		}
		out[s.Name()] = s
	}
	return out
}

// member is the member a span's resource names.
func member(s sdktrace.ReadOnlySpan) string {
	v, _ := s.Resource().Set().Value(attribute.Key("service.instance.id"))
	return v.AsString()
}

// attr is span s's attribute k, as text.
func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value.Emit()
		}
	}
	return ""
}

// postTraced posts body to url with a traceparent header naming parent,
// and returns the answer's status and body.
func postTraced(t *testing.T, client *http.Client, url, body string, parent trace.SpanContext) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", parent.TraceID(), parent.SpanID()))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A decision forwarded to its key's owner is one trace across both
// members: the HTTP entry (the child of the caller's traceparent), the
// router's decision, the forward (a client span) at the member the
// request reached, and the owner's side (a server span, the forward's
// child) at the owner; an acquire and its complete alike.
func TestInProcForwardedDecisionTracedOnBothMembers(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	c := NewInProc(t, 2, inProcLimits, WithTracing(t, rec), WithHotKeyRate(-1), WithGossip(steadyGossip))
	client := inProcClient(t)
	via, owner := c.Member(0), c.Member(1)
	rg := via.Node.Ring()
	tenant := ""
	for k := 0; tenant == ""; k++ {
		if o, _ := rg.Owner(router.TenantKey(fmt.Sprintf("traced-%d", k))); o.Name == owner.Name {
			tenant = fmt.Sprintf("traced-%d", k)
		}
	}
	// A first decision opens (or finds) the members' peer connection, whose
	// hello says the owner reads trace contexts.
	if code, body := postTraced(t, client, via.URL()+"/v1/acquire", `{"tenant":"warm-up","prompt_tokens":1,"max_tokens":1}`, caller(1)); code != http.StatusOK {
		t.Fatalf("warm-up: %d %s", code, body)
	}
	var lease string // the acquire's, which the complete settles
	for i, step := range []struct{ path, op string }{{"/v1/acquire", "acquire"}, {"/v1/complete", "settle"}} {
		parent := caller(byte(10 + i))
		body := `{"tenant":"` + tenant + `","prompt_tokens":10,"max_tokens":10}`
		if step.op == "settle" {
			body = `{"tenant":"` + tenant + `","lease":"` + lease + `","usage":{"prompt_tokens":10,"completion_tokens":5}}`
		}
		code, out := postTraced(t, client, via.URL()+step.path, body, parent)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", step.path, code, out)
		}
		if step.op == "acquire" {
			lease = leaseOf(t, out)
		}
		entry, decision := "POST "+step.path, "router.admit"
		if step.op == "settle" {
			decision = "router.settle"
		}
		// The spans end as their calls return, the entry's after its
		// answer is written: wait for the four (the checks below name any
		// missing).
		spans := spansByName(t, rec, parent.TraceID())
		for deadline := time.Now().Add(5 * time.Second); len(spans) < 4 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			spans = spansByName(t, rec, parent.TraceID())
		}
		call, serve := spans["peer.call "+step.op], spans["peer.serve "+step.op]
		chain := []struct {
			span           sdktrace.ReadOnlySpan
			name, at       string
			kind           trace.SpanKind
			parent         trace.SpanID
			parentIsRemote bool
		}{
			{spans[entry], entry, via.Name, trace.SpanKindServer, parent.SpanID(), true},
			{spans[decision], decision, via.Name, trace.SpanKindInternal, spanID(spans[entry]), false},
			{call, "peer.call " + step.op, via.Name, trace.SpanKindClient, spanID(spans[decision]), false},
			{serve, "peer.serve " + step.op, owner.Name, trace.SpanKindServer, spanID(call), true},
		}
		for _, l := range chain {
			switch {
			case l.span == nil:
				t.Fatalf("%s: no span %q in trace %s: %v", step.path, l.name, parent.TraceID(), names(spans))
			case member(l.span) != l.at || l.span.SpanKind() != l.kind:
				t.Errorf("%s: span %q at %s, kind %v; want at %s, kind %v", step.path, l.name, member(l.span), l.span.SpanKind(), l.at, l.kind)
			case l.span.Parent().SpanID() != l.parent || l.span.Parent().IsRemote() != l.parentIsRemote:
				t.Errorf("%s: span %q's parent %s (remote %v), want %s (remote %v)", step.path, l.name, l.span.Parent().SpanID(), l.span.Parent().IsRemote(), l.parent, l.parentIsRemote)
			}
		}
		key := router.TenantKey(tenant)
		if attr(call, tracing.AttrKey) != key || attr(serve, tracing.AttrKey) != key || attr(call, tracing.AttrOwner) != owner.Name {
			t.Errorf("%s: forward's key %q and owner %q, owner's key %q; want %q, %q", step.path,
				attr(call, tracing.AttrKey), attr(call, tracing.AttrOwner), attr(serve, tracing.AttrKey), key, owner.Name)
		}
	}
}

// caller is a span of the caller's own, sampled, whose trace id and span id
// are n's.
func caller(n byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0xca, 0x11, n}, SpanID: trace.SpanID{0x5a, n}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
}

func spanID(s sdktrace.ReadOnlySpan) trace.SpanID {
	if s == nil {
		return trace.SpanID{}
	}
	return s.SpanContext().SpanID()
}

func names(spans map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for n, s := range spans {
		out = append(out, n+"@"+member(s))
	}
	return out
}

// leaseOf is the lease of an acquire's answer.
func leaseOf(t *testing.T, body string) string {
	t.Helper()
	i := strings.Index(body, `"lease":"`)
	if i < 0 {
		t.Fatalf("no lease in %s", body)
	}
	l := body[i+len(`"lease":"`):]
	return l[:strings.IndexByte(l, '"')]
}
