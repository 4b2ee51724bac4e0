package frontdoor

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/tracing"
)

// The front door's spans (Config.Tracer): one server span a request of the
// decision API or the LLM proxy, named by its method and route
// ("POST /v1/acquire", "POST /v1/chat/completions", "GET
// /v1/tenants/{tenant}"), the root of the request's trace or the child of
// the span its traceparent header names (W3C trace context). The router's
// and the owners' spans are its children. /admin, /metrics and the
// health checks get none. On the fast path (ServePlain, ServeQuick) a
// request the handler declines is served again, by another path, which
// starts its own span: the declined one is never ended, so never
// exported.

// route is the span name of a request for method and path, "" for a
// request that gets no span. The names are constants: naming a span
// allocates nothing.
func route(method, path string) string {
	switch method {
	case http.MethodPost:
		switch path {
		case "/v1/acquire":
			return "POST /v1/acquire"
		case "/v1/complete":
			return "POST /v1/complete"
		case "/v1/renew":
			return "POST /v1/renew"
		case "/v1/batch":
			return "POST /v1/batch"
		case "/v1/chat/completions":
			return "POST /v1/chat/completions"
		case "/v1/responses":
			return "POST /v1/responses"
		case "/v1/embeddings":
			return "POST /v1/embeddings"
		case "/v1/messages":
			return "POST /v1/messages"
		case "/v1/messages/count_tokens":
			return "POST /v1/messages/count_tokens"
		}
	case http.MethodGet:
		switch {
		case path == "/v1/models":
			return "GET /v1/models"
		case strings.HasPrefix(path, "/v1/models/"):
			return "GET /v1/models/{id}"
		case strings.HasPrefix(path, "/v1/tenants/"):
			return "GET /v1/tenants/{tenant}"
		}
	}
	return ""
}

// serveTraced serves req with h under its span, if its route has one.
func serveTraced(t *tracing.Tracer, h http.Handler, w http.ResponseWriter, req *http.Request) {
	name := route(req.Method, req.URL.Path)
	if name == "" {
		h.ServeHTTP(w, req)
		return
	}
	ctx := req.Context()
	if len(req.Header["Traceparent"]) > 0 { // (canonical: no allocation)
		ctx = t.Extract(ctx, propagation.HeaderCarrier(req.Header))
	}
	ctx, span := t.Start(ctx, name, trace.SpanKindServer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", req.Method), attribute.String("url.path", req.URL.Path))
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		endRequest(span, sw.status)
	}()
	h.ServeHTTP(sw, req.WithContext(ctx))
}

// servePlainTraced serves req with serve (a fast-path handler) under its
// span, if its route has one; a request serve declines leaves its span
// unended.
func servePlainTraced(t *tracing.Tracer, ctx context.Context, req *http1.Request, resp *http1.Response,
	serve func(context.Context, *http1.Request, *http1.Response) bool) bool {
	name := route(http.MethodPost, string(req.Path)) // the fast path takes POSTs only
	if name == "" {
		return serve(ctx, req, resp)
	}
	if carrier := plainTraceHeaders(req.Head); carrier.parent != "" {
		ctx = t.Extract(ctx, &carrier)
	}
	ctx, span := t.Start(ctx, name, trace.SpanKindServer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", http.MethodPost), attribute.String("url.path", string(req.Path)))
	}
	if !serve(ctx, req, resp) {
		return false
	}
	endRequest(span, resp.Status)
	return true
}

// endRequest ends a request's span with its answer's status: an error for
// a 5xx, as OpenTelemetry's HTTP server conventions have it.
func endRequest(span trace.Span, status int) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// plainCarrier is a fast-path request's trace context headers, for
// Tracer.Extract.
type plainCarrier struct{ parent, state string }

// plainTraceHeaders reads the traceparent and tracestate headers (names
// in any case) of a fast-path request's header lines (http1.Request.Head:
// well-formed lines, each ending in CRLF).
func plainTraceHeaders(head []byte) plainCarrier {
	var c plainCarrier
	for len(head) > 0 {
		line, rest, _ := bytes.Cut(head, []byte("\r\n"))
		head = rest
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("traceparent")):
			c.parent = string(bytes.TrimSpace(value))
		case bytes.EqualFold(name, []byte("tracestate")):
			c.state = string(bytes.TrimSpace(value))
		}
	}
	return c
}

func (c *plainCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}
func (c *plainCarrier) Set(string, string) {}
func (c *plainCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// statusWriter remembers the status a handler answers with. It hands
// Flush and the rest of http.ResponseController's methods to the writer
// it wraps (Unwrap).
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Flush flushes the wrapped writer, if it can.
func (w *statusWriter) Flush() {
	w.wrote = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is the wrapped writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
