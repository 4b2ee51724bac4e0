package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Tracing is the "tracing:" section: OpenTelemetry traces of decisions,
// exported over OTLP (docs/tracing.md). Off unless an endpoint is named,
// here (or by -otlp-endpoint) or by the OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT environment variable; off, no
// exporter is made and a decision pays nothing for it. Every field left
// empty takes its OTEL_* environment variable as the OpenTelemetry SDK
// reads it, then the SDK's default. Read at start only.
type Tracing struct {
	// OTLPEndpoint is the collector's base URL, as
	// OTEL_EXPORTER_OTLP_ENDPOINT: http://host:4318 (http/protobuf: the
	// traces go to its path plus /v1/traces) or http://host:4317 (grpc).
	// http:// sends in the clear, https:// over TLS (the CA and client
	// certificate of OTEL_EXPORTER_OTLP_CERTIFICATE, _CLIENT_CERTIFICATE
	// and _CLIENT_KEY, else the system's roots).
	OTLPEndpoint string `yaml:"otlp_endpoint,omitempty"`
	// Protocol is grpc or http/protobuf; empty: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
	// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
	Protocol string `yaml:"protocol,omitempty"`
	// Headers are sent with every export (a collector's API key), instead
	// of OTEL_EXPORTER_OTLP_HEADERS'; ${VAR} expands as everywhere.
	Headers map[string]string `yaml:"headers,omitempty"`
	// SampleRatio is the share of the traces this node starts that are
	// sampled, 0 to 1; a request that arrives with a traceparent follows
	// its sampled flag (parent-based). Nil (the field absent):
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, else every trace.
	SampleRatio *float64 `yaml:"sample_ratio,omitempty"`
	// ServiceName is the service.name of every span; empty:
	// OTEL_SERVICE_NAME, else tokenring. The node's name is its
	// service.instance.id.
	ServiceName string `yaml:"service_name,omitempty"`
	// Timeout bounds one export; zero: OTEL_EXPORTER_OTLP_TIMEOUT, else
	// 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// The protocols of Tracing.Protocol.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http/protobuf"
)

// validateTracing checks the tracing section.
func (c Config) validateTracing(errs *errorList) {
	t := c.Tracing
	if t.OTLPEndpoint != "" {
		errs.url("tracing.otlp_endpoint", t.OTLPEndpoint)
	}
	switch t.Protocol {
	case "", TracingGRPC, TracingHTTP:
	default:
		errs.add("tracing.protocol", fmt.Sprintf("must be grpc or http/protobuf, got %q", t.Protocol))
	}
	if r := t.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		errs.add("tracing.sample_ratio", fmt.Sprintf("must be between 0 and 1, got %v", *r))
	}
	for _, k := range sortedKeys(t.Headers) {
		errs.headerValue("tracing.headers."+k, t.Headers[k])
	}
	if t.Timeout != 0 {
		errs.duration("tracing.timeout", t.Timeout, 1, MaxDuration)
	}
}

// tracing decodes the tracing section.
func (d *decoder) tracing(f map[string]*yaml.Node, c *Config) {
	t := d.fields(f["tracing"], "tracing", "otlp_endpoint", "protocol", "headers", "sample_ratio", "service_name", "timeout")
	if t == nil {
		return
	}
	d.string(t["otlp_endpoint"], "tracing.otlp_endpoint", &c.Tracing.OTLPEndpoint)
	d.string(t["protocol"], "tracing.protocol", &c.Tracing.Protocol)
	d.string(t["service_name"], "tracing.service_name", &c.Tracing.ServiceName)
	d.duration(t["timeout"], "tracing.timeout", &c.Tracing.Timeout)
	if v, ok := d.scalar(t["sample_ratio"], "tracing.sample_ratio", "a number"); ok {
		r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			d.value("tracing.sample_ratio", fmt.Sprintf("must be a number between 0 and 1, got %q", v))
		} else {
			c.Tracing.SampleRatio = &r
		}
	}
	if h := t["headers"]; !isNull(h) {
		c.Tracing.Headers = map[string]string{}
		for _, p := range d.entries(h, "tracing.headers") {
			var v string
			if d.string(p.val, "tracing.headers."+p.key.Value, &v) {
				c.Tracing.Headers[p.key.Value] = v
			}
		}
	}
}
