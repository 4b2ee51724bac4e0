package proxy_test

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

// TestProxyUpstreamTimeouts: a hung upstream cannot hold the tenant's slot.
// Each timeout answers the client and frees the slot at once: no headers
// (504, the reservation stays counted), a stream gone silent (cut, settled
// with what was seen), a TLS handshake that never ends (502, nothing
// counted: the request never reached the upstream).
func TestProxyUpstreamTimeouts(t *testing.T) {
	limits := limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 1}
	t.Run("no response headers", func(t *testing.T) {
		e := startProxy(t, proxyOpts{tenant: limits, timeouts: proxy.UpstreamTimeouts{ResponseHeader: 200 * time.Millisecond}})
		hold := make(chan struct{})
		defer close(hold)
		e.up.SetReply(fakeupstream.UpstreamReply{Hold: hold, Text: []string{"hi"}})
		a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":500`))
		checkOpenAIError(t, a, 504, "server_error", nil)
		if !strings.Contains(a.body, "sent no response headers for 200ms") {
			t.Errorf("504 body %q does not say which timeout fired", a.body)
		}
		st := e.status(t)
		if st.Concurrency.Remaining != 1 || st.Requests.Remaining != 9 || st.Tokens.Remaining != 10_000-promptTokens(t, false)-500 {
			t.Fatalf("after the header timeout: %+v, want the slot free and the request and its reservation counted", st)
		}
	})
	t.Run("stream gone silent", func(t *testing.T) {
		e := startProxy(t, proxyOpts{tenant: limits, timeouts: proxy.UpstreamTimeouts{StreamIdle: 200 * time.Millisecond}})
		e.up.SetReply(fakeupstream.UpstreamReply{Text: []string{"alpha", " beta"}, ChunkDelay: 5 * time.Second, PromptTokens: 9, CompletionTokens: 9})
		start := time.Now()
		a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":1000,"stream":true`))
		// The first chunk (the role) comes at once, alpha only after 5s.
		if a.code != 200 || a.err == nil || !strings.Contains(a.body, `"role":"assistant"`) || strings.Contains(a.body, "alpha") {
			t.Fatalf("want a 200 stream cut after its first chunk, got %d err %v body %q", a.code, a.err, a.body)
		}
		if waited := time.Since(start); waited > 4*time.Second {
			t.Fatalf("the stream was cut after %v: by the upstream's 5s pause, not the 200ms idle timeout", waited)
		}
		want := 10_000 - promptTokens(t, false)
		if st := e.status(t); st.Concurrency.Remaining != 1 || st.Tokens.Remaining != want {
			t.Fatalf("after the idle cut: %+v, want tokens %d (the prompt; no text streamed) and the slot free", st, want)
		}
	})
	t.Run("TLS handshake never ends", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { // accepts, reads the ClientHello, never answers
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
			}
		}()
		defer func() { ln.Close(); <-done }()
		e := startProxy(t, proxyOpts{tenant: limits, upstream: "https://" + ln.Addr().String() + "/v1",
			timeouts: proxy.UpstreamTimeouts{TLS: 200 * time.Millisecond}})
		a := e.post(t, "/v1/chat/completions", clientKey, openAIBody(`,"max_tokens":500`))
		checkOpenAIError(t, a, 502, "server_error", nil)
		if !strings.Contains(a.body, "TLS handshake timeout") {
			t.Errorf("502 body %q does not name the TLS timeout", a.body)
		}
		if st := e.status(t); st.Concurrency.Remaining != 1 || st.Requests.Remaining != 10 || st.Tokens.Remaining != 10_000 {
			t.Fatalf("after the TLS timeout: %+v, want nothing counted", st)
		}
	})
}

func TestNewUpstreamClientDefaults(t *testing.T) {
	c := proxy.NewUpstreamClient(proxy.UpstreamTimeouts{})
	defer c.CloseIdleConnections()
	if c.Timeout != 0 {
		t.Fatalf("client timeout %v would cut long streams", c.Timeout)
	}
}
