package proxy

// The LLM proxy's whole-answer requests on the fast path (internal/http1).
// net/http costs a sequential request 46-50 µs more than the fast path on
// a 2-vCPU host (BENCHMARKS.md, "What each piece of complexity buys"), most of
// it the goroutine it starts, and then stops, to read the connection while
// the handler runs. A chat completion or message that does not ask for a
// stream is answered whole, so the fast path can serve it: the same
// handler (proxyParsed) writes into a plainWriter, which the server sends
// once the handler returns. So are a response that does not ask for a
// stream and an embedding. Streams stay with net/http, which writes as
// they come.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"runtime/debug"
	"time"

	"github.com/tokenring/tokenring/internal/http1"
)

// clientWatchDelay is how long a proxied request on the fast path waits
// for its answer before it starts noticing its client hanging up (which
// cancels the upstream request, as net/http's request context does). An
// upstream that answers sooner costs no watch at all.
const clientWatchDelay = 20 * time.Millisecond

// ServePlain is the proxy's http1.Handler: it serves the chat completions,
// responses, embeddings and messages that do not ask for a stream
// (proxyPlain), and declines (false, nothing done) every other request
// (the endpoints passed through among them).
func (s *Server) ServePlain(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	switch string(req.Path) {
	case "/v1/chat/completions":
		return s.proxyPlain(ctx, req, resp, openAI{})
	case "/v1/responses":
		return s.proxyPlain(ctx, req, resp, openAIResponses{})
	case "/v1/embeddings":
		return s.proxyPlain(ctx, req, resp, openAIEmbeddings{})
	case "/v1/messages":
		return s.proxyPlain(ctx, req, resp, anthropic{})
	}
	return false
}

// proxyPlain serves a chat completion (or message) taken by ServePlain, as
// proxy would: every answer, errors included, is the one the net/http
// routes (Routes) give.
// It declines (false, nothing done) a request that asks for a stream. The
// call's context is not ctx, which the connection's handler may end, but
// carries its span (detached).
func (s *Server) proxyPlain(ctx context.Context, req *http1.Request, resp *http1.Response, p provider) bool {
	// The body is copied before anything keeps it: once the client watch
	// starts, req's slices may move in the connection's buffer.
	body := bytes.Clone(req.Body)
	hreq := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: string(req.Path)}, RequestURI: string(req.Path),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header), ContentLength: int64(len(body)),
	}
	req.EachHeader(func(name, value []byte) {
		if k := http.CanonicalHeaderKey(string(name)); k == "Host" {
			hreq.Host = string(value)
		} else {
			hreq.Header[k] = append(hreq.Header[k], string(value))
		}
	})
	var parsed *proxyCall
	if a := req.RemoteAddr(); a != nil {
		hreq.RemoteAddr = a.String()
	}
	if _, _, known := s.proxyTenant(hreq.Header); known {
		if up, _ := p.upstream(s.cfg); up.BaseURL != "" {
			c := proxyCall{p: p}
			if err := p.parse(&c, body); err == nil {
				if c.stream {
					return false
				}
				parsed = &c
			}
		}
	}
	// Otherwise proxyParsed answers the error (401, 502 or 400) from body.
	hreq.Body = http.NoBody
	if parsed == nil {
		hreq.Body = io.NopCloser(bytes.NewReader(body))
	}
	ctx, cancel := context.WithCancel(s.detached(ctx))
	defer cancel()
	w := &plainWriter{resp: resp, h: make(http.Header)}
	stop := req.WatchClient(clientWatchDelay, cancel)
	defer stop()
	if s.serveRecovered(func() { s.proxyParsed(w, hreq.WithContext(ctx), p, parsed) }) {
		w.finish()
	} else {
		resp.Abort = true
	}
	return true
}

// serveRecovered runs serve and reports whether it returned. A serve that
// panics instead has its answer aborted, as net/http does: with
// http.ErrAbortHandler (the stream relay's way to show a client that an
// answer was cut upstream) silently, with anything else logged with its
// stack, the node serving on.
func (s *Server) serveRecovered(serve func()) (returned bool) {
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			s.log.Error("panic serving a proxied request", "panic", v, "stack", string(debug.Stack()))
		}
	}()
	serve()
	return true
}

// plainWriter is the http.ResponseWriter of a proxied request on the fast
// path: it gathers the answer into the http1.Response that the server
// writes once the handler has returned, as net/http would have written it
// (the header as it was when WriteHeader was called, a Content-Type
// sniffed when none was set). Flush does nothing: the answer goes whole.
type plainWriter struct {
	resp        *http1.Response
	h           http.Header
	wrote       bool
	contentType []string // the Content-Type at WriteHeader
}

// serverHeaders are the header lines WriteHeader leaves out: those
// internal/http1's server writes itself, and Content-Type, which finish
// writes (sniffed when the handler set none).
var serverHeaders = map[string]bool{"Content-Length": true, "Date": true, "Connection": true, "Transfer-Encoding": true, "Content-Type": true}

func (w *plainWriter) Header() http.Header { return w.h }

func (w *plainWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	w.resp.Status = code
	buf := bytes.NewBuffer(w.resp.Header)
	_ = w.h.WriteSubset(buf, serverHeaders) // a bytes.Buffer does not fail
	w.resp.Header = buf.Bytes()
	w.contentType = w.h.Values("Content-Type")
}

func (w *plainWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.resp.Body = append(w.resp.Body, b...)
	return len(b), nil
}

func (w *plainWriter) Flush() {}

// finish completes the answer once the handler has returned.
func (w *plainWriter) finish() {
	w.WriteHeader(http.StatusOK)
	switch {
	case len(w.contentType) > 0:
		for _, v := range w.contentType {
			w.resp.AddHeader("Content-Type", v)
		}
	case len(w.resp.Body) > 0:
		w.resp.AddHeader("Content-Type", http.DetectContentType(w.resp.Body))
	}
}
