package proxy

// The endpoints passed through to an upstream uncharged: OpenAI's model
// list and model (GET /v1/models, GET /v1/models/{id}) and Anthropic's
// token count (POST /v1/messages/count_tokens). Their callers are
// authenticated as the proxy's other callers are (an unknown key is a 401
// in the provider's shape), their requests go upstream as the others do
// (the allow-listed headers, the upstream's key, within its timeouts), and
// nothing is admitted, counted or settled: no limit applies to them, and
// their answers carry no rate-limit headers (the upstream's are dropped:
// they describe the operator's account).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/tokenring/tokenring/router"
)

// models serves GET /v1/models, and GET /v1/models/{id} when one is set
// (an id may hold slashes, as OpenAI-compatible servers' model names do).
func (s *Server) models(w http.ResponseWriter, req *http.Request, one bool) {
	p := openAI{}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		p.fail(w, apiError{http.StatusMethodNotAllowed, errInvalid, "method " + req.Method + " not allowed, use GET"})
		return
	}
	s.passAuthorized(w, req, p, func(apiKey string) {
		path := "/models"
		if one {
			id, err := modelPath(req.PathValue("id"))
			if err != nil {
				p.fail(w, badRequest("%v", err))
				return
			}
			path += id
		}
		s.passThrough(w, req, p, apiKey, path, nil)
	})
}

// modelPath is the path, from its first slash, of a model's id: each of
// its segments escaped; an error for an empty segment, "." or "..".
func modelPath(id string) (string, error) {
	var b strings.Builder
	for seg := range strings.SplitSeq(id, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", fmt.Errorf("invalid model id %q", id)
		}
		b.WriteByte('/')
		b.WriteString(url.PathEscape(seg))
	}
	return b.String(), nil
}

// countTokens serves Anthropic's POST /v1/messages/count_tokens. Its body
// must be a JSON object (a 400 otherwise); the upstream checks the rest.
func (s *Server) countTokens(w http.ResponseWriter, req *http.Request) {
	p := anthropic{}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		p.fail(w, apiError{http.StatusMethodNotAllowed, errInvalid, "method " + req.Method + " not allowed, use POST"})
		return
	}
	s.passAuthorized(w, req, p, func(apiKey string) {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, router.MaxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				p.fail(w, apiError{http.StatusRequestEntityTooLarge, errTooLarge, fmt.Sprintf("body over %d bytes", tooBig.Limit)})
				return
			}
			p.fail(w, badRequest("reading the body: %v", err))
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			p.fail(w, badRequest("invalid JSON body: %v", err))
			return
		}
		s.passThrough(w, req, p, apiKey, "/messages/count_tokens", body)
	})
}

// passAuthorized runs serve with req's API key when the key is known and p
// has an upstream, and answers the 401 or the 502 in p's shape otherwise,
// as the charged endpoints do.
func (s *Server) passAuthorized(w http.ResponseWriter, req *http.Request, p provider, serve func(apiKey string)) {
	_, apiKey, ok := s.proxyTenant(req.Header)
	if !ok {
		p.fail(w, apiError{http.StatusUnauthorized, errAuth,
			"invalid or missing API key: send Authorization: Bearer <key> or x-api-key: <key>"})
		return
	}
	if up, _ := p.upstream(s.cfg); up.BaseURL == "" {
		p.fail(w, apiError{http.StatusBadGateway, errServer, "no upstream is configured for " + p.name()})
		return
	}
	serve(apiKey)
}

// passThrough sends req (its method, body if not nil) of the client key
// apiKey to p's upstream at path and relays the answer as it comes.
// Nothing is charged.
func (s *Server) passThrough(w http.ResponseWriter, req *http.Request, p provider, apiKey, path string, body []byte) {
	up, _ := p.upstream(s.cfg)
	c := proxyCall{p: p}
	if s.cfg.Account != nil {
		c.account = s.cfg.Account(apiKey)
	}
	limits := up.Timeouts.withDefaults()
	ctx, stop := context.WithCancelCause(req.Context())
	defer stop(nil)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ureq, err := http.NewRequestWithContext(ctx, req.Method, up.BaseURL+path, rd)
	if err != nil {
		p.fail(w, apiError{http.StatusBadGateway, errServer, "bad upstream URL: " + err.Error()})
		return
	}
	ureq.Header = upstreamHeader(req, &c, up.APIKey)
	if body == nil {
		delete(ureq.Header, "Content-Type")
	}
	headers := s.alarms.After(limits.ResponseHeader, func() { stop(&upstreamTimeout{"sent no response headers", limits.ResponseHeader}) })
	resp, err := s.upstreamClient(up).Do(ureq)
	headers.Stop()
	if err != nil {
		if req.Context().Err() != nil {
			return
		}
		var late *upstreamTimeout
		if errors.As(context.Cause(ctx), &late) {
			p.fail(w, apiError{http.StatusGatewayTimeout, errServer, late.Error()})
			return
		}
		p.fail(w, apiError{http.StatusBadGateway, errServer, "upstream unreachable: " + err.Error()})
		return
	}
	resp.Body = newIdleBody(resp.Body, s.alarms, limits.StreamIdle, stop)
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header, func(k string) bool { return k == "Content-Length" || isRateLimitHeader(k) })
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil && req.Context().Err() == nil {
		panic(http.ErrAbortHandler) // cut upstream: cut the client's answer too
	}
}
