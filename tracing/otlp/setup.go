// Package otlp builds a node's OpenTelemetry TracerProvider and its OTLP
// exporter (grpc or http/protobuf) from the config's tracing: section and
// the OTEL_* environment: tokenringd's side of package tracing, apart so
// that the packages that make spans do not link the exporters.
//
// It imports config and tracing, and nothing else of tokenring's.
package otlp

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/tracing"
)

// The environment variables Setup reads itself; the exporter and the SDK
// read the other OTEL_* ones (headers, certificates, timeout, sampler,
// resource attributes) as they always do.
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envDisabled       = "OTEL_SDK_DISABLED"
)

// Enabled reports whether cfg, or the environment (getenv), names a
// collector to export to, and the SDK is not disabled
// (OTEL_SDK_DISABLED=true).
func Enabled(cfg config.Tracing, getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(envDisabled)), "true") {
		return false
	}
	return cfg.OTLPEndpoint != "" || getenv(envEndpoint) != "" || getenv(envTracesEndpoint) != ""
}

// Protocol is the OTLP protocol of cfg: its own, else the environment's
// (the traces' variable first), else http/protobuf.
func Protocol(cfg config.Tracing, getenv func(string) string) string {
	for _, p := range []string{cfg.Protocol, getenv(envTracesProtocol), getenv(envProtocol)} {
		if p != "" {
			return p
		}
	}
	return config.TracingHTTP
}

// Setup builds the TracerProvider of the node named instance from cfg and
// the environment (getenv for the variables Setup reads; the exporter
// reads its own from the process's), and returns its Tracer and the
// provider's Shutdown, which flushes the spans not yet exported. Off
// (Enabled false) it builds nothing and returns a nil Tracer and a
// Shutdown that does nothing. The exporter connects lazily: a collector
// that is down costs dropped spans (the SDK's error handler says so), never
// a failed start.
func Setup(ctx context.Context, cfg config.Tracing, instance string, getenv func(string) string) (*tracing.Tracer, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	if !Enabled(cfg, getenv) {
		return nil, none, nil
	}
	exp, err := exporter(ctx, cfg, getenv)
	if err != nil {
		return nil, none, err
	}
	res, err := resource(ctx, cfg, instance)
	if err != nil {
		return nil, none, err
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if r := cfg.SampleRatio; r != nil {
		// Without it the SDK reads OTEL_TRACES_SAMPLER(_ARG), else samples
		// every trace (parent-based).
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*r))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tracing.New(tp), tp.Shutdown, nil
}

// exporter is the OTLP exporter of cfg's protocol. Options given here win
// over the environment's, which the exporter reads for the others.
func exporter(ctx context.Context, cfg config.Tracing, getenv func(string) string) (sdktrace.SpanExporter, error) {
	switch p := Protocol(cfg, getenv); p {
	case config.TracingGRPC:
		var opts []otlptracegrpc.Option
		if cfg.OTLPEndpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint))
		}
		if cfg.Headers != nil {
			opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
		}
		if cfg.Timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(cfg.Timeout))
		}
		return otlptracegrpc.New(ctx, opts...)
	case config.TracingHTTP:
		var opts []otlptracehttp.Option
		if cfg.OTLPEndpoint != "" {
			u, err := TracesURL(cfg.OTLPEndpoint)
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u))
		}
		if cfg.Headers != nil {
			opts = append(opts, otlptracehttp.WithHeaders(cfg.Headers))
		}
		if cfg.Timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(cfg.Timeout))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q: want grpc or http/protobuf", p)
	}
}

// TracesURL is where http/protobuf sends the traces of the collector at
// base, as OTEL_EXPORTER_OTLP_ENDPOINT is read: base's path plus
// /v1/traces (kept as it is when it ends so already).
func TracesURL(base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("tracing: otlp_endpoint: %w", err)
	}
	if !strings.HasSuffix(u.Path, "/v1/traces") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	return u.String(), nil
}

// resource names the service (service_name, else OTEL_SERVICE_NAME, else
// tokenring) and the node (service.instance.id), with
// OTEL_RESOURCE_ATTRIBUTES' attributes.
func resource(ctx context.Context, cfg config.Tracing, instance string) (*sdkresource.Resource, error) {
	opts := []sdkresource.Option{
		sdkresource.WithAttributes(attribute.String("service.name", "tokenring")),
		sdkresource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, over the default
		sdkresource.WithTelemetrySDK(),
		sdkresource.WithAttributes(attribute.String("service.instance.id", instance)),
	}
	if cfg.ServiceName != "" {
		opts = append(opts, sdkresource.WithAttributes(attribute.String("service.name", cfg.ServiceName)))
	}
	res, err := sdkresource.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

// NodeResource is the resource of the node named instance, as Setup makes
// it with no config: for tests that build their own providers.
func NodeResource(instance string) *sdkresource.Resource {
	return sdkresource.NewSchemaless(attribute.String("service.name", "tokenring"), attribute.String("service.instance.id", instance))
}
