package proxy

import (
	"context"
	"io"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/tracing"
)

// The proxy's span (the router's Tracer): every call to an upstream is a
// client span, "upstream <method>", the child of the request's span (the
// front door's, through the router's), from the request sent until its
// answer's body is closed (a stream's whole relay); the call carries its
// context to the upstream as the traceparent header (W3C trace context).
// Only a request whose span is sampled gets one. With tracing off the
// upstream clients are the ones NewUpstreamClient makes, untouched.

// traceUpstreams wraps every upstream client's transport in a span, when
// tracing is on (t not nil).
func (s *Server) traceUpstreams(t *tracing.Tracer) {
	if t == nil {
		return
	}
	for u, c := range s.upstreams {
		s.upstreams[u] = tracedClient(c, t)
	}
	if s.cfg.Client != nil {
		s.cfg.Client = tracedClient(s.cfg.Client, t)
	}
}

// detached is the context of a call the fast path serves (proxyPlain),
// which its handler's context must not cancel: a new one, holding ctx's
// span when tracing is on.
func (s *Server) detached(ctx context.Context) context.Context {
	if s.r.Tracer() == nil {
		return context.Background()
	}
	return tracing.Carry(context.Background(), ctx)
}

// tracedClient is c with its transport making spans.
func tracedClient(c *http.Client, t *tracing.Tracer) *http.Client {
	base := c.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	traced := *c
	traced.Transport = &spanTransport{base: base, t: t}
	return &traced
}

// spanTransport makes a client span of every request sent through base
// whose context holds a sampled span.
type spanTransport struct {
	base http.RoundTripper
	t    *tracing.Tracer
}

func (s *spanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !tracing.InSampled(req.Context()) {
		return s.base.RoundTrip(req)
	}
	ctx, span := s.t.Start(req.Context(), "upstream "+req.Method, trace.SpanKindClient,
		attribute.String("http.request.method", req.Method), attribute.String("server.address", req.URL.Host),
		attribute.String("url.path", req.URL.Path))
	out := req.Clone(ctx) // a RoundTripper leaves its request as it was given
	s.t.Inject(ctx, out.Header)
	resp, err := s.base.RoundTrip(out)
	if err != nil {
		tracing.EndError(span, err)
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	resp.Body = &spanBody{ReadCloser: resp.Body, span: span}
	return resp, nil
}

// CloseIdleConnections closes base's idle connections (http.Client's
// CloseIdleConnections reaches them through it).
func (s *spanTransport) CloseIdleConnections() {
	if c, ok := s.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// spanBody ends its call's span when it is closed.
type spanBody struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (b *spanBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() { b.span.End() })
	return err
}
