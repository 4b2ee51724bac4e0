package main

// A node with internal/http1's event loops off (http.event_loops: -1), and
// one with internal/http1 off altogether (http.fast_path: false, or
// http.tls: net/http serves every connection), is still a whole node: ARCHITECTURE.md, "internal/http1: what it relies on and
// what it gives up".

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/internal/http1"
)

// offRPM, offTPM and offSlots are every tenant's limits in the tests
// below: a tenant holds at most offSlots leases at once, and no run
// reaches the rest.
const (
	offRPM   = 1000
	offTPM   = 1_000_000
	offSlots = 3
)

// upstreamPrompt and upstreamCompletion are the usage the fake upstream
// reports for every chat completion: what the proxy settles.
const upstreamPrompt, upstreamCompletion = 7, 2

// TestNodeWorksWithoutEventLoops starts tokenringd in the test, as run
// does, with http.event_loops: -1, over plain HTTP (a goroutine a
// connection, internal/http1's plain path) and over TLS (net/http alone),
// and checks each is a whole node: acquires admit exactly the tenant's
// slots and refuse the next; a complete settles its real usage and frees
// its slot; /healthz, /readyz and /metrics answer; a chat completion
// goes through the proxy to an upstream and is settled from its usage. No
// event loop answered anything.
func TestNodeWorksWithoutEventLoops(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tls      bool
		fastPath bool // http.fast_path
	}{
		{"event_loops=-1", false, true},
		{"event_loops=-1,tls", true, true},
		{"event_loops=-1,fast_path=false", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var upstreamCalls atomic.Int64
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path != "/v1/chat/completions" {
					http.NotFound(w, req)
					return
				}
				upstreamCalls.Add(1)
				_, _ = io.Copy(io.Discard, req.Body)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-4o-mini",`+
					`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],`+
					`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
					upstreamPrompt, upstreamCompletion, upstreamPrompt+upstreamCompletion)
			}))
			t.Cleanup(upstream.Close) // after the node's own cleanup (LIFO)
			yaml := fmt.Sprintf("limits:\n  default: {rpm: %d, tpm: %d, concurrency: %d}\n"+
				"keys:\n  sk-test: proxied\nupstream:\n  base_url: %s/v1\nhttp:\n  event_loops: -1\n",
				offRPM, offTPM, offSlots, upstream.URL)
			if !tc.fastPath {
				yaml += "  fast_path: false\n"
			}
			// Two clients, two kept-alive connections: api's first request
			// is an acquire, which an event loop would answer and keep.
			newClient := func() *http.Client {
				tr := &http.Transport{}
				t.Cleanup(tr.CloseIdleConnections)
				return &http.Client{Transport: tr, Timeout: 10 * time.Second}
			}
			scheme := "http"
			if tc.tls {
				ca := newTestCA(t)
				certFile, keyFile, _ := ca.serverFiles(t)
				yaml += fmt.Sprintf("  tls: {cert_file: %q, key_file: %q}\n", certFile, keyFile)
				newClient, scheme = func() *http.Client { return tlsClient(t, ca, nil, nil) }, "https"
			}
			cfg := filepath.Join(t.TempDir(), "http1off.yaml")
			if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			base, _, _ := startDaemon(t, "-name", "off", "-config", cfg, "-http", "127.0.0.1:0",
				"-gossip", "127.0.0.1:0", "-gossip-profile", "local")
			if got := newServer(nil, decisions{}, mustHTTP(t, yaml), nil, nil); fastPathServed(got) != (tc.fastPath && !tc.tls) {
				t.Fatalf("newServer for %s gave %T", tc.name, got)
			}
			n := &offNode{t: t, api: newClient(), other: newClient(), base: scheme + strings.TrimPrefix(base, "http"), tls: tc.tls}
			n.decisions() // first: on a connection no other request used
			n.probes()
			n.proxy(&upstreamCalls)
			n.metrics()
		})
	}
}

// offNode is a node under test and the clients that call it: api for
// POSTs of the decision API, other for everything else.
type offNode struct {
	t          *testing.T
	api, other *http.Client
	base       string
	tls        bool // every answer must have come over TLS
}

// call sends method path with body (none when empty) and headers hdr
// (name, value pairs) from api when it is a decision call, else from
// other, and returns the status and body.
func (n *offNode) call(method, path, body string, hdr ...string) (int, []byte) {
	n.t.Helper()
	req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
	if err != nil {
		n.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := n.other
	if method == "POST" && (path == "/v1/acquire" || path == "/v1/complete") {
		c = n.api
	}
	resp, err := c.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	if n.tls != (resp.TLS != nil) || resp.ProtoMajor != 1 {
		n.t.Fatalf("%s %s answered over %s, TLS %v; want HTTP/1.1, TLS %v", method, path, resp.Proto, resp.TLS != nil, n.tls)
	}
	return resp.StatusCode, b
}

// probes: /healthz answers 200, and /readyz does once the node owns its
// partitions.
func (n *offNode) probes() {
	n.t.Helper()
	if code, b := n.call("GET", "/healthz", ""); code != http.StatusOK {
		n.t.Fatalf("/healthz: %d %s", code, b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, b := n.call("GET", "/readyz", "")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("/readyz: %d %s, never ready", code, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// decision is the part of an acquire's answer the test reads.
type decision struct {
	Allowed bool   `json:"allowed"`
	Lease   string `json:"lease"`
	Reason  string `json:"reason"`
}

// acquire asks for one slot of tenant with 10 prompt tokens and up to 5
// completion tokens, and returns the status and answer.
func (n *offNode) acquire(tenant string) (int, decision) {
	n.t.Helper()
	code, b := n.call("POST", "/v1/acquire", `{"tenant":"`+tenant+`","prompt_tokens":10,"max_tokens":5}`)
	var d decision
	if err := json.Unmarshal(b, &d); err != nil {
		n.t.Fatalf("acquire answered %d %s: %v", code, b, err)
	}
	return code, d
}

// limits are a tenant's remaining budget (GET /v1/tenants/{t}).
type limits struct {
	Limits struct {
		Requests, Tokens, Concurrency struct{ Remaining int64 }
	} `json:"limits"`
}

// remaining returns tenant's remaining requests, tokens and slots.
func (n *offNode) remaining(tenant string) (requests, tokens, slots int64) {
	n.t.Helper()
	code, b := n.call("GET", "/v1/tenants/"+tenant, "")
	var l limits
	if err := json.Unmarshal(b, &l); err != nil || code != http.StatusOK {
		n.t.Fatalf("/v1/tenants/%s: %d %s %v", tenant, code, b, err)
	}
	return l.Limits.Requests.Remaining, l.Limits.Tokens.Remaining, l.Limits.Concurrency.Remaining
}

// decisions: exactly offSlots acquires are admitted and the next refused
// for its concurrency; a complete with the real usage settles it (the
// unused reservation back, its slot free), so exactly one more is admitted.
func (n *offNode) decisions() {
	n.t.Helper()
	var leases []string
	admitted, refused := 0, 0
	for range offSlots + 2 {
		code, d := n.acquire("acme")
		switch {
		case code == http.StatusOK && d.Allowed && d.Lease != "":
			admitted++
			leases = append(leases, d.Lease)
		case code == http.StatusTooManyRequests && !d.Allowed && d.Reason == "concurrency":
			refused++
		default:
			n.t.Fatalf("acquire %d: %d %+v", admitted+refused+1, code, d)
		}
	}
	if admitted != offSlots || refused != 2 {
		n.t.Fatalf("%d admitted and %d refused, want exactly %d and 2", admitted, refused, offSlots)
	}
	body := fmt.Sprintf(`{"tenant":"acme","lease":%q,"usage":{"prompt_tokens":10,"completion_tokens":2}}`, leases[0])
	if code, b := n.call("POST", "/v1/complete", body); code != http.StatusOK {
		n.t.Fatalf("complete: %d %s", code, b)
	}
	// Three reservations of 15 tokens, one settled at its 12.
	if req, tok, slots := n.remaining("acme"); req != offRPM-offSlots || tok != offTPM-(15+15+12) || slots != 1 {
		n.t.Fatalf("after the complete: %d requests, %d tokens, %d slots left; want %d, %d, 1",
			req, tok, slots, offRPM-offSlots, offTPM-42)
	}
	if code, d := n.acquire("acme"); code != http.StatusOK || !d.Allowed {
		n.t.Fatalf("the slot the complete freed: %d %+v", code, d)
	}
	if code, d := n.acquire("acme"); code != http.StatusTooManyRequests || d.Reason != "concurrency" {
		n.t.Fatalf("past the limit again: %d %+v", code, d)
	}
}

// proxy: a chat completion through the node reaches the upstream once,
// comes back whole, and is settled at the upstream's usage with its slot
// free.
func (n *offNode) proxy(upstreamCalls *atomic.Int64) {
	n.t.Helper()
	code, b := n.call("POST", "/v1/chat/completions",
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`,
		"Authorization", "Bearer sk-test")
	if code != http.StatusOK || !strings.Contains(string(b), `"content":"hi"`) || upstreamCalls.Load() != 1 {
		n.t.Fatalf("proxied chat completion: %d %s, %d upstream calls", code, b, upstreamCalls.Load())
	}
	if req, tok, slots := n.remaining("proxied"); req != offRPM-1 || tok != offTPM-(upstreamPrompt+upstreamCompletion) || slots != offSlots {
		n.t.Fatalf("after the proxied call: %d requests, %d tokens, %d slots left; want %d, %d, %d",
			req, tok, slots, offRPM-1, offTPM-(upstreamPrompt+upstreamCompletion), offSlots)
	}
}

// metrics: /metrics counts the decisions above, and no event loop
// answered a call or handed a connection over.
func (n *offNode) metrics() {
	n.t.Helper()
	code, b := n.call("GET", "/metrics", "")
	if code != http.StatusOK {
		n.t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		// offSlots + 1 admitted by the decision API, 1 by the proxy
		fmt.Sprintf(`tokenring_decisions_total{fallback="false",reason="none",result="allowed",side="none"} %d`, offSlots+2),
		`tokenring_decisions_total{fallback="false",reason="concurrency",result="refused",side="tenant"} 3`,
		"\ntokenring_http_loop_answers_total 0\n",
		`tokenring_http_loop_handovers_total{why="declined"} 0`,
		`tokenring_http_loop_handovers_total{why="not_plain"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			n.t.Errorf("/metrics has no %s", want)
		}
	}
}

// mustHTTP is the http section of the config text yaml.
func mustHTTP(t *testing.T, yaml string) config.HTTP {
	t.Helper()
	c, err := config.Parse([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.HTTP
}

// fastPathServed reports whether srv serves the fast path (internal/http1
// in front of net/http) rather than net/http alone.
func fastPathServed(srv httpServer) bool {
	_, ok := srv.(*http1.Server)
	return ok
}
