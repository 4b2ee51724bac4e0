package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"golang.org/x/time/rate"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/node/replica"
	"github.com/tokenring/tokenring/tracing"
	"github.com/tokenring/tokenring/tracing/otlp"
)

// startTracedNode makes the node (newNode) with its tracer (startTracing), and
// returns with it what closes both, the node first, so that its last spans
// are exported.
func startTracedNode(ctx context.Context, f flags, cfg config.Config, limits func(string) limiter.Limits, checkpoint replica.Checkpoint,
	getenv func(string) string, log *slog.Logger) (*node.Node, func(), error) {
	tracer, stop, err := startTracing(ctx, f, cfg, f.name, getenv, log.With("node", f.name))
	if err != nil {
		return nil, nil, err
	}
	n, err := newNode(f, cfg, limits, checkpoint, tracer, log)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return n, func() { n.Close(); stop() }, nil
}

// startTracing builds the tracer of the node named name from the config's
// tracing: section, -otlp-endpoint (which wins over its otlp_endpoint)
// and the OTEL_* environment (docs/tracing.md): nil, tracing off, when
// none names a collector. stop flushes the spans not yet exported, within
// 5 s; the caller runs it once the node is closed.
func startTracing(ctx context.Context, f flags, cfg config.Config, name string, getenv func(string) string, log *slog.Logger) (t *tracing.Tracer, stop func(), err error) {
	if f.otlpEndpoint != "" {
		cfg.Tracing.OTLPEndpoint = f.otlpEndpoint
		if err := cfg.Validate(); err != nil {
			return nil, nil, fmt.Errorf("%w: -otlp-endpoint: %v", errUsage, err)
		}
	}
	t, shutdown, err := otlp.Setup(ctx, cfg.Tracing, name, getenv)
	if err != nil || t == nil {
		return nil, func() {}, err
	}
	// The SDK reports a failed export (a collector down) here: warned
	// about once a minute at most, the spans dropped.
	warn := rate.Sometimes{Interval: time.Minute}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		warn.Do(func() { log.Warn("tracing: export failed; spans dropped (logged at most once a minute)", "err", err) })
	}))
	log.Info("tracing on", "protocol", otlp.Protocol(cfg.Tracing, getenv), "otlp_endpoint", cfg.Tracing.OTLPEndpoint)
	return t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("tracing: the last spans were not exported", "err", err)
		}
	}, nil
}
