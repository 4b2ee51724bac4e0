package frontdoor

import (
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
// request that gets no span.
func route(method, path string) string {
	switch path {
	case "/v1/acquire", "/v1/complete", "/v1/renew", "/v1/batch",
		"/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages",
		"/v1/messages/count_tokens", "/v1/models":
		return method + " " + path
	}
	switch {
	case strings.HasPrefix(path, "/v1/tenants/"):
		return method + " /v1/tenants/{tenant}"
	case strings.HasPrefix(path, "/v1/models/"):
		return method + " /v1/models/{id}"
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
	ctx := t.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
	ctx, span := t.Start(ctx, name, trace.SpanKindServer,
		attribute.String("http.request.method", req.Method), attribute.String("url.path", req.URL.Path))
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
	path := string(req.Path)
	name := route(http.MethodPost, path) // the fast path takes POSTs only
	if name == "" {
		return serve(ctx, req, resp)
	}
	carrier := propagation.MapCarrier{}
	req.EachHeader(func(k, v []byte) {
		if key := strings.ToLower(string(k)); key == "traceparent" || key == "tracestate" {
			carrier[key] = string(v)
		}
	})
	ctx = t.Extract(ctx, carrier)
	ctx, span := t.Start(ctx, name, trace.SpanKindServer,
		attribute.String("http.request.method", http.MethodPost), attribute.String("url.path", path))
	if !serve(ctx, req, resp) {
		return false
	}
	endRequest(span, resp.Status)
	return true
}

// endRequest ends a request's span with its answer's status: an error for
// a 5xx, as OpenTelemetry's HTTP server conventions have it.
func endRequest(span trace.Span, status int) {
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

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
