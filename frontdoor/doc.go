// Package frontdoor is a node's HTTP front door: one http.Handler, and
// the fast path's handlers, serving the decision API, the LLM proxy and
// the operator's endpoints (admin), all deciding through one
// router.Router over the node. It holds no logic of its own but the
// wiring: which package serves which path, and the 404 for the rest.
//
// Invariants:
//   - every path under /admin passes the admin guard, whether or not an
//     endpoint serves it;
//   - the fast path (ServePlain, ServeQuick) answers exactly as ServeHTTP
//     would, or declines having changed nothing.
//
// It may import every package of the front door (router, api, proxy,
// admin); only the binaries and the tests import it.
package frontdoor
