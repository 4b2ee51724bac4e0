package otlp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tokenring/tokenring/config"
)

// collectorStub is an OTLP/HTTP collector that keeps what it is sent.
type collectorStub struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
	keys  []string // each export's x-api-key header
	spans map[string]string
}

func newCollector(t *testing.T) *collectorStub {
	c := &collectorStub{spans: map[string]string{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var export collector.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			t.Errorf("export: %v", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.paths, c.keys = append(c.paths, req.URL.Path), append(c.keys, req.Header.Get("x-api-key"))
		for _, rs := range export.GetResourceSpans() {
			instance := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.instance.id" {
					instance = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					c.spans[sp.GetName()] = instance
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.Close)
	return c
}

// A node with an otlp_endpoint exports its spans there over
// http/protobuf (the base URL's path plus /v1/traces, with the section's
// headers), named by its resource; Shutdown sends what is left.
func TestSetupExportsOverHTTP(t *testing.T) {
	c := newCollector(t)
	cfg := config.Tracing{OTLPEndpoint: c.URL + "/base", Headers: map[string]string{"x-api-key": "k-1"}}
	tr, shutdown, err := Setup(context.Background(), cfg, "n7", func(string) string { return "" })
	if err != nil || tr == nil {
		t.Fatalf("Setup: %v, %v", tr, err)
	}
	_, span := tr.Start(context.Background(), "POST /v1/acquire", trace.SpanKindServer)
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.paths) != 1 || c.paths[0] != "/base/v1/traces" || c.keys[0] != "k-1" || c.spans["POST /v1/acquire"] != "n7" {
		t.Fatalf("exports to %v with keys %v, spans %v; want one to /base/v1/traces with k-1 holding POST /v1/acquire from n7", c.paths, c.keys, c.spans)
	}
}

// Without an endpoint anywhere nothing is built; the OTEL_EXPORTER_OTLP_*
// environment alone turns tracing on, read as the SDK reads it (its
// headers too), and OTEL_SDK_DISABLED turns it off.
func TestSetupFromTheEnvironment(t *testing.T) {
	none := func(string) string { return "" }
	if tr, _, err := Setup(context.Background(), config.Tracing{}, "n1", none); tr != nil || err != nil {
		t.Fatalf("no endpoint: %v, %v; want no tracer", tr, err)
	}
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=from-env")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tr, _, err := Setup(context.Background(), config.Tracing{}, "n1", os.Getenv); tr != nil || err != nil {
		t.Fatalf("OTEL_SDK_DISABLED: %v, %v; want no tracer", tr, err)
	}
	t.Setenv("OTEL_SDK_DISABLED", "")
	tr, shutdown, err := Setup(context.Background(), config.Tracing{}, "n2", os.Getenv)
	if err != nil || tr == nil {
		t.Fatalf("Setup: %v, %v", tr, err)
	}
	_, span := tr.Start(context.Background(), "router.admit", trace.SpanKindInternal)
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.paths) != 1 || c.paths[0] != "/v1/traces" || c.keys[0] != "from-env" || c.spans["router.admit"] != "n2" {
		t.Fatalf("exports to %v with keys %v, spans %v", c.paths, c.keys, c.spans)
	}
}

func TestProtocolAndURL(t *testing.T) {
	env := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
	getenv := func(k string) string { return env[k] }
	if p := Protocol(config.Tracing{}, getenv); p != "grpc" {
		t.Errorf("protocol from OTEL_EXPORTER_OTLP_PROTOCOL: %q", p)
	}
	env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
	if p := Protocol(config.Tracing{}, getenv); p != "http/protobuf" {
		t.Errorf("the traces' variable first: %q", p)
	}
	if p := Protocol(config.Tracing{Protocol: "grpc"}, getenv); p != "grpc" {
		t.Errorf("the config first: %q", p)
	}
	if p := Protocol(config.Tracing{}, func(string) string { return "" }); p != "http/protobuf" {
		t.Errorf("default: %q", p)
	}
	for in, want := range map[string]string{
		"http://c:4318": "http://c:4318/v1/traces", "http://c:4318/": "http://c:4318/v1/traces",
		"https://c/otlp": "https://c/otlp/v1/traces", "http://c:4318/v1/traces": "http://c:4318/v1/traces",
	} {
		if got, err := TracesURL(in); err != nil || got != want {
			t.Errorf("TracesURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
