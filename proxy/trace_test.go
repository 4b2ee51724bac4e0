package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
	"github.com/tokenring/tokenring/tracing"
)

// A proxied call's request to its upstream is a client span, the child of
// the request's span, ended once the answer's body is closed; it carries
// its context upstream as the traceparent header (the upstream's spans
// join the trace). So on both paths: net/http's and the fast path's.
func TestProxyUpstreamCallTraced(t *testing.T) {
	var mu sync.Mutex
	var sent []string // the traceparent of each request the upstream got
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		sent = append(sent, req.Header.Get("traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`)
	}))
	t.Cleanup(up.Close)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tracing.New(tp)
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 100, Window: time.Minute, LeaseTTL: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s, _ := newServer(t, n, router.Config{Limits: limits, Tracer: tr}, Config{
		Tenant: func(key string) (string, bool) { return "a", key == "sk-a" },
		OpenAI: Upstream{BaseURL: up.URL + "/v1"},
	}, nil)
	mux := http.NewServeMux()
	s.Routes(mux)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`

	for i, path := range []string{"net/http", "fast path"} {
		ctx, parent := tr.Start(context.Background(), "POST /v1/chat/completions", trace.SpanKindServer)
		if path == "net/http" {
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer sk-a")
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", path, w.Code, w.Body)
			}
		} else {
			req := http1.Request{Path: []byte("/v1/chat/completions"), Head: []byte("Authorization: Bearer sk-a\r\n"), Body: []byte(body)}
			var resp http1.Response
			if !s.ServePlain(ctx, &req, &resp) || resp.Status != http.StatusOK {
				t.Fatalf("%s: %d %s", path, resp.Status, resp.Body)
			}
		}
		parent.End()
		var upstream, admit sdktrace.ReadOnlySpan
		for _, sp := range rec.Ended() {
			if sp.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				continue
			}
			switch sp.Name() {
			case "upstream POST":
				upstream = sp
			case "router.admit":
				admit = sp
			}
		}
		switch {
		case upstream == nil || admit == nil:
			t.Fatalf("%s: no upstream or router.admit span in %d ended", path, len(rec.Ended()))
		case upstream.SpanKind() != trace.SpanKindClient || upstream.Parent().SpanID() != parent.SpanContext().SpanID():
			t.Errorf("%s: upstream span kind %v, parent %s; want client, the request's %s", path, upstream.SpanKind(), upstream.Parent().SpanID(), parent.SpanContext().SpanID())
		case admit.Parent().SpanID() != parent.SpanContext().SpanID():
			t.Errorf("%s: router.admit's parent %s, want the request's %s", path, admit.Parent().SpanID(), parent.SpanContext().SpanID())
		}
		want := "00-" + parent.SpanContext().TraceID().String() + "-" + upstream.SpanContext().SpanID().String() + "-01"
		mu.Lock()
		got := sent[i]
		mu.Unlock()
		if got != want {
			t.Errorf("%s: the upstream got traceparent %q, want %q (the upstream span's)", path, got, want)
		}
	}
}
