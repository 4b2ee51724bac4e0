package router

// One call at its key's owner (decide), and the fallback policy when the
// owner cannot be reached; the errors decide returns when no decision was
// made.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/fallback"
	"github.com/tokenring/tokenring/internal/lazyctx"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// outcome is the result of one call, possibly decided by the fallback.
type outcome struct {
	answer   node.Answer
	fallback bool // decided locally because the owner was unreachable
}

// OwnerTimeoutRetry is the retry-after of a 503 for an owner that did not
// answer within the cap: it is alive, but too busy to be asked again at once.
const OwnerTimeoutRetry = time.Second

// OwnerTimeoutError is decide's error for an owner that is alive (its
// connection is not silent) but did not answer within ForwardMaxWait. Nothing
// was admitted: the front ends answer a 503.
type OwnerTimeoutError struct {
	key  string
	wait time.Duration
}

func (e *OwnerTimeoutError) Error() string {
	return fmt.Sprintf("owner of %s did not answer within %v", e.key, e.wait)
}

// decide executes c at its owner. It waits for a live owner up to the hard
// cap ForwardMaxWait (plus wait_ms for an acquire); the node gives up sooner,
// with an error wrapping node.ErrPeerDown, when the owner is unreachable
// (refused, reset, or silent past its liveness interval after a probe), and
// then decide applies the fallback policy, as it does for
// node.ErrTransferPending. The cap passing means the owner is alive but slow:
// no fallback, since the owner may still count the call; decide returns an
// *OwnerTimeoutError and admits nothing. ctx's own end (client gone) is
// returned as an error.
//
// Other errors (node.ErrNoOwner while rings disagree, an error text from a
// remote node) fall back as they always did.
func (r *Router) decide(ctx context.Context, c *node.Call, tokens int64) (outcome, error) {
	wait := r.cfg.ForwardMaxWait
	if c.Op == node.OpAcquire {
		wait += c.Req.Wait
	}
	cctx, cancel := lazyctx.WithTimeout(ctx, wait)
	start := r.cfg.Now()
	a, err := r.cluster.Do(cctx, *c)
	cancel()
	where := "local"
	switch {
	case err != nil:
		where = "failed"
	case a.Owner != r.cluster.Name():
		where = "forwarded"
	}
	end := r.cfg.Now()
	r.metrics.observe(c.Op, where, end.Sub(start))
	if err == nil && a.Decision.Reason == limiter.TableFull {
		return outcome{}, &TableFullError{owner: a.Owner, retry: a.Decision.RetryAfter}
	}
	if err == nil {
		// Every answer carries the key's status: remember what another
		// owner reported as remaining, for the degraded share. This
		// node's own answers are not reported one by one: its table is
		// their report while it holds the key (reportHeld), and the
		// key's status is handed to the fallback as its state leaves the
		// table (node.OnRelease), before any call for it goes elsewhere.
		if where == "forwarded" && c.Op != node.OpRun { // a run's answers are reported one by one (decideRun)
			r.degraded.Report(c.Key, a.Decision.Status, end)
		}
		return outcome{answer: a}, nil
	}
	if ctx.Err() != nil {
		return outcome{}, ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, node.ErrPeerDown) && !errors.Is(err, node.ErrTransferPending) {
		r.timeouts.Inc()
		r.warn.Do(func() {
			r.log.Warn("owner alive but slow: refused without fallback (logged at most once a second)", "op", c.Op.String(), "key", c.Key, "cap", wait, "err", err)
		})
		return outcome{}, &OwnerTimeoutError{key: c.Key, wait: wait}
	}
	r.warn.Do(func() {
		r.log.Warn("owner unreachable, falling back (logged at most once a second)", "op", c.Op.String(), "key", c.Key, "policy", string(r.cfg.Fallback), "err", err)
	})
	return r.fallback(c, tokens)
}

// fallback decides c here, by the fallback policy, its owner being out of
// reach: an acquire is admitted or refused, anything else changes nothing
// (the owner holds the lease; it expires there by its TTL).
func (r *Router) fallback(c *node.Call, tokens int64) (outcome, error) {
	o := outcome{fallback: true, answer: node.Answer{Owner: r.cluster.Name()}}
	switch c.Op {
	case node.OpAcquire:
		// Every fallback admission is a debt, charged to the key's window
		// at its owner once one is reachable (fallback.Debts). One that could not
		// be accounted for (too many keys owing) is refused.
		d := &o.answer.Decision
		hits := max(c.Req.Hits, 1) // an Envoy descriptor's hits_addend
		switch {
		case r.cfg.Fallback == fallback.Closed, r.cfg.Limits(c.Key).Spend > 0:
			// A key with a budget falls back closed: its spend is
			// counted only at its owner, and a budget is never exceeded.
			d.Reason = limiter.Requests
			d.RetryAfter = r.cfg.ForwardTimeout
		case !r.debts.Room(c.Key):
			d.Reason = limiter.Requests
			d.RetryAfter = r.cfg.DebtInterval
		case r.cfg.Fallback == fallback.Open:
			if d.Allowed = r.degraded.Owe(c.Key, tokens, hits); !d.Allowed {
				d.Reason, d.RetryAfter = limiter.TableFull, fallback.FullRetry
			}
		default:
			r.reportHeld(c.Key)
			id, reason, retry := r.degraded.Acquire(c.Key, r.limitsOf(c), r.members(), tokens, hits)
			d.Allowed, d.Lease, d.Reason, d.RetryAfter = reason == limiter.None, id, reason, retry
		}
		if d.Reason == limiter.TableFull && !d.Allowed {
			r.metrics.fallback(r.cfg.Fallback, false)
			return outcome{}, &TableFullError{owner: "this node's fallback", retry: d.RetryAfter}
		}
		if d.Allowed {
			d.Reserved = tokens
			r.debts.Recorded(c.Key, hits)
		}
		r.metrics.fallback(r.cfg.Fallback, d.Allowed)
	case node.OpSettle, node.OpRelease, node.OpCancel, node.OpRenew:
		// The owner holds the lease; it will expire there by its TTL.
	}
	return o, nil
}

// TableFullError is decide's error for a call the key's owner refused with
// limiter.TableFull: the key is new there and the owner already holds its
// node.Config.MaxKeys keys, none idle. Nothing was admitted, and no
// fallback applies (the owner answered); the front ends answer a 503 with
// a Retry-After, since it is the server's limit, not the tenant's.
type TableFullError struct {
	owner string        // the member that refused
	retry time.Duration // until its next sweep may free room
}

func (e *TableFullError) Error() string {
	return fmt.Sprintf("too many keys held (max_keys reached at %s)", e.owner)
}

// RetryMS is the retry-after in milliseconds, at least 1.
func (e *TableFullError) RetryMS() int64 {
	return max(1, (e.retry + time.Millisecond - 1).Milliseconds())
}

// limitsOf is the limits c decides under: the file's for its key, with
// the requests, tokens and concurrency its request sent, if any.
func (r *Router) limitsOf(c *node.Call) limiter.Limits {
	l := r.cfg.Limits(c.Key)
	if c.Limits != nil {
		l.Requests, l.Tokens, l.Concurrency = c.Limits.Requests, c.Limits.Tokens, c.Limits.Concurrency
	}
	return l
}
