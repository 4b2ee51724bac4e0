package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/proxy"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

// BenchmarkProxyAdded times sequential chat completions over loopback
// sockets, as `tokenring load -system proxy -c 1` does: to the fake
// upstream directly and through a node's proxy (its own upstream client,
// the real prompt counter, gpt-4o-mini), whole answers and streams (the
// time to the first byte of the body; the rest is read untimed). "through"
// is the server tokenringd runs (internal/http1's fast path, which takes
// whole answers, and net/http for streams); "through-net-http" serves the
// same router with net/http alone. The proxy's added latency is "through"
// minus "direct" of the same run:
//
//	go test -run '^$' -bench ProxyAdded -benchtime 20000x -count 5 ./router/
//
// new-1KiB-message sends a new 1 KiB message each call, whose prompt count
// the proxy cannot take from its cache.
func BenchmarkProxyAdded(b *testing.B) {
	if err := counter.Load(); err != nil {
		b.Fatal(err)
	}
	up := httptest.NewServer(fakeupstream.New(""))
	defer up.Close()
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, Window: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	r, err := frontdoor.New(n, frontdoor.Config{
		Limits:  limits,
		Counter: counter,
		Proxy: proxy.Config{
			Tenant: func(key string) (string, bool) { return "bench", key == clientKey },
			OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	through, stop := serveRouter(b, r, false)
	defer stop()
	viaNetHTTP, stopNetHTTP := serveRouter(b, r, true)
	defer stopNetHTTP()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for _, stream := range []bool{false, true} {
		targets := []struct{ name, url string }{{"direct", up.URL}, {"through", through}, {"through-net-http", viaNetHTTP}}
		if stream {
			targets = targets[:2] // tokenringd's server hands streams to net/http
		}
		for _, t := range targets {
			name := fmt.Sprintf("%s/stream=%t", t.name, stream)
			b.Run(name, func(b *testing.B) {
				body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":100,"stream":%t,"messages":[{"role":"user","content":"Say hello."}]}`, stream)
				for b.Loop() {
					benchCompletion(b, client, t.url, body, stream)
				}
			})
		}
	}
	// A new 1 KiB user message each call, as a conversation's next turn
	// is: its count is not in the counter's cache.
	for _, t := range []struct{ name, url string }{{"direct", up.URL}, {"through", through}} {
		b.Run(t.name+"/new-1KiB-message", func(b *testing.B) {
			n := 0
			for b.Loop() {
				n++
				text := fmt.Sprintf("Message %d. %s", n, proseKiB)[:1024]
				body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":%q}]}`, text)
				benchCompletion(b, client, t.url, body, false)
			}
		})
	}
}

// proseKiB is about a KiB of English prose.
var proseKiB = strings.Repeat("The quick brown fox jumps over the lazy dog, and then it rests for a while. ", 14)

// benchCompletion posts one chat completion to base and reads its answer:
// whole, or under stream its first byte timed and the rest with the timer
// stopped.
func benchCompletion(b *testing.B, client *http.Client, base, body string, stream bool) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d", resp.StatusCode)
	}
	if stream {
		var first [1]byte
		if _, err := io.ReadFull(resp.Body, first[:]); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		defer b.StartTimer()
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		b.Fatal(err)
	}
}
