package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/internal/testclock"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock shared by the node and the router.
type fakeClock = testclock.Clock

func newFakeClock() *fakeClock { return testclock.New() }

// testAPI is a router and its decision API, served by net/http (Handler:
// the API's routes) and by the fast path (ServePlain, ServeQuick).
type testAPI struct {
	*Server
	http.Handler
	router *router.Router
}

// apiOf is the decision API of r, configured by c.
func apiOf(r *router.Router, c Config) *testAPI {
	s := New(r, c)
	mux := http.NewServeMux()
	s.Routes(mux)
	return &testAPI{Server: s, Handler: mux, router: r}
}

// newAPI is the decision API (configured by c) of a router deciding
// through cluster, configured by rc; the router closes when t ends.
func newAPI(t testing.TB, cluster router.Cluster, rc router.Config, c Config) *testAPI {
	t.Helper()
	r, err := router.New(cluster, rc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return apiOf(r, c)
}

// server is one node with its router's decision API behind an httptest
// server.
type server struct {
	*httptest.Server
	node  *node.Node
	api   *testAPI
	token string // sent as Authorization: Bearer by do, when set
}

type setup struct {
	tenants map[string]limiter.Limits // by tenant; "" is the default
	pools   map[string]limiter.Limits // by model (= pool name)
	now     func() time.Time
	secrets [][]byte            // Config.ClusterSecrets
	clients map[string][]string // Config.Clients
}

func (s setup) limits(key string) limiter.Limits {
	switch {
	case strings.HasPrefix(key, "p:"):
		return s.pools[key[2:]]
	case strings.HasPrefix(key, "t:"):
		if l, ok := s.tenants[key[2:]]; ok {
			return l
		}
	}
	return s.tenants[""]
}

func start(t *testing.T, s setup) *server {
	t.Helper()
	if s.now == nil {
		s.now = time.Now
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: s.limits, Now: s.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r := newAPI(t, n, router.Config{
		Limits: s.limits,
		PoolFor: func(model string) (string, bool) {
			_, ok := s.pools[model]
			return model, ok
		},
		Now: s.now,
	}, Config{Now: s.now, ClusterSecrets: s.secrets, Clients: s.clients})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	return &server{Server: hs, node: n, api: r}
}

// reply is a decoded answer of any endpoint.
type reply struct {
	Code           int
	Header         http.Header
	Allowed        bool       `json:"allowed"`
	Lease          string     `json:"lease"`
	ReservedTokens int64      `json:"reserved_tokens"`
	Reason         string     `json:"reason"`
	RetryAfterMS   int64      `json:"retry_after_ms"`
	Limits         limitsJSON `json:"limits"`
	Pool           *poolJSON  `json:"pool"`
	Settled        bool       `json:"settled"`
	Renewed        bool       `json:"renewed"`
	Fallback       bool       `json:"fallback"`
	Error          string     `json:"error"`
}

// send makes one request, with s.token as the bearer token when set, and
// returns the answer: its status and headers in a reply, and its body.
func (s *server) send(t testing.TB, method, path, body string) (reply, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return reply{Code: resp.StatusCode, Header: resp.Header}, raw
}

func (s *server) do(t testing.TB, method, path, body string) reply {
	t.Helper()
	r, raw := s.send(t, method, path, body)
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s %s: %d %q is not JSON: %v", method, path, r.Code, raw, err)
	}
	return r
}

func (s *server) acquire(t testing.TB, body string) reply {
	return s.do(t, http.MethodPost, "/v1/acquire", body)
}

func (s *server) complete(t testing.TB, tenant, lease string, usage string) reply {
	body := fmt.Sprintf(`{"tenant":%q,"lease":%q}`, tenant, lease)
	if usage != "" {
		body = fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":%s}`, tenant, lease, usage)
	}
	return s.do(t, http.MethodPost, "/v1/complete", body)
}

func (s *server) status(t testing.TB, tenant string) reply {
	return s.do(t, http.MethodGet, "/v1/tenants/"+tenant, "")
}

// burst fires n acquires with body at once and counts the answers.
func (s *server) burst(t *testing.T, n int, body func(i int) string) (allowed []reply, refused []reply) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			r := s.acquire(t, body(i))
			mu.Lock()
			defer mu.Unlock()
			if r.Allowed {
				allowed = append(allowed, r)
			} else {
				refused = append(refused, r)
			}
		}()
	}
	close(gate)
	wg.Wait()
	return allowed, refused
}

func checkRefused(t *testing.T, refused []reply, reason string) {
	t.Helper()
	for _, r := range refused {
		if r.Code != http.StatusTooManyRequests || r.Reason != reason || r.RetryAfterMS <= 0 || r.Header.Get("Retry-After") == "" {
			t.Fatalf("refusal = %d reason %q retry_after_ms %d Retry-After %q, want 429 %q with retry-after > 0",
				r.Code, r.Reason, r.RetryAfterMS, r.Header.Get("Retry-After"), reason)
		}
	}
}

func TestExactRequests(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Requests: 50}}})
	allowed, refused := s.burst(t, 200, func(int) string { return `{"tenant":"acme","prompt_tokens":10,"max_tokens":10}` })
	if len(allowed) != 50 || len(refused) != 150 {
		t.Fatalf("allowed %d refused %d, want exactly 50 and 150", len(allowed), len(refused))
	}
	checkRefused(t, refused, "requests")
	if st := s.status(t, "acme"); st.Limits.Requests.Remaining != 0 || st.Limits.Requests.Limit != 50 {
		t.Fatalf("status after burst: %+v", st.Limits.Requests)
	}
}

func TestExactTokens(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Tokens: 10_000}}})
	// Each reserves 100 prompt + 100 max_tokens = 200: 10,000/200 = 50 fit.
	allowed, refused := s.burst(t, 200, func(int) string { return `{"tenant":"acme","prompt_tokens":100,"max_tokens":100}` })
	if len(allowed) != 50 || len(refused) != 150 {
		t.Fatalf("allowed %d refused %d, want exactly 50 and 150", len(allowed), len(refused))
	}
	for _, a := range allowed {
		if a.ReservedTokens != 200 {
			t.Fatalf("reserved %d, want 200", a.ReservedTokens)
		}
	}
	checkRefused(t, refused, "tokens")
}

func TestExactConcurrency(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Concurrency: 10}}})
	allowed, refused := s.burst(t, 200, func(int) string { return `{"tenant":"acme","prompt_tokens":1}` })
	if len(allowed) != 10 || len(refused) != 190 {
		t.Fatalf("allowed %d refused %d, want exactly 10 and 190", len(allowed), len(refused))
	}
	checkRefused(t, refused, "concurrency")
	// complete frees exactly one slot
	if r := s.complete(t, "acme", allowed[0].Lease, ""); r.Code != 200 || !r.Settled {
		t.Fatalf("complete: %+v", r)
	}
	if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); !r.Allowed {
		t.Fatalf("acquire after complete refused: %+v", r)
	}
	if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); r.Allowed || r.Reason != "concurrency" {
		t.Fatalf("second acquire after one complete: %+v", r)
	}
	// complete is idempotent: a second one frees nothing more
	if r := s.complete(t, "acme", allowed[0].Lease, ""); r.Code != 200 || r.Settled {
		t.Fatalf("second complete: %+v", r)
	}
	if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); r.Allowed {
		t.Fatalf("a repeated complete freed a slot: %+v", r)
	}
}

func TestRenewKeepsSlotPastTTL(t *testing.T) {
	clock := newFakeClock()
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Concurrency: 1, LeaseTTL: 10 * time.Second}}, now: clock.Now})
	a := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
	if !a.Allowed {
		t.Fatalf("first acquire: %+v", a)
	}
	for range 3 { // 3 × 8s = 24s, well past the 10s TTL, renewed each time
		clock.Advance(8 * time.Second)
		if r := s.do(t, http.MethodPost, "/v1/renew", fmt.Sprintf(`{"tenant":"acme","lease":%q}`, a.Lease)); r.Code != 200 || !r.Renewed {
			t.Fatalf("renew: %+v", r)
		}
		if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); r.Allowed || r.Reason != "concurrency" {
			t.Fatalf("slot lost although renewed: %+v", r)
		}
	}
	// Without renew the slot comes back after the TTL.
	clock.Advance(10 * time.Second)
	if r := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); !r.Allowed {
		t.Fatalf("slot not reclaimed after its TTL: %+v", r)
	}
	if r := s.do(t, http.MethodPost, "/v1/renew", fmt.Sprintf(`{"tenant":"acme","lease":%q}`, a.Lease)); r.Code != http.StatusNotFound {
		t.Fatalf("renew of an expired lease: %+v", r)
	}
}

func TestSettleCreditsDifference(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Tokens: 1000}}})
	a := s.acquire(t, `{"tenant":"acme","prompt_tokens":100,"max_tokens":400}`)
	if !a.Allowed || a.ReservedTokens != 500 || a.Limits.Tokens.Remaining != 500 {
		t.Fatalf("acquire: %+v", a)
	}
	r := s.complete(t, "acme", a.Lease, `{"prompt_tokens":100,"completion_tokens":50}`)
	if !r.Settled || r.Limits.Tokens.Remaining != 850 {
		t.Fatalf("complete: settled %v remaining %d, want true and 1000-150=850", r.Settled, r.Limits.Tokens.Remaining)
	}
	if st := s.status(t, "acme"); st.Limits.Tokens.Remaining != 850 {
		t.Fatalf("status remaining %d, want 850", st.Limits.Tokens.Remaining)
	}
	// A second settle changes nothing.
	if r := s.complete(t, "acme", a.Lease, `{"prompt_tokens":100,"completion_tokens":900}`); r.Settled || r.Limits.Tokens.Remaining != 850 {
		t.Fatalf("repeated complete: %+v", r)
	}
	// A settle above the estimate debits the excess.
	b := s.acquire(t, `{"tenant":"acme","prompt_tokens":100,"max_tokens":100}`)
	if !b.Allowed {
		t.Fatalf("acquire: %+v", b)
	}
	if r := s.complete(t, "acme", b.Lease, `{"prompt_tokens":100,"completion_tokens":300}`); r.Limits.Tokens.Remaining != 850-400 {
		t.Fatalf("debit: remaining %d, want %d", r.Limits.Tokens.Remaining, 850-400)
	}
}

// waitQueued polls until n requests are queued at the node.
func waitQueued(t *testing.T, n *node.Node, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n.Waiting() != want {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want %d", n.Waiting(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitIsAdmittedWhenSlotFrees(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Concurrency: 1}}})
	a := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
	done := make(chan reply, 1)
	go func() { done <- s.acquire(t, `{"tenant":"acme","prompt_tokens":1,"wait_ms":10000}`) }()
	waitQueued(t, s.node, 1)
	select {
	case r := <-done:
		t.Fatalf("waiter answered before capacity freed: %+v", r)
	default:
	}
	s.complete(t, "acme", a.Lease, "")
	if r := <-done; !r.Allowed {
		t.Fatalf("waiter refused after the slot freed: %+v", r)
	}
}

// queuedBefore waits until n holds want queued requests, and fails at once
// if answered delivers first: the request was answered without queueing.
func queuedBefore[T any](t *testing.T, n *node.Node, want int, answered <-chan T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for n.Waiting() != want {
		select {
		case a := <-answered:
			t.Fatalf("answered without queueing (%d queued, want %d): %+v", n.Waiting(), want, a)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want %d", n.Waiting(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWaitDeadlineRefusesHonestly: a waiter whose wait_ms passes without
// room is queued until its deadline, not refused before it, and at the
// deadline refused with the dimension that blocked it and the exact
// retry-after; it is not admitted and leaves nothing queued.
//
// The clock is frozen, so only the test moves time, and the queue is woken
// synchronously at the times the test picks: the waiter is blocked on
// requests, so completing a lease frees a slot (which wakes the queue) but
// not the request counted in the window (so the waiter stays blocked).
func TestWaitDeadlineRefusesHonestly(t *testing.T) {
	clock := newFakeClock() // second-aligned: the window's buckets start at it
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Requests: 2}}, now: clock.Now})
	a := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
	b := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
	if !a.Allowed || !b.Allowed {
		t.Fatalf("first acquires: %+v %+v", a, b)
	}
	done := make(chan reply, 1)
	go func() { done <- s.acquire(t, `{"tenant":"acme","prompt_tokens":1,"wait_ms":1000}`) }()
	queuedBefore(t, s.node, 1, done)

	// 1ms before the deadline: a wake leaves the waiter queued.
	clock.Advance(999 * time.Millisecond)
	if r := s.complete(t, "acme", a.Lease, ""); !r.Settled {
		t.Fatalf("complete: %+v", r)
	}
	if n := s.node.Waiting(); n != 1 {
		t.Fatalf("woken 1ms before its deadline: %d queued, want the waiter still queued", n)
	}
	select {
	case r := <-done:
		t.Fatalf("answered 1ms before its deadline: %+v", r)
	default:
	}

	// At the deadline: the wake refuses it, and hands it its answer before
	// the complete returns.
	clock.Advance(time.Millisecond)
	if r := s.complete(t, "acme", b.Lease, ""); !r.Settled {
		t.Fatalf("complete: %+v", r)
	}
	if n := s.node.Waiting(); n != 0 {
		t.Fatalf("woken at its deadline: %d queued, want the waiter refused", n)
	}
	r := <-done
	// Both requests were counted in the bucket [0s, 1s) of a 60s window,
	// which counts until its end plus the window, 61s; it is now 1s.
	if r.Code != http.StatusTooManyRequests || r.Allowed || r.Lease != "" || r.Reason != "requests" ||
		r.RetryAfterMS != 60_000 || r.Header.Get("Retry-After") != "60" {
		t.Fatalf("at the deadline: %d allowed %v lease %q reason %q retry_after_ms %d Retry-After %q, want 429 requests 60000 60",
			r.Code, r.Allowed, r.Lease, r.Reason, r.RetryAfterMS, r.Header.Get("Retry-After"))
	}
	if st := s.status(t, "acme").Limits.Requests; st.Limit != 2 || st.Remaining != 0 {
		t.Fatalf("requests after the refusal: %+v, want the 2 admitted counted and the refused one not", st)
	}
}

func TestInteractiveBeforeBatch(t *testing.T) {
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Concurrency: 1}}})
	first := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`)
	order := make(chan string, 4)
	leases := make(map[string]string)
	var mu sync.Mutex
	enqueue := func(name, prio string, queued int) {
		go func() {
			r := s.acquire(t, fmt.Sprintf(`{"tenant":"acme","prompt_tokens":1,"priority":%q,"wait_ms":10000}`, prio))
			mu.Lock()
			leases[name] = r.Lease
			mu.Unlock()
			order <- name
		}()
		waitQueued(t, s.node, queued)
	}
	enqueue("batch1", "batch", 1)
	enqueue("batch2", "batch", 2)
	enqueue("interactive1", "interactive", 3)
	enqueue("interactive2", "interactive", 4)
	prev := first.Lease
	var got []string
	for range 4 {
		s.complete(t, "acme", prev, "")
		name := <-order
		got = append(got, name)
		mu.Lock()
		prev = leases[name]
		mu.Unlock()
	}
	want := []string{"interactive1", "interactive2", "batch1", "batch2"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grant order %v, want %v", got, want)
	}
}

func TestPoolLimitsHoldAcrossTenants(t *testing.T) {
	s := start(t, setup{
		tenants: map[string]limiter.Limits{"": {Requests: 100}},
		pools:   map[string]limiter.Limits{"gpt-4o-mini": {Requests: 30}},
	})
	tenants := []string{"a", "b", "c"}
	allowed, refused := s.burst(t, 90, func(i int) string {
		return fmt.Sprintf(`{"tenant":%q,"model":"gpt-4o-mini","prompt_tokens":1}`, tenants[i%3])
	})
	if len(allowed) != 30 || len(refused) != 60 {
		t.Fatalf("allowed %d refused %d, want exactly 30 and 60", len(allowed), len(refused))
	}
	checkRefused(t, refused, "requests")
	// Refused admissions were rolled back at the tenants: each tenant's
	// window holds only its admitted requests.
	perTenant := map[string]int64{}
	for _, a := range allowed {
		l, err := s.api.leases.open(a.Lease)
		if err != nil || len(l.Sides()) != 2 || l.Sides()[1].Key != router.PoolKey("gpt-4o-mini") {
			t.Fatalf("lease %+v %v", l, err)
		}
		perTenant[l.Tenant]++
	}
	var sum int64
	for _, tn := range tenants {
		st := s.status(t, tn)
		if used := st.Limits.Requests.Limit - st.Limits.Requests.Remaining; used != perTenant[tn] {
			t.Fatalf("tenant %s used %d, admitted %d", tn, used, perTenant[tn])
		}
		sum += perTenant[tn]
	}
	if sum != 30 {
		t.Fatalf("sum %d", sum)
	}
	// A model without a pool is limited by its tenant only.
	if r := s.acquire(t, `{"tenant":"a","model":"other","prompt_tokens":1}`); !r.Allowed {
		t.Fatalf("unpooled model refused: %+v", r)
	}
}

func TestBadInput(t *testing.T) {
	clock := newFakeClock() // frozen, so reset_ms compares exactly
	s := start(t, setup{tenants: map[string]limiter.Limits{"acme": {Requests: 5, Tokens: 1000, Concurrency: 5}}, now: clock.Now})
	good := s.acquire(t, `{"tenant":"acme","prompt_tokens":10,"max_tokens":10}`)
	if !good.Allowed {
		t.Fatal(good)
	}
	before := s.status(t, "acme").Limits
	huge := `{"tenant":"acme","prompt":"` + strings.Repeat("x", 1<<20) + `"}`
	cases := []struct {
		name, method, path, body string
		code                     int
	}{
		{"malformed json", "POST", "/v1/acquire", `{"tenant":`, 400},
		{"not an object", "POST", "/v1/acquire", `[1,2]`, 400},
		{"trailing data", "POST", "/v1/acquire", `{"tenant":"acme"} {}`, 400},
		{"missing tenant", "POST", "/v1/acquire", `{"prompt_tokens":10}`, 400},
		{"empty tenant", "POST", "/v1/acquire", `{"tenant":"","prompt_tokens":10}`, 400},
		{"control char tenant", "POST", "/v1/acquire", `{"tenant":"a\u0000b","prompt_tokens":10}`, 400},
		{"long tenant", "POST", "/v1/acquire", `{"tenant":"` + strings.Repeat("a", 300) + `"}`, 400},
		{"negative prompt_tokens", "POST", "/v1/acquire", `{"tenant":"acme","prompt_tokens":-1}`, 400},
		{"absurd prompt_tokens", "POST", "/v1/acquire", `{"tenant":"acme","prompt_tokens":1e15}`, 400},
		{"fractional prompt_tokens", "POST", "/v1/acquire", `{"tenant":"acme","prompt_tokens":1.5}`, 400},
		{"string prompt_tokens", "POST", "/v1/acquire", `{"tenant":"acme","prompt_tokens":"10"}`, 400},
		{"negative max_tokens", "POST", "/v1/acquire", `{"tenant":"acme","max_tokens":-5}`, 400},
		{"zero max_tokens", "POST", "/v1/acquire", `{"tenant":"acme","max_tokens":0}`, 400},
		{"absurd max_tokens", "POST", "/v1/acquire", `{"tenant":"acme","max_tokens":9999999999}`, 400},
		{"negative wait", "POST", "/v1/acquire", `{"tenant":"acme","wait_ms":-1}`, 400},
		{"absurd wait", "POST", "/v1/acquire", `{"tenant":"acme","wait_ms":86400000}`, 400},
		{"unknown priority", "POST", "/v1/acquire", `{"tenant":"acme","priority":"urgent"}`, 400},
		{"unknown field", "POST", "/v1/acquire", `{"tenant":"acme","rpm":5}`, 400},
		{"stray bracket after the object", "POST", "/v1/acquire", `{"tenant":"acme"}]0`, 400},
		{"second object", "POST", "/v1/acquire", `{"tenant":"acme"} {}`, 400},
		{"tenant of invalid UTF-8", "POST", "/v1/acquire", "{\"tenant\":\"ac\xffme\"}", 400},
		{"tenant with a lone surrogate", "POST", "/v1/acquire", `{"tenant":"ac\ud800me"}`, 400},
		{"tenant with U+FFFD", "POST", "/v1/acquire", `{"tenant":"ac\ufffdme"}`, 400},
		{"tenant path of invalid UTF-8", "GET", "/v1/tenants/ac%FFme", ``, 400},
		{"two prompt forms", "POST", "/v1/acquire", `{"tenant":"acme","prompt_tokens":1,"prompt":"hi"}`, 400},
		{"body over 1 MiB", "POST", "/v1/acquire", huge, 413},
		{"wrong method acquire", "GET", "/v1/acquire", ``, 405},
		{"wrong method complete", "PUT", "/v1/complete", `{}`, 405},
		{"wrong method tenants", "POST", "/v1/tenants/acme", `{}`, 405},
		{"complete without lease", "POST", "/v1/complete", `{"tenant":"acme"}`, 400},
		{"complete garbage lease", "POST", "/v1/complete", `{"tenant":"acme","lease":"!!!"}`, 400},
		{"complete other tenant's lease", "POST", "/v1/complete", fmt.Sprintf(`{"tenant":"evil","lease":%q}`, good.Lease), 400},
		{"complete negative usage", "POST", "/v1/complete", fmt.Sprintf(`{"tenant":"acme","lease":%q,"usage":{"prompt_tokens":-1,"completion_tokens":0}}`, good.Lease), 400},
		{"complete absurd usage", "POST", "/v1/complete", fmt.Sprintf(`{"tenant":"acme","lease":%q,"usage":{"prompt_tokens":1,"completion_tokens":1e12}}`, good.Lease), 400},
		{"renew with usage", "POST", "/v1/renew", fmt.Sprintf(`{"tenant":"acme","lease":%q,"usage":{}}`, good.Lease), 400},
		{"renew missing tenant", "POST", "/v1/renew", fmt.Sprintf(`{"lease":%q}`, good.Lease), 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := s.do(t, c.method, c.path, c.body)
			if r.Code != c.code || r.Error == "" {
				t.Fatalf("%s %s: got %d %+v, want %d with an error text", c.method, c.path, r.Code, r.Error, c.code)
			}
		})
	}
	if after := s.status(t, "acme").Limits; after != before {
		t.Fatalf("bad input changed state: before %+v after %+v", before, after)
	}
	// The good lease still settles: the bad completes touched nothing.
	if r := s.complete(t, "acme", good.Lease, ""); !r.Settled {
		t.Fatalf("good lease no longer settles: %+v", r)
	}
}

func FuzzAcquireBody(f *testing.F) {
	f.Add([]byte(`{"tenant":"acme","prompt_tokens":10,"max_tokens":5,"priority":"batch","wait_ms":0}`))
	f.Add([]byte(`{"tenant":"acme","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"tenant":1}`))
	r := &Server{}
	f.Fuzz(func(t *testing.T, b []byte) {
		var in acquireRequest
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&in) != nil {
			return
		}
		a, err := r.parseAcquire(&in)
		if err != nil {
			return
		}
		if a.Tenant == "" || a.Req.PromptTokens < 0 || a.Req.MaxTokens < 0 || a.Req.Wait < 0 || a.Req.Wait > router.MaxWait {
			t.Fatalf("accepted invalid input %q: %+v", b, a)
		}
	})
}
