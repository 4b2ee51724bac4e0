package api

// The decision API served from a connection's bytes (internal/http1): the
// calls gateways make all day skip net/http. Every answer is the one the
// net/http routes (Routes) give the same request; every request this path
// does not take is declined untouched and served by them.

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

	"github.com/tokenring/tokenring/internal/http1"
)

// ServePlain is the decision API's http1.Handler. It takes POST
// /v1/acquire (without wait_ms), /v1/complete, /v1/renew and /v1/batch
// (no call with wait_ms) whose bodies decode on the fast path (decodeFast),
// and answers them exactly as the net/http routes (Routes) would: same
// status, headers (but the Date, Content-Length and Connection that the
// server writes) and body. Any other request it declines (returns false)
// having changed nothing. A call with wait_ms is declined because only
// net/http notices a client that hangs up while the call waits.
func (s *Server) ServePlain(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	return s.servePlain(ctx, req, resp, false)
}

// servePlain is ServePlain, or (quick) ServeQuick: then it declines what
// would wait.
func (s *Server) servePlain(ctx context.Context, req *http1.Request, resp *http1.Response, quick bool) bool {
	var a apiAnswer
	switch string(req.Path) {
	case "/v1/acquire":
		var in acquireRequest
		if !decodeFast(req.Body, &in) || in.WaitMS != 0 || quick && !s.r.ImmediateAcquire(in.Tenant, in.Model) {
			return false
		}
		set, deny := s.tenantsOf(string(req.Authorization))
		if deny != nil {
			a = *deny
			break
		}
		// The decision's body is written from this stack: no answer
		// on the heap (acquireDecision).
		head, res, decided := s.acquireDecision(ctx, set, &in)
		if !decided {
			head.appendPlain(resp)
			return true
		}
		head.appendHead(resp)
		resp.Body = append(res.appendJSON(resp.Body), '\n')
		return true
	case "/v1/complete", "/v1/renew":
		var in completeRequest
		if !decodeFast(req.Body, &in) || quick && !s.immediateLease(&in) {
			return false
		}
		set, deny := s.tenantsOf(string(req.Authorization))
		switch {
		case deny != nil:
			a = *deny
		case string(req.Path) == "/v1/complete":
			a = s.completeCall(ctx, set, &in)
		default:
			a = s.renewCall(ctx, set, &in)
		}
	case "/v1/batch":
		var in batchRequest
		if bytes.Contains(req.Body, []byte("wait_ms")) {
			return false
		}
		pre, ok := decodeBatchFast(req.Body, &in)
		if !ok || quick && !s.immediateBatch(pre) {
			return false
		}
		if set, deny := s.tenantsOf(string(req.Authorization)); deny != nil {
			a = *deny
		} else {
			a = s.batchAnswer(ctx, set, &in, pre)
		}
	default:
		return false
	}
	a.appendPlain(resp)
	return true
}

// appendPlain writes a into resp as write writes it to a ResponseWriter.
func (a apiAnswer) appendPlain(resp *http1.Response) {
	a.appendHead(resp)
	if j, ok := a.body.(jsonAppender); ok {
		resp.Body = j.appendJSON(resp.Body)
	} else {
		b, _ := json.Marshal(a.body) // the other bodies are maps of strings and numbers: they always marshal
		resp.Body = append(resp.Body, b...)
	}
	resp.Body = append(resp.Body, '\n')
}

// appendHead writes a's status and headers into resp.
func (a apiAnswer) appendHead(resp *http1.Response) {
	resp.Status = a.status
	resp.AddHeader("Content-Type", "application/json")
	if a.retryAfterMS > 0 {
		resp.AddHeader("Retry-After", strconv.FormatInt(retryAfterSeconds(a.retryAfterMS), 10))
	}
	if a.wwwAuth {
		resp.AddHeader("Www-Authenticate", `Bearer realm="tokenring"`)
	}
}
