package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// tracesStub is an OTLP/HTTP collector that keeps the spans it is sent:
// name → the trace id (hex) and the node (service.instance.id).
type tracesStub struct {
	*httptest.Server
	mu    sync.Mutex
	spans map[string][2]string
}

func newTracesStub(t *testing.T) *tracesStub {
	s := &tracesStub{spans: map[string][2]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var export collector.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil || req.URL.Path != "/v1/traces" {
			t.Errorf("export to %s: %v", req.URL.Path, err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, rs := range export.GetResourceSpans() {
			node := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.instance.id" {
					node = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					s.spans[sp.GetName()] = [2]string{hexOf(sp.GetTraceId()), node}
				}
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(digits[c>>4])
		sb.WriteByte(digits[c&15])
	}
	return sb.String()
}

// With -otlp-endpoint the daemon exports its decisions' spans there, each
// named by the node, in the trace of the request's traceparent; at its
// stop it flushes the last ones.
func TestDaemonExportsTraces(t *testing.T) {
	stub := newTracesStub(t)
	base, logs, stop := startDaemon(t, "-name", "traced", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local",
		"-otlp-endpoint", stub.URL)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest(http.MethodPost, base+"/v1/acquire", strings.NewReader(`{"tenant":"acme","prompt_tokens":10,"max_tokens":5}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("acquire: %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	stub.mu.Lock()
	defer stub.mu.Unlock()
	for _, name := range []string{"POST /v1/acquire", "router.admit"} {
		if got := stub.spans[name]; got != [2]string{traceID, "traced"} {
			t.Errorf("span %q: trace %s from %q, want trace %s from traced; all: %v\n%s", name, got[0], got[1], traceID, stub.spans, logs)
		}
	}
}

// A bad -otlp-endpoint is a usage error naming it; none at all starts no
// tracing.
func TestOTLPEndpointFlag(t *testing.T) {
	err := run(context.Background(), []string{"-otlp-endpoint", "collector:4317", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, env(nil), &bytes.Buffer{})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "otlp-endpoint") {
		t.Fatalf("-otlp-endpoint collector:4317: %v, want a usage error naming it", err)
	}
	_, logs, _ := startDaemon(t, "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-gossip-profile", "local")
	if strings.Contains(logs.String(), "tracing on") {
		t.Fatalf("tracing on without an endpoint:\n%s", logs)
	}
}
