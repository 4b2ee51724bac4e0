package router

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/tracing"
)

// The router's spans (Config.Tracer): "router.admit" for an acquire
// across its chain (Admit), "router.<op>" for a lease's settle, release,
// cancel or renew across its keys (LeaseCall). Each is the child of the
// request's span (the front door's), and the parent of the forwards to
// the keys' owners (node's "peer.call"). Only a request whose span is
// sampled gets them (needsSpan). Admit and LeaseCall call these once,
// with tracing on, and they call Admit and LeaseCall again under the
// span, which the context marks (spanned) so that the second call runs
// the decision itself.

// spanned marks a context whose Admit or LeaseCall span is started.
type spanned struct{ lease bool }

// needsSpan reports whether a call of Admit (lease false) or LeaseCall
// (true) under ctx gets a span of its own: ctx's span is sampled, and is
// not that call's span already.
func needsSpan(ctx context.Context, lease bool) bool {
	return tracing.InSampled(ctx) && ctx.Value(spanned{lease: lease}) == nil
}

// Tracer is Config.Tracer: nil when tracing is off.
func (r *Router) Tracer() *tracing.Tracer { return r.cfg.Tracer }

// admitTraced is Admit under a "router.admit" span.
func (r *Router) admitTraced(ctx context.Context, adm Admission) (Verdict, error) {
	ctx = context.WithValue(ctx, spanned{}, true)
	ctx, span := r.cfg.Tracer.Start(ctx, "router.admit", trace.SpanKindInternal,
		tracing.AttrTenant.String(adm.Tenant), tracing.AttrModel.String(adm.Model))
	v, err := r.Admit(ctx, adm)
	if err == nil {
		span.SetAttributes(tracing.AttrAllowed.Bool(v.Allowed), tracing.AttrFallback.Bool(v.Fallback), tracing.AttrOwner.String(v.Owner))
		if !v.Allowed {
			span.SetAttributes(tracing.AttrReason.String(v.Reason), tracing.AttrRefusedBy.String(v.RefusedBy.Label()))
		}
	}
	tracing.EndError(span, err)
	return v, err
}

// leaseTraced is LeaseCall under a "router.<op>" span.
func (r *Router) leaseTraced(ctx context.Context, l Lease, op node.Op, usage limiter.Usage) (bool, limiter.Status, time.Time) {
	ctx = context.WithValue(ctx, spanned{lease: true}, true)
	ctx, span := r.cfg.Tracer.Start(ctx, "router."+op.String(), trace.SpanKindInternal,
		tracing.AttrTenant.String(l.Tenant), tracing.AttrCalls.Int(len(l.Sides())))
	ok, status, expires := r.LeaseCall(ctx, l, op, usage)
	span.SetAttributes(tracing.AttrFound.Bool(ok))
	span.End()
	return ok, status, expires
}
