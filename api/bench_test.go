package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// benchRouter is one node alone and its router, with limits no benchmark
// reaches; the node closes when b ends.
func benchRouter(b testing.TB) *testAPI { return benchChainRouter(b, nil) }

// benchChainRouter is benchRouter with chain as the router's Config.Chain.
func benchChainRouter(b testing.TB, chain func(tenant, model string) router.Chain) *testAPI {
	b.Helper()
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30, LeaseTTL: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	return newAPI(b, n, router.Config{Limits: limits, Chain: chain}, Config{})
}

// BenchmarkHTTPAcquireComplete measures the decision API's handler cost
// without the network: one acquire and one complete per op, over 10,000
// tenants, through the real router and node (no sockets).
func BenchmarkHTTPAcquireComplete(b *testing.B) {
	acquireComplete(b, benchRouter(b))
}

// acquireComplete runs b's ops in parallel, each an acquire and its
// complete through r's handler, over 10,000 tenants.
func acquireComplete(b *testing.B, r *testAPI) {
	acquireCompleteOn(b, func() *testAPI { return r })
}

// acquireCompleteOn is acquireComplete with each op sent to the handler
// next returns.
func acquireCompleteOn(b *testing.B, next func() *testAPI) {
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := next()
			tenant := fmt.Sprintf("t%d", seq.Add(1)%10000)
			rec := benchAcquire(r, tenant)
			body := rec.Body.String()
			i := strings.Index(body, `"lease":"`)
			if rec.Code != 200 || i < 0 {
				b.Fatalf("%d %s", rec.Code, body)
			}
			lease := body[i+9:]
			lease = lease[:strings.IndexByte(lease, '"')]
			rec = httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/complete",
				strings.NewReader(`{"tenant":"`+tenant+`","lease":"`+lease+`","usage":{"prompt_tokens":100,"completion_tokens":40}}`)))
			if rec.Code != 200 {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
		}
	})
}

// benchAcquire sends one acquire of 100 prompt and 100 completion tokens
// for tenant through r's handler, without sockets.
func benchAcquire(r *testAPI, tenant string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/acquire",
		strings.NewReader(`{"tenant":"`+tenant+`","prompt_tokens":100,"max_tokens":100}`)))
	return rec
}

// BenchmarkFallbackAcquire measures the cost of the fallback path (every
// owner unreachable: degraded share, a debt recorded per admission) beside
// the same acquire decided by a node in the same process, over 10,000
// tenants with limits that never bind.
func BenchmarkFallbackAcquire(b *testing.B) {
	limits := func(string) limiter.Limits {
		return limiter.Limits{Requests: 1 << 40, Tokens: 1 << 50, Concurrency: 1 << 30}
	}
	run := func(b *testing.B, cluster router.Cluster) {
		r := newAPI(b, cluster, router.Config{Limits: limits}, Config{})
		defer r.router.Close()
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rec := benchAcquire(r, fmt.Sprintf("t%d", seq.Add(1)%10000))
				if rec.Code != 200 {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
	b.Run("owner", func(b *testing.B) {
		n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		run(b, n)
	})
	b.Run("fallback+debt", func(b *testing.B) {
		rg, err := ring.New(ring.Config{}, []ring.Member{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}})
		if err != nil {
			b.Fatal(err)
		}
		run(b, downCluster{rg})
	})
}

// BenchmarkLeaseCodec is a lease's encode and decode: "unsigned" as leases
// were before they were signed (the fields in base64), "signed" as they are
// (plus an HMAC-SHA256 tag, verified on decode).
func BenchmarkLeaseCodec(b *testing.B) {
	l := v2Lease("acme-tenant", 0x9e3779b97f4a7c15, false, "gpt-4o-mini", 0x6a09e667f3bcc908, false, "n1")
	b.Run("unsigned", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			text := base64.RawURLEncoding.EncodeToString(appendPayload(nil, &l))
			raw, err := base64.RawURLEncoding.DecodeString(text)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := parsePayload(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("signed", func(b *testing.B) {
		s := newLeaseSigner([][]byte{[]byte("0123456789abcdef0123456789abcdef")})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.open(s.sign(l)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecodeAcquire decodes a gateway's acquire body: the fast path
// against encoding/json (what decodeBody did before), same body, same run.
func BenchmarkDecodeAcquire(b *testing.B) {
	body := []byte(`{"tenant":"acme-prod","model":"gpt-4o","prompt_tokens":1200,"max_tokens":400}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var in acquireRequest
			if !decodeFast(body, &in) {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var in acquireRequest
			if err := jsonDecode(body, &in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeAcquireAnswer writes an admitted acquire's answer: its own
// appendJSON into a reused buffer against json.Encoder.
func BenchmarkEncodeAcquireAnswer(b *testing.B) {
	d := dimJSON{Limit: 100_000_000, Remaining: 99_999_000, ResetMS: 60_000}
	a := &acquireResponse{Allowed: true, Lease: strings.Repeat("x", 120), ReservedTokens: 1600,
		Limits: limitsJSON{Requests: d, Tokens: d, Concurrency: d}, Owner: "n1"}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf = a.appendJSON(buf[:0])
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := json.NewEncoder(&buf).Encode(a); err != nil {
				b.Fatal(err)
			}
		}
	})
}
