// Package admin serves a node's operator endpoints: under /admin the
// ring (/admin/ring), a key's owner (/admin/owner), the status page and
// the JSON it polls (/admin/ui, /admin/stats, /admin/cluster) and the Go
// runtime's profiles (/admin/debug/pprof/); beside them /metrics, /healthz
// and /readyz; and the gauge of members whose limits differ
// (LimitsMismatchCollector).
//
// Invariants:
//   - with an admin token configured, every path under /admin needs it
//     (Guard wraps the whole front door, so a path no endpoint serves is
//     refused before it is found missing); /metrics, /healthz and /readyz
//     stay open: they hold no tenant's data;
//   - nothing here decides or changes a limit: every endpoint reads.
//
// It imports router (the cluster view, key names, the decision counters)
// and below; only the front door (frontdoor), the binaries and the tests
// import it.
package admin
