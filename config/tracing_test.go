package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestTracing(t *testing.T) {
	if d := Default().Tracing; !reflect.DeepEqual(d, Tracing{}) {
		t.Errorf("default tracing %+v, want off (empty)", d)
	}
	c, err := Parse([]byte(`tracing:
  otlp_endpoint: https://collector.example:4318/otlp
  protocol: grpc
  headers: {x-api-key: "${OTLP_KEY}"}
  sample_ratio: 0.25
  service_name: rl-edge
  timeout: 3s
`), env(map[string]string{"OTLP_KEY": "k-1"}))
	ratio := 0.25
	want := Tracing{OTLPEndpoint: "https://collector.example:4318/otlp", Protocol: TracingGRPC, Headers: map[string]string{"x-api-key": "k-1"},
		SampleRatio: &ratio, ServiceName: "rl-edge", Timeout: 3 * time.Second}
	if err != nil || !reflect.DeepEqual(c.Tracing, want) {
		t.Fatalf("tracing: %+v, %v; want %+v", c.Tracing, err, want)
	}
	if c, err := Parse([]byte("tracing: {sample_ratio: 0}\n"), nil); err != nil || c.Tracing.SampleRatio == nil || *c.Tracing.SampleRatio != 0 {
		t.Errorf("sample_ratio: 0 (none sampled, not absent): %v, %v", c.Tracing.SampleRatio, err)
	}
	for doc, field := range map[string]string{
		"tracing: {otlp_endpoint: collector:4317}\n":   "tracing.otlp_endpoint",
		"tracing: {protocol: http/json}\n":             "tracing.protocol",
		"tracing: {sample_ratio: 1.5}\n":               "tracing.sample_ratio",
		"tracing: {sample_ratio: -0.1}\n":              "tracing.sample_ratio",
		"tracing: {sample_ratio: some}\n":              "tracing.sample_ratio",
		"tracing: {timeout: -1s}\n":                    "tracing.timeout",
		"tracing: {headers: {a: \"x\\ny\"}}\n":         "tracing.headers.a",
		"tracing: {endpoint: http://collector:4318}\n": "tracing.endpoint",
	} {
		if _, err := Parse([]byte(doc), nil); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: %v, want an error naming %s", doc, err, field)
		}
	}
}
