// Package admin serves a node's operator endpoints: under /admin the
// ring (/admin/ring), a key's owner (/admin/owner), the console and the
// JSON it polls (/admin/ui; /admin/stats, /admin/cluster, /admin/tenant,
// /admin/tenants, /admin/refusals, /admin/history) and the Go runtime's
// profiles (/admin/debug/pprof/); beside them /metrics, /healthz and
// /readyz; and the gauge of members whose limits differ
// (LimitsMismatchCollector).
//
// The console's data is the node's own, in fixed memory: the refusals and
// pool admissions its router recorded (router.Activity: bounded there), a
// point a second of its counters for the last seriesPoints seconds
// (sampled between Server.Start and Server.Close), and what the cluster,
// the limiter and the metrics registry already hold. A console node gathers
// every member's over HTTP with its own admin token, as /admin/cluster does.
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
