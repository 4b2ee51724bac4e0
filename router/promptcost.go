package router

// What a prompt costs before it is admitted. Counting a prompt with
// tiktoken takes 0.3-0.5 s of CPU a MiB, so nothing is counted for a
// caller before it is known to be allowed (its token, then its tenant), a
// prompt is counted only up to a cap (DefaultMaxPromptBytes), and a
// tenant that cannot admit any request now is refused without counting
// (RefuseExhausted). The front ends count; the router only refuses.

import (
	"context"
	"time"

	"github.com/tokenring/tokenring/internal/lazyctx"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/prompt"
)

// Counter counts prompt tokens: the front ends count with it, each
// prompt once its caller is known to be allowed. *prompt.Counter
// implements it.
type Counter interface {
	Text(model, text string) int
	Messages(model string, msgs []prompt.Message) int
}

// DefaultMaxPromptBytes is the front ends' cap on the bytes of a prompt
// they count (api.Config.MaxPromptBytes, the proxy's): 256 KiB, about
// 64,000 tokens of English and 0.1 s of one core to count at most. Larger
// prompts are rare enough that their callers can count them themselves.
const DefaultMaxPromptBytes = 256 << 10

// MessagesBytes is the bytes of msgs' fields that a count reads.
func MessagesBytes(msgs []prompt.Message) int {
	n := 0
	for i := range msgs {
		m := &msgs[i]
		n += len(m.Role) + len(m.Name) + len(m.Content) + len(m.ToolCalls) + len(m.ToolCallID)
	}
	return n
}

// exhaustedProbeWait bounds RefuseExhausted's call to the owner; a probe
// that takes longer is given up and the acquire runs as usual.
const exhaustedProbeWait = 500 * time.Millisecond

// RefuseExhausted answers, before the prompt of adm is counted, an acquire
// (without wait_ms) whose tenant cannot admit any request now: its
// request window is full or every concurrency slot held. It is cheap: it
// asks the owner only when what this node already knows says so (the
// tenant's state in its own table, or the owner's last report that the
// fallback keeps, see looksExhausted), and then with the same acquire
// carrying no prompt tokens. That probe changes nothing and charges
// nothing:
//
//   - a refusal at the owner (limiter.Budget.Acquire without Wait) counts
//     nothing, queues nothing, and is exactly the answer the acquire
//     itself would get: a request with more tokens never fits where one
//     with fewer does not (it may wait longer: the retry-after is then a
//     lower bound, as any retry-after is once others are admitted);
//   - an admission (the hint was stale) is cancelled at once, before its
//     lease reaches anyone: OpCancel takes back its request, its tokens
//     and its slot; the acquire then runs as usual, prompt counted;
//   - the probe goes to the cluster directly, never to the fallback: an
//     owner unreachable, slow or full of keys leaves the decision to the
//     acquire itself.
//
// refused is false when the acquire must run as usual.
func (r *Router) RefuseExhausted(ctx context.Context, adm Admission) (v Verdict, refused bool) {
	key := TenantKey(adm.Tenant)
	if adm.Req.Wait > 0 || !r.looksExhausted(key) {
		return v, false
	}
	probe := adm.Req
	probe.PromptTokens = 0
	cctx, cancel := lazyctx.WithTimeout(ctx, exhaustedProbeWait)
	a, err := r.cluster.Do(cctx, node.Call{Op: node.OpAcquire, Key: key, Req: probe})
	cancel()
	d := a.Decision
	switch {
	case err != nil || d.Reason == limiter.TableFull:
		return v, false
	case d.Allowed:
		cctx, cancel := lazyctx.WithTimeout(context.WithoutCancel(ctx), r.cfg.ForwardMaxWait)
		defer cancel()
		if _, err := r.cluster.Do(cctx, node.Call{Op: node.OpCancel, Key: key, Lease: d.Lease}); err != nil {
			r.log.Warn("cancelling a probe's admission failed; the slot expires by its TTL", "key", key, "err", err)
		}
		return v, false
	}
	if a.Owner != r.cluster.Name() {
		r.degraded.Report(key, d.Status, r.cfg.Now())
	}
	v = Verdict{Status: d.Status, Owner: a.Owner, Reason: d.Reason.String(), RetryAfter: d.RetryAfter,
		RefusedBy: Side{Key: key, Kind: KeyTenant, Name: adm.Tenant}, RefusedStatus: d.Status}
	r.metrics.decision("tenant", v.Reason, false)
	r.recordRefusal(adm.Tenant, &v)
	return v, true
}

// looksExhausted reports whether what this node knows of key, without
// asking anyone, says it admits no request now: the key's state in this
// node's table (exact), else the owner's last report kept for the
// fallback while what it counted is in its window.
func (r *Router) looksExhausted(key string) bool {
	if h, ok := r.cluster.(holder); ok {
		if st, held := h.Held(key); held {
			return full(st.Requests) || full(st.Concurrency)
		}
	}
	return r.degraded.Exhausted(key, r.cfg.Now())
}

// full reports whether a limited dimension has nothing left.
func full(d limiter.DimStatus) bool { return d.Limit > 0 && d.Remaining <= 0 }
