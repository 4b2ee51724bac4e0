// Package proxy is the LLM proxy: OpenAI's POST /v1/chat/completions,
// /v1/responses and /v1/embeddings, and Anthropic's POST /v1/messages, each
// admitted through the router as a decision-API acquire would be
// (router.Router.Admit), forwarded to its upstream with the operator's
// key, relayed back (a whole answer, or a stream event by event), and
// settled with the usage the upstream reported. OpenAI's GET /v1/models
// and Anthropic's POST /v1/messages/count_tokens are passed through to the
// upstream uncharged (passthrough.go).
//
// A provider (provider.go) is one API shape: how its requests are parsed
// and counted, where they go, how its errors look and where its answers
// report their usage; OpenAI's chat completions (openai.go), Responses API
// (responses.go) and embeddings (embeddings.go), and Anthropic's messages
// (anthropic.go) each implement it, and the shared path knows a provider
// only through it. The rest is the shared path: the upstream client and its timeouts
// (upstream.go), the headers sent upstream (upheaders.go) and the
// rate-limit headers answered (headers.go), the call (forward.go), the
// stream relay (sse.go), the lease's renewal while the upstream works
// (renew.go), and the fast path for whole answers (plainproxy.go).
//
// Invariants:
//   - an admitted request's lease is finished exactly once (settled,
//     released or cancelled, as proxy.go's table says), and before the
//     client can see the end of the answer;
//   - nothing is counted for a caller before its API key is known, and a
//     tenant that cannot admit any request is refused without counting
//     (router.Router.RefuseExhausted);
//   - only the allow-listed request headers reach an upstream;
//   - the fast path (ServePlain) answers exactly as the net/http routes
//     (Routes) would, or declines having changed nothing.
//
// It imports router and below; only the front door (frontdoor), the
// binaries and the tests import it.
package proxy
