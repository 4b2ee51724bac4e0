package api

// The decision API on an event loop (internal/http1's Config.Quick): a
// call is answered on the loop's thread only when nothing it does can
// wait, which is when every key it touches is decided at this node, now.

import (
	"context"

	"github.com/tokenring/tokenring/internal/http1"
)

// ServeQuick is the decision API's http1 Quick handler, run on an event
// loop's thread. It takes what ServePlain takes, and answers it exactly
// as ServePlain does, when every key the request touches is decided at
// this node at once (node.Node.Immediate): every key of an acquire's chain;
// a complete's or renew's lease's sides; every call of a batch that holds
// acquires only. It declines, having changed nothing, everything else: a
// call forwarded to its owner, the LLM proxy's requests, a batch with a
// complete or a renew (their calls run on goroutines of their own), and
// every request when the cluster cannot tell (no Immediate).
func (s *Server) ServeQuick(ctx context.Context, req *http1.Request, resp *http1.Response) bool {
	if !s.r.Quick() {
		return false
	}
	return s.servePlain(ctx, req, resp, true)
}

// immediateLease reports whether a complete or renew of in touches only
// keys decided here at once. A call whose lease does not parse is a 4xx
// answered at once.
func (s *Server) immediateLease(in *completeRequest) bool {
	l, err := s.parseLeaseRequest(in)
	if err != nil {
		return true
	}
	return s.r.ImmediateLease(l)
}

// immediateBatch reports whether a batch whose calls the fast decoder read
// (pre) holds acquires only, each decided here at once (and, as
// acquireHere asks, owned here by this node's ring).
func (s *Server) immediateBatch(pre []decodedCall) bool {
	for i := range pre {
		c := &pre[i]
		if !c.ok || c.acquire.Op != "acquire" || c.acquire.WaitMS != 0 || !s.r.OwnedAcquire(c.acquire.Tenant, c.acquire.Model) ||
			!s.r.ImmediateAcquire(c.acquire.Tenant, c.acquire.Model) {
			return false
		}
	}
	return true
}
