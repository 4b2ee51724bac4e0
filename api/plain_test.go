package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// twinRouter builds a node and router of s and its decision API (its
// Config then changed by each of more) whose lease ids count 1, 2, 3...:
// two twins given the same calls hold the same state and answer the same
// bytes.
func twinRouter(t testing.TB, s setup, more ...func(*Config)) *testAPI {
	t.Helper()
	var ids atomic.Uint64
	n, err := node.New(node.Config{Name: "n1", LimitsFor: s.limits, Now: s.now,
		Policy: limiter.Policy{IDs: func() uint64 { return ids.Add(1) }}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	cfg := Config{Now: s.now, ClusterSecrets: s.secrets, Clients: s.clients}
	for _, f := range more {
		f(&cfg)
	}
	return newAPI(t, n, router.Config{Limits: s.limits, Now: s.now,
		PoolFor: func(model string) (string, bool) { _, ok := s.pools[model]; return model, ok }}, cfg)
}

// plainStep is one request; "$LEASE" in its body is the last lease
// answered.
type plainStep struct {
	path, token, body string
	declined          bool // ServePlain must leave it to ServeHTTP
	notQuick          bool // ServeQuick must leave it to ServePlain (a batch with a complete)
}

// answer is what a client sees of an answer but the Date.
type answer struct {
	status int
	header map[string]string // Content-Type, Retry-After, Www-Authenticate
	body   string
}

var answerHeaders = []string{"Content-Type", "Retry-After", "Www-Authenticate"}

func viaHTTP(r *testAPI, st plainStep, body string) answer {
	req := httptest.NewRequest(http.MethodPost, st.path, strings.NewReader(body))
	if st.token != "" {
		req.Header.Set("Authorization", "Bearer "+st.token)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	a := answer{status: rec.Code, header: map[string]string{}, body: rec.Body.String()}
	for _, h := range answerHeaders {
		if v := rec.Header().Get(h); v != "" {
			a.header[h] = v
		}
	}
	return a
}

func viaPlain(r *testAPI, st plainStep, body string) (answer, bool) {
	return via(r.ServePlain, st, body)
}

// via is what handle answers st with body, or false when it declines.
func via(handle http1.Handler, st plainStep, body string) (answer, bool) {
	req := http1.Request{Path: []byte(st.path), Body: []byte(body), ContentLength: int64(len(body))}
	if st.token != "" {
		req.Authorization = []byte("Bearer " + st.token)
	}
	var resp http1.Response
	if !handle(context.Background(), &req, &resp) {
		return answer{}, false
	}
	a := answer{status: resp.Status, header: map[string]string{}, body: string(resp.Body)}
	for _, line := range strings.Split(strings.TrimSuffix(string(resp.Header), "\r\n"), "\r\n") {
		name, value, _ := strings.Cut(line, ": ")
		a.header[name] = value
	}
	return a, true
}

var leaseInAnswer = regexp.MustCompile(`"lease":"([^"]+)"`)

// TestServePlainAnswersAsServeHTTP sends the same calls to twin routers,
// one through ServePlain and one through ServeHTTP: every answer (status,
// headers, body) is the same, admissions, refusals, settles and every
// kind of error included; the calls ServePlain declines change nothing
// (the twins go on answering alike once both have served them through
// ServeHTTP). ServeQuick, on a node without a cluster (every key decided
// at once), answers the same, and declines a batch holding a complete too.
func TestServePlainAnswersAsServeHTTP(t *testing.T) {
	for _, quick := range []bool{false, true} {
		t.Run(fmt.Sprintf("quick=%v", quick), func(t *testing.T) { servePlainAsServeHTTP(t, quick) })
	}
}

func servePlainAsServeHTTP(t *testing.T, quick bool) {
	clock := newFakeClock()
	s := setup{
		tenants: map[string]limiter.Limits{"": {Requests: 3, Tokens: 1000, Concurrency: 2, Window: time.Minute, LeaseTTL: time.Minute}},
		pools:   map[string]limiter.Limits{"pooled": {Requests: 100, Tokens: 100_000, Concurrency: 100, Window: time.Minute}},
		now:     clock.Now,
		secrets: [][]byte{[]byte("a cluster secret of 32 bytes....")},
		clients: map[string][]string{"tok-a": {"a", "b"}, "tok-all": {AnyTenant}},
	}
	plain, ref := twinRouter(t, s), twinRouter(t, s)
	acq := func(tenant string) string {
		return fmt.Sprintf(`{"tenant":%q,"model":"pooled","prompt_tokens":10,"max_tokens":20}`, tenant)
	}
	steps := []plainStep{
		{path: "/v1/acquire", token: "tok-a", body: acq("a")},
		{path: "/v1/renew", token: "tok-a", body: `{"tenant":"a","lease":"$LEASE"}`},
		{path: "/v1/complete", token: "tok-a", body: `{"tenant":"a","lease":"$LEASE","usage":{"prompt_tokens":10,"completion_tokens":5}}`},
		{path: "/v1/renew", token: "tok-a", body: `{"tenant":"a","lease":"$LEASE"}`}, // 404: settled
		{path: "/v1/acquire", token: "tok-a", body: `{"tenant":"a","prompt_tokens":10,"max_tokens":20,"wait_ms":5}`, declined: true},
		{path: "/v1/acquire", token: "tok-a", body: acq("a")},
		{path: "/v1/acquire", token: "tok-a", body: acq("a")}, // 429: 3 rpm, Retry-After
		{path: "/v1/acquire", token: "tok-a", body: acq("c")}, // 403
		{path: "/v1/acquire", body: acq("a")},                 // 401
		{path: "/v1/acquire", token: "nope", body: acq("a")},  // 401
		{path: "/v1/acquire", token: "tok-all", body: `{"tenant":"d","prompt_tokens":-1}`},
		{path: "/v1/acquire", token: "tok-all", body: `{"tenant":"d","prompt_tokens":1,"colour":"red"}`, declined: true},
		{path: "/v1/acquire", token: "tok-all", body: `{"tenant":"d"} x`, declined: true},
		{path: "/v1/renew", token: "tok-all", body: `{"tenant":"d","lease":"forged","usage":{"prompt_tokens":1}}`},
		{path: "/v1/complete", token: "tok-all", body: `{"tenant":"d","lease":"Zm9yZ2Vk"}`},
		{path: "/v1/batch", token: "tok-all", body: `{"calls":[` + strings.TrimSuffix(`{"op":"acquire",`+acq("b")[1:], "") +
			`,{"op":"complete","tenant":"b","lease":"$LEASE"},{"op":"dance"},{"op":"acquire","tenant":"x","prompt_tokens":-5}]}`, notQuick: true},
		{path: "/v1/batch", token: "tok-a", body: `{"calls":[{"op":"acquire","tenant":"c","prompt_tokens":1}]}`}, // 403 in its slot
		{path: "/v1/batch", token: "tok-all", body: `{"calls":[{"op":"acquire","tenant":"e","prompt_tokens":1,"wait_ms":9}]}`, declined: true},
		{path: "/v1/batch", token: "tok-all", body: `{"calls":[` + strings.Repeat(`{"op":"renew"},`, maxBatchCalls) + `{"op":"renew"}]}`, notQuick: true},
		{path: "/v1/batch", token: "tok-all", body: `{"calls":[{"op":"acquire",` + acq("f")[1:] + `,{"op":"acquire",` + acq("f")[1:] + `]}`},
		{path: "/v1/tenants/a", token: "tok-a", declined: true},
		{path: "/v1/acquire", token: "tok-a", body: acq("b")},
		{path: "/v1/acquire", token: "tok-a", body: acq("b")},
	}
	lease := ""
	handle, declined := plain.ServePlain, func(st plainStep) bool { return st.declined }
	if quick {
		handle, declined = plain.ServeQuick, func(st plainStep) bool { return st.declined || st.notQuick }
	}
	for i, st := range steps {
		body := strings.ReplaceAll(st.body, "$LEASE", lease)
		got, taken := via(handle, st, body)
		if taken == declined(st) {
			t.Fatalf("step %d %s %s: taken = %v, want %v", i, st.path, body, taken, !declined(st))
		}
		if !taken {
			got = viaHTTP(plain, st, body)
		}
		want := viaHTTP(ref, st, body)
		if got.status != want.status || got.body != want.body || fmt.Sprint(got.header) != fmt.Sprint(want.header) {
			t.Fatalf("step %d %s %s:\nplain %d %v %s\nHTTP  %d %v %s", i, st.path, body,
				got.status, got.header, got.body, want.status, want.header, want.body)
		}
		if m := leaseInAnswer.FindStringSubmatch(want.body); m != nil {
			lease = m[1]
		}
		clock.Advance(time.Second)
	}
}

// TestServePlainDeclinesUntouched: a request ServePlain declines leaves no
// trace: the tenant's window is as it was.
func TestServePlainDeclinesUntouched(t *testing.T) {
	s := setup{tenants: map[string]limiter.Limits{"": {Requests: 5, Tokens: 1000, Concurrency: 5, Window: time.Minute}}, now: newFakeClock().Now}
	r := twinRouter(t, s)
	for _, body := range []string{
		`{"tenant":"a","prompt_tokens":1,"wait_ms":1}`,
		`{"tenant":"a","prompt_tokens":1,"extra":1}`,
		`{"tenant":"a","prompt_tokens":1}{}`,
		`not json`,
	} {
		if _, taken := viaPlain(r, plainStep{path: "/v1/acquire"}, body); taken {
			t.Fatalf("%s: taken", body)
		}
	}
	for _, path := range []string{"/v1/acquire/", "/v1/tenants/a", "/healthz", "/admin/ring"} {
		if _, taken := viaPlain(r, plainStep{path: path, body: `{"tenant":"a","prompt_tokens":1}`}, `{"tenant":"a","prompt_tokens":1}`); taken {
			t.Fatalf("%s: taken", path)
		}
	}
	got := viaHTTP(r, plainStep{path: "/v1/acquire"}, `{"tenant":"a","prompt_tokens":1,"max_tokens":1}`)
	if !bytes.Contains([]byte(got.body), []byte(`"requests":{"limit":5,"remaining":4`)) {
		t.Fatalf("after the declined calls the first admission should leave 4 of 5: %s", got.body)
	}
}

// BenchmarkServePlainAcquire is one acquire through ServePlain, as
// internal/http1 calls it, over 10,000 tenants: the router's part of a
// decision's cost, without HTTP parsing or sockets (compare with
// BenchmarkHTTPAcquireComplete's net/http handler path).
func BenchmarkServePlainAcquire(b *testing.B) {
	r := benchRouter(b)
	bodies := make([][]byte, 10_000)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"tenant":"t%d","model":"gpt-4o-mini","prompt_tokens":100,"max_tokens":100}`, i)
	}
	benchServePlain(b, r, "/v1/acquire", bodies)
}

// BenchmarkServePlainAcquireNewKeys is BenchmarkServePlainAcquire with a
// tenant never seen before at every call: what a new key adds (its
// Budget, its fallback entry, its tables' growth, and the collector's
// share of them).
func BenchmarkServePlainAcquireNewKeys(b *testing.B) {
	r := benchRouter(b)
	b.ReportAllocs()
	var resp http1.Response
	req := http1.Request{Path: []byte("/v1/acquire")}
	for i := 0; b.Loop(); i++ {
		req.Body = fmt.Appendf(req.Body[:0], `{"tenant":"n%d","model":"gpt-4o-mini","prompt_tokens":100,"max_tokens":100}`, i)
		resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
		if !r.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
			b.Fatalf("%d %s", resp.Status, resp.Body)
		}
	}
}

// BenchmarkServePlainByKeys is an acquire and its complete through
// ServePlain over 100, 1,000 and 20,000 tenants, every one of them known
// (their windows and tables made before the clock starts): what the number
// of keys alone costs a decision, its state further from the processor's
// caches (bench-compare's flatness runs spread over 18 to 18,000 tenants).
func BenchmarkServePlainByKeys(b *testing.B) {
	for _, keys := range []int{100, 1000, 20_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			r := benchRouter(b)
			var resp http1.Response
			acquire := http1.Request{Path: []byte("/v1/acquire")}
			complete := http1.Request{Path: []byte("/v1/complete")}
			serve := func(req *http1.Request) {
				resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
				if !r.ServePlain(context.Background(), req, &resp) || resp.Status != http.StatusOK {
					b.Fatalf("%s: %d %s", req.Path, resp.Status, resp.Body)
				}
			}
			call := func(i int) {
				tenant := i % keys
				acquire.Body = fmt.Appendf(acquire.Body[:0], `{"tenant":"t%d","model":"gpt-4o-mini","prompt_tokens":100,"max_tokens":100}`, tenant)
				serve(&acquire)
				_, rest, _ := bytes.Cut(resp.Body, []byte(`"lease":"`))
				lease, _, _ := bytes.Cut(rest, []byte(`"`))
				complete.Body = fmt.Appendf(complete.Body[:0], `{"tenant":"t%d","lease":"%s"}`, tenant, lease)
				serve(&complete)
			}
			for i := range keys {
				call(i)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				call(i * 7919) // a prime: the tenants in a scattered order
			}
		})
	}
}

// BenchmarkServePlainSpread is bench-compare's flatness runs in process:
// 180,000 acquires, never completed, on a fresh router, spread over
// 18,000, 180 or 18 tenants (10, 1,000 and 10,000 requests a key), each
// new when first called. ns/decision is what a decision costs there,
// the keys' creation and the state they leave behind included.
func BenchmarkServePlainSpread(b *testing.B) {
	const total = 180_000
	for _, keys := range []int{18_000, 180, 18} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			bodies := make([][]byte, keys)
			for i := range bodies {
				bodies[i] = fmt.Appendf(nil, `{"tenant":"f%d","model":"gpt-4o-mini","prompt_tokens":100,"max_tokens":100}`, i)
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				r := benchRouter(b)
				b.StartTimer()
				var resp http1.Response
				req := http1.Request{Path: []byte("/v1/acquire")}
				for i := range total {
					req.Body = bodies[(i*7919)%keys] // a prime: the tenants in a scattered order
					resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
					if !r.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
						b.Fatalf("%d %s", resp.Status, resp.Body)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*total), "ns/decision")
		})
	}
}

// BenchmarkServePlainBatch is one /v1/batch of 22 acquires (what the
// batching client sends at 32 workers) through ServePlain over 1,000
// tenants; ns/op ÷ 22 is the router's part of a batched decision.
func BenchmarkServePlainBatch(b *testing.B) {
	r := benchRouter(b)
	const calls = 22
	bodies := make([][]byte, 1000)
	for i := range bodies {
		body := []byte(`{"calls":[`)
		for j := range calls {
			if j > 0 {
				body = append(body, ',')
			}
			body = fmt.Appendf(body, `{"op":"acquire","tenant":"t%d","prompt_tokens":100,"max_tokens":100}`, (i*calls+j)%1000)
		}
		bodies[i] = append(body, "]}"...)
	}
	benchServePlain(b, r, "/v1/batch", bodies)
}

// benchServePlain serves bodies in turn to path through r.ServePlain, as
// internal/http1 calls it, each answer a 200.
func benchServePlain(b *testing.B, r *testAPI, path string, bodies [][]byte) {
	b.ReportAllocs()
	var resp http1.Response
	req := http1.Request{Path: []byte(path)}
	for i := 0; b.Loop(); i++ {
		req.Body = bodies[i%len(bodies)]
		resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
		if !r.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
			b.Fatalf("%d %s", resp.Status, resp.Body)
		}
	}
}

// A decision on the fast path allocates what its answer needs (the lease
// token, the answer's JSON, the tenant's name) and no more. Among what it
// does not: the call to the node, which crosses the Cluster interface by
// value and stays on the stack (it used to escape: 184 B a decision), and
// the answer, which ServePlain writes from its own stack (it used to go
// through apiAnswer's interface: 235 B).
func TestPlainAcquireAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	r := benchRouter(t)
	var resp http1.Response
	req := http1.Request{Path: []byte("/v1/acquire"), Body: []byte(`{"tenant":"t1","prompt_tokens":100,"max_tokens":100}`)}
	n := testing.AllocsPerRun(1000, func() {
		resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
		if !r.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
			t.Fatalf("%d %s", resp.Status, resp.Body)
		}
	})
	if n > maxAcquireAllocs {
		t.Fatalf("%.1f allocations an acquire, want at most %d", n, maxAcquireAllocs)
	}
	t.Logf("%.2f allocations an acquire", n)
}

// maxAcquireAllocs bounds TestPlainAcquireAllocs.
const maxAcquireAllocs = 6

// The acquires of a batch decided on its own goroutine answer into one
// slice a batch (batchAnswer), not an allocation each: a batch of 22
// acquires allocates what each call's own answer needs (the lease token,
// its tenant's name, its wait budget...) and a few slices for the batch.
func TestPlainBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	r := benchRouter(t)
	const calls = 22
	body := []byte(`{"calls":[`)
	for j := range calls {
		if j > 0 {
			body = append(body, ',')
		}
		body = fmt.Appendf(body, `{"op":"acquire","tenant":"t%d","prompt_tokens":100,"max_tokens":100}`, j)
	}
	req := http1.Request{Path: []byte("/v1/batch"), Body: append(body, "]}"...)}
	var resp http1.Response
	n := testing.AllocsPerRun(200, func() {
		resp = http1.Response{Header: resp.Header[:0], Body: resp.Body[:0]}
		if !r.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusOK {
			t.Fatalf("%d %s", resp.Status, resp.Body)
		}
	})
	if n > maxBatchAllocs {
		t.Fatalf("%.1f allocations a batch of %d acquires, want at most %d", n, calls, maxBatchAllocs)
	}
	t.Logf("%.2f allocations a batch of %d acquires", n, calls)
}

// maxBatchAllocs bounds TestPlainBatchAllocs: 7 a call and a few a batch
// (169 when written; 191 with an answer allocated a call).
const maxBatchAllocs = 7*22 + 16
