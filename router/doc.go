// Package router is a node's decision across the keys a request charges:
// it turns an acquire into calls for every key of its chain (the tenant
// and its model-scoped key, each group above it and its model-scoped key,
// the model's pool), reserved all or nothing in one total order, each
// executed at its key's owner here or forwarded by the node; it settles,
// renews, releases and cancels a lease's keys the same way; it applies
// the fallback policy when an owner cannot be reached, and charges the
// fallback's debts to the owners once they can; it decides the descriptor
// keys of an Envoy rate limit request (DecideHits: all or nothing in the
// order of their keys, or each on its own); and it counts what it decided. It speaks no HTTP: the decision API (api) and the LLM proxy
// (proxy) are its front ends, the operator's endpoints (admin) read its
// counters, and frontdoor wires them together.
//
// Invariants:
//   - an acquire holds every key of its chain or none: a refusal, or an
//     owner that cannot answer, cancels what was reserved, last first;
//   - a request waits only while it holds nothing, and at one key;
//   - an owner alive but slow past ForwardMaxWait admits nothing and gets
//     no fallback (OwnerTimeoutError); an unreachable one gets the
//     fallback policy, whose every admission is a debt (fallback);
//   - a key's name never holds U+001F, the separator of a model-scoped
//     key (CheckName), so no two (level, models entry) pairs share a key.
//
// It imports node, limiter, ring, prompt, fallback and internal packages;
// api, proxy, admin and frontdoor import it, never the other way round.
package router
