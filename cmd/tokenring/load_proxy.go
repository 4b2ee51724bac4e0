package main

// -system proxy: POST /v1/chat/completions, to tokenringd's LLM proxy or to
// the upstream itself, timed by the same workers.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
)

// proxySystem sends OpenAI chat completions round robin over -targets.
type proxySystem struct {
	c      loadConfig
	client *http.Client
}

func newProxySystem(c loadConfig) *proxySystem { return &proxySystem{c: c, client: httpClient(c)} }

func (s *proxySystem) close() { s.client.CloseIdleConnections() }

// decider: a 200 whose body was read (up to its first byte under -stream)
// is an admission, a 429 a refusal, any other status an error. The
// latency is the whole answer's, or under -stream the time to the first
// byte of its body; the rest of a stream is read after the latency is
// taken, by the outcome's drain.
func (s *proxySystem) decider(id int) decideFunc {
	return func(ctx context.Context, i, _ int, _ string) outcome {
		base := s.c.targets[(id+i)%len(s.c.targets)]
		body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":%t,"messages":[{"role":"user","content":"Say hello."}]}`,
			s.c.model, s.c.maxTokens, s.c.stream)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewBufferString(body))
		if err != nil {
			return outcome{err: err}
		}
		req.Header.Set("Content-Type", "application/json")
		if s.c.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+s.c.apiKey)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return outcome{err: err}
		}
		o := outcome{code: resp.StatusCode, allowed: resp.StatusCode == http.StatusOK}
		if !s.c.stream || !o.allowed {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil {
				return outcome{err: err}
			}
			return o
		}
		var first [1]byte
		if _, err := io.ReadFull(resp.Body, first[:]); err != nil {
			resp.Body.Close()
			return outcome{err: fmt.Errorf("stream: first byte: %w", err)}
		}
		o.drain = func() {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return o
	}
}
