// Package api is the decision API over HTTP: POST /v1/acquire,
// /v1/complete, /v1/renew and /v1/batch, GET /v1/tenants/{tenant}. It
// reads and checks the requests (codec.go decodes the bodies gateways send
// without reflection, encoding/json the rest), knows the clients (their
// tokens and certificates, auth.go), counts prompts, signs the leases it
// hands out and opens those brought back (lease.go), asks the router for
// the decision, and writes the answers; the same calls are served on the
// fast path (ServePlain) and, when every key is decided here at once, on
// an event loop (ServeQuick).
//
// Invariants:
//   - every answer on the fast path is byte for byte the one the net/http
//     routes give the same request; a request the fast path declines is
//     left untouched;
//   - the fast decoder accepts a body only when encoding/json decodes it
//     to the same value, and every refusal is encoding/json's;
//   - nothing is computed for a caller before it is known to be allowed:
//     its credential (401), then its tenant (403), then the prompt's size
//     (413) and the tenant's exhaustion (router.Router.RefuseExhausted)
//     come before any count;
//   - a lease opens only with a cluster secret's tag over every byte of
//     it, and acts only for the tenant it names;
//   - an invalid request changes nothing.
//
// It imports router and below; only the front door (frontdoor), the
// binaries and the tests import it.
package api
