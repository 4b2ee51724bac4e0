package node

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/tracing"
)

// The spans of the calls a node forwards (Config.Tracer). A forward is a
// client span, "peer.call <op>", under the span of the request it serves;
// its context travels with the call (node/peer's TraceContext) and the
// owner serves it under a server span, "peer.serve <op>", its child,
// which is the parent of whatever the owner does for it (a forward on, if
// the key moved). Only a call whose request's span is sampled gets spans
// (tracing.InSampled): background calls (debts, replication, custody)
// never do. With Config.Tracer nil a forward and a served call run
// exactly as they did without tracing.

// forward sends c to the member at peer address addr, and waits for its
// answer (peer.Client.Call).
func (n *Node) forward(ctx context.Context, addr string, c *Call) (Answer, error) {
	if n.cfg.Tracer == nil {
		return n.peers.Call(ctx, addr, c)
	}
	return n.forwardTraced(ctx, addr, c)
}

// forwardTraced is forward with tracing on: a client span for c when
// ctx's span is sampled, its context sent along.
func (n *Node) forwardTraced(ctx context.Context, addr string, c *Call) (Answer, error) {
	pool, ok := n.peers.(*peer.Pool)
	if !ok || !tracing.InSampled(ctx) { // another transport carries no trace context
		return n.peers.Call(ctx, addr, c)
	}
	cl := pool.Get(addr)
	ctx, span := n.cfg.Tracer.Start(ctx, "peer.call "+c.Op.String(), trace.SpanKindClient, callAttrs(c, tracing.AttrPeer.String(addr))...)
	var tc peer.TraceContext
	tc.TraceID, tc.SpanID, tc.Flags, _ = tracing.Sampled(ctx)
	a, err := cl.CallTraced(ctx, c, tc)
	endCall(span, c, &a, err)
	return a, err
}

// handler is what the peer server calls with a call that arrived: serve,
// under a span when tracing is on.
func (n *Node) handler() func(ctx context.Context, c *Call) (Answer, error) {
	if n.cfg.Tracer == nil {
		return n.serve
	}
	return n.serveTraced
}

// serveTraced is serve under a server span, the child of the forwarder's
// span, when the call came with one (peer.TraceFrom).
func (n *Node) serveTraced(ctx context.Context, c *Call) (Answer, error) {
	tc, ok := peer.TraceFrom(ctx)
	if !ok {
		return n.serve(ctx, c)
	}
	ctx = tracing.WithRemoteParent(ctx, tc.TraceID, tc.SpanID, tc.Flags)
	ctx, span := n.cfg.Tracer.Start(ctx, "peer.serve "+c.Op.String(), trace.SpanKindServer, callAttrs(c)...)
	a, err := n.serve(ctx, c)
	endCall(span, c, &a, err)
	return a, err
}

// callAttrs are the attributes of c's spans, and extra.
func callAttrs(c *Call, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := append(extra, tracing.AttrOp.String(c.Op.String()), tracing.AttrHops.Int(int(c.Hops)))
	if c.Op == peer.OpRun {
		if calls, err := peer.DecodeRun(c.State); err == nil {
			return append(attrs, tracing.AttrKey.String(c.Key), tracing.AttrCalls.Int(len(calls)))
		}
	}
	return append(attrs, tracing.AttrKey.String(c.Key))
}

// endCall records c's answer a (or err) on span, and ends it.
func endCall(span trace.Span, c *Call, a *Answer, err error) {
	if err == nil {
		span.SetAttributes(tracing.AttrOwner.String(a.Owner))
		switch c.Op {
		case OpAcquire:
			span.SetAttributes(tracing.AttrAllowed.Bool(a.Decision.Allowed))
			if !a.Decision.Allowed {
				span.SetAttributes(tracing.AttrReason.String(a.Decision.Reason.String()))
			}
		case OpSettle, OpRelease, OpCancel, OpRenew:
			span.SetAttributes(tracing.AttrFound.Bool(a.OK))
		}
	}
	tracing.EndError(span, err)
}

// Tracer is Config.Tracer: nil when tracing is off.
func (n *Node) Tracer() *tracing.Tracer { return n.cfg.Tracer }
