// Package rls is tokenring as Envoy's external rate limit service: a gRPC
// server of envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// that reads the reference service's (github.com/envoyproxy/ratelimit)
// configuration files (rls/descriptors) and decides every descriptor as a
// tokenring key ("d:...", descriptors.MatchKey) at its owner on the ring,
// through the router (router.DecideHits), like any tenant.
//
// A request's descriptors, each resolved against the config (plan.go):
//
//   - no limit matches (or another's replaces names it): OK, no
//     current_limit, nothing charged (as the reference);
//   - unlimited: OK, limit_remaining 2^32-1, nothing charged;
//   - per-descriptor hits_addend 0: checked only (router's OpStatus):
//     OVER_LIMIT when the key has no room left for one more hit;
//   - a request limit: Hits = the descriptor's hits_addend, else the
//     request's (0 counts as 1), admitted or refused (OpAcquire); its
//     lease lives KeyLeaseTTL only, since nothing ever settles it;
//   - a token or concurrency limit (descriptors' tokens_per_unit,
//     concurrency) with a request id: the call without a per-descriptor
//     hits_addend, or with 0 (Envoy's request path), reserves, under the
//     lease id LeaseID(key, request id), the key's token estimate and a
//     slot (a repeat charges nothing); the call with a hits_addend above 0
//     (Envoy's apply_on_stream_done twin) settles that lease with the real
//     usage, freeing the slot; a lease never settled is freed by its TTL
//     with its reservation still charged (the safe side);
//   - such a limit without a request id: the request path only checks it,
//     and a hits_addend is counted as tokens (OpCharge), never refused.
//
// The charges of one request are all or nothing (Config.AllOrNothing, the
// default): a refusal at one key cancels what the others reserved, and
// keys are reserved in the order of their names, so two requests cannot
// refuse each other. Without it each descriptor is decided on its own, as
// the reference does. A limit in shadow mode is counted and reported OK,
// and never refuses the others.
//
// Invariants: nothing is charged for a request answered with an error (a
// bad request, an unknown domain, a caller refused: INVALID_ARGUMENT,
// NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED), nor, with AllOrNothing,
// for a request answered OVER_LIMIT; statuses come in the request's
// order; the counters have one series per domain and stat key, and stat
// keys carry request values only where the files say detailed_metric (or
// value_to_metric, share_threshold).
//
// It imports api (the client tokens), router, node, limiter and
// rls/descriptors; cmd/tokenringd wires it.
package rls
