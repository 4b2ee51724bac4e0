package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/client"
	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts one node with its router behind an httptest server, limits by
// tenant, wrapped by wrap (nil: none), and counts the HTTP requests it saw.
func serve(t testing.TB, limits map[string]limiter.Limits, wrap func(http.Handler) http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	r := newRouter(t, func(key string) limiter.Limits { return limits[key[len("t:"):]] })
	var h http.Handler = r
	if wrap != nil {
		h = wrap(r)
	}
	var count atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		count.Add(1)
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(hs.Close) // before newRouter's node closes
	return hs, &count
}

// newRouter is a router over a lone node of limits lim, closed when the
// test ends.
func newRouter(t testing.TB, lim func(string) limiter.Limits) *frontdoor.Door {
	t.Helper()
	n, err := node.New(node.Config{Name: "n1", LimitsFor: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r, err := frontdoor.New(n, frontdoor.Config{Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func newClient(t testing.TB, url string, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConcurrentAcquiresBatched: 200 goroutines acquiring at once for a
// tenant allowed 50 requests: exactly 50 admitted and 150 refused, in far
// fewer than 200 HTTP requests.
func TestConcurrentAcquiresBatched(t *testing.T) {
	hs, count := serve(t, map[string]limiter.Limits{"acme": {Requests: 50}}, nil)
	c := newClient(t, hs.URL, client.Config{})
	var allowed, refused atomic.Int64
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 200 {
		wg.Go(func() {
			<-gate
			d, err := c.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 10, MaxTokens: 10})
			switch {
			case err != nil:
				t.Error(err)
			case d.Allowed && d.Lease != "" && d.ReservedTokens == 20:
				allowed.Add(1)
			case !d.Allowed && d.Reason == "requests" && d.RetryAfter > 0 && d.Limits.Requests.Limit == 50:
				refused.Add(1)
			default:
				t.Errorf("decision %+v", d)
			}
		})
	}
	close(gate)
	wg.Wait()
	if allowed.Load() != 50 || refused.Load() != 150 {
		t.Fatalf("allowed %d refused %d, want exactly 50 and 150", allowed.Load(), refused.Load())
	}
	if n := count.Load(); n > 100 {
		t.Fatalf("the server saw %d HTTP requests for 200 calls, want at most 100", n)
	}
	t.Logf("200 calls in %d HTTP requests", count.Load())
}

// TestCompleteSettlesAndRenew: Complete with usage credits back what was
// reserved and not used; Renew keeps a live lease; both report a lease no
// longer held as ErrLeaseNotFound.
func TestCompleteSettlesAndRenew(t *testing.T) {
	hs, _ := serve(t, map[string]limiter.Limits{"acme": {Tokens: 1000}}, nil)
	c := newClient(t, hs.URL, client.Config{})
	ctx := context.Background()
	d, err := c.Acquire(ctx, client.AcquireRequest{Tenant: "acme", PromptTokens: 100, MaxTokens: 100})
	if err != nil || !d.Allowed || d.ReservedTokens != 200 {
		t.Fatalf("acquire: %+v %v", d, err)
	}
	if l, err := c.Status(ctx, "acme"); err != nil || l.Tokens.Remaining != 800 {
		t.Fatalf("status after acquire: %+v %v, want 800 tokens left", l, err)
	}
	if err := c.Renew(ctx, "acme", d.Lease); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := c.Complete(ctx, "acme", d.Lease, &client.Usage{PromptTokens: 100, CompletionTokens: 10}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if l, err := c.Status(ctx, "acme"); err != nil || l.Tokens.Remaining != 890 {
		t.Fatalf("status after complete: %+v %v, want 890 tokens left (90 credited back)", l, err)
	}
	if err := c.Complete(ctx, "acme", d.Lease, nil); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("completing twice: %v, want ErrLeaseNotFound", err)
	}
	if err := c.Renew(ctx, "acme", d.Lease); !errors.Is(err, client.ErrLeaseNotFound) {
		t.Fatalf("renewing a completed lease: %v, want ErrLeaseNotFound", err)
	}
	var apiErr *client.APIError
	if err := c.Complete(ctx, "acme", "garbage", nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Fatalf("a malformed lease: %v, want a 400 APIError", err)
	}
}

// failing503 answers the first n requests with a 503 and a retry-after of
// 5 ms, then passes them on.
func failing503(n int64) func(http.Handler) http.Handler {
	var seen atomic.Int64
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if seen.Add(1) <= n {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error":"busy","retry_after_ms":5}`))
				return
			}
			next.ServeHTTP(w, req)
		})
	}
}

// TestRetriesOn503: a 503 with a retry-after is sent again, up to Retries
// times.
func TestRetriesOn503(t *testing.T) {
	hs, count := serve(t, map[string]limiter.Limits{"acme": {Requests: 10}}, failing503(2))
	c := newClient(t, hs.URL, client.Config{Retries: 2})
	d, err := c.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1})
	if err != nil || !d.Allowed {
		t.Fatalf("acquire through two 503s: %+v %v", d, err)
	}
	if n := count.Load(); n != 3 {
		t.Fatalf("the server saw %d requests, want 3", n)
	}
	hs2, _ := serve(t, map[string]limiter.Limits{"acme": {Requests: 10}}, failing503(2))
	c2 := newClient(t, hs2.URL, client.Config{Retries: 1})
	var apiErr *client.APIError
	if _, err := c2.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1}); !errors.As(err, &apiErr) ||
		apiErr.Status != http.StatusServiceUnavailable || apiErr.RetryAfter != 5*time.Millisecond {
		t.Fatalf("two 503s with one retry: %v, want the 503 with its retry-after of 5ms", err)
	}
}

// unsentFailures fails its first n round trips before writing anything.
type unsentFailures struct {
	n    atomic.Int64
	next http.RoundTripper
}

func (u *unsentFailures) RoundTrip(req *http.Request) (*http.Response, error) {
	if u.n.Add(-1) >= 0 {
		return nil, errors.New("dial: connection refused")
	}
	return u.next.RoundTrip(req)
}

// TestRetriesUnsentRequests: a transport error before the request was
// written is retried; Retries -1 turns retrying off.
func TestRetriesUnsentRequests(t *testing.T) {
	hs, count := serve(t, map[string]limiter.Limits{"acme": {Requests: 10}}, nil)
	rt := &unsentFailures{next: hs.Client().Transport}
	rt.n.Store(2)
	c := newClient(t, hs.URL, client.Config{HTTPClient: &http.Client{Transport: rt}, RetryBackoff: time.Millisecond})
	if d, err := c.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1}); err != nil || !d.Allowed {
		t.Fatalf("acquire through two refused dials: %+v %v", d, err)
	}
	if n := count.Load(); n != 1 {
		t.Fatalf("the server saw %d requests, want 1", n)
	}
	rt.n.Store(1)
	c2 := newClient(t, hs.URL, client.Config{HTTPClient: &http.Client{Transport: rt}, Retries: -1})
	if _, err := c2.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1}); err == nil {
		t.Fatal("Retries -1: a refused dial succeeded")
	}
}

// TestRefusalRetriedOnlyOnRequest: a 429 is an answer, returned at once;
// with RetryRefused, Acquire waits its retry-after and asks again.
func TestRefusalRetriedOnlyOnRequest(t *testing.T) {
	hs, count := serve(t, map[string]limiter.Limits{"acme": {Requests: 1, Window: 500 * time.Millisecond}}, nil)
	c := newClient(t, hs.URL, client.Config{})
	ctx := context.Background()
	req := client.AcquireRequest{Tenant: "acme", PromptTokens: 1}
	if d, err := c.Acquire(ctx, req); err != nil || !d.Allowed {
		t.Fatalf("first acquire: %+v %v", d, err)
	}
	if d, err := c.Acquire(ctx, req); err != nil || d.Allowed || d.Reason != "requests" {
		t.Fatalf("second acquire: %+v %v, want a refusal", d, err)
	}
	if n := count.Load(); n != 2 {
		t.Fatalf("the server saw %d requests, want 2: a refusal is not retried", n)
	}
	patient := newClient(t, hs.URL, client.Config{RetryRefused: true})
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if d, err := patient.Acquire(tctx, req); err != nil || !d.Allowed {
		t.Fatalf("RetryRefused: %+v %v, want admitted once the window moved", d, err)
	}
	if n := count.Load(); n < 4 {
		t.Fatalf("the server saw %d requests, want at least 4: refused, then admitted", n)
	}
}

// TestContextCancel: a caller whose context ends gets its error at once;
// an admission won after it gave up is released, not held until its TTL.
func TestContextCancel(t *testing.T) {
	release := make(chan struct{})
	var completed atomic.Int64
	slow := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/v1/acquire" {
				<-release
			}
			next.ServeHTTP(w, req)
			if req.URL.Path == "/v1/complete" {
				completed.Add(1)
			}
		})
	}
	hs, _ := serve(t, map[string]limiter.Limits{"acme": {Concurrency: 1}}, slow)
	c := newClient(t, hs.URL, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Acquire(ctx, client.AcquireRequest{Tenant: "acme", PromptTokens: 1})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("acquire past its deadline: %v after %v, want DeadlineExceeded at once", err, time.Since(start))
	}
	close(release) // the abandoned acquire is admitted now; the client releases it
	deadline := time.Now().Add(3 * time.Second)
	for completed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned admission was never released")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if l, err := c.Status(context.Background(), "acme"); err != nil || l.Concurrency.Remaining != 1 || l.Concurrency.Limit != 1 {
		t.Fatalf("after the release: %+v %v, want the one slot free", l, err)
	}
}

// TestCloseWithPending: Close returns ErrClosed to calls in flight and
// queued, and to calls made after it; no goroutine outlives it (goleak).
func TestCloseWithPending(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int64
	stuck := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			arrived.Add(1)
			select {
			case <-release:
			case <-req.Context().Done():
			}
			next.ServeHTTP(w, req)
		})
	}
	hs, _ := serve(t, map[string]limiter.Limits{"acme": {Requests: 100}}, stuck)
	defer close(release)
	c, err := client.New(hs.URL, client.Config{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 10)
	for range 10 {
		go func() {
			_, err := c.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1})
			errs <- err
		}()
	}
	for arrived.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the other nine queue behind the one in flight
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := <-errs; !errors.Is(err, client.ErrClosed) {
			t.Fatalf("a call pending at Close: %v, want ErrClosed", err)
		}
	}
	if _, err := c.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1}); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("a call after Close: %v, want ErrClosed", err)
	}
}
