package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// heldServer is a fake node that answers every acquire, single or in a
// batch, with the lease "L-<tenant>", once gate is closed; arrivals gets
// the tenants of each request as it arrives, in its calls' order.
type heldServer struct {
	*httptest.Server
	gate     chan struct{}
	arrivals chan []string
}

func newHeldServer(t *testing.T) *heldServer {
	t.Helper()
	h := &heldServer{gate: make(chan struct{}), arrivals: make(chan []string, 100)}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

func (h *heldServer) serve(w http.ResponseWriter, req *http.Request) {
	type call struct {
		Op     string `json:"op"`
		Tenant string `json:"tenant"`
	}
	var in struct {
		Calls []call `json:"calls"`
	}
	var single call
	var err error
	if req.URL.Path == "/v1/batch" {
		err = json.NewDecoder(req.Body).Decode(&in)
	} else if err = json.NewDecoder(req.Body).Decode(&single); err == nil {
		in.Calls = []call{single}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var tenants, answers []string
	for _, c := range in.Calls {
		tenants = append(tenants, c.Tenant)
		answers = append(answers, fmt.Sprintf(`{"status":200,"body":{"allowed":true,"lease":"L-%s"}}`, c.Tenant))
	}
	h.arrivals <- tenants
	select {
	case <-h.gate:
	case <-req.Context().Done():
		return
	}
	if req.URL.Path == "/v1/batch" {
		fmt.Fprintf(w, `{"results":[%s]}`, strings.Join(answers, ","))
		return
	}
	fmt.Fprintf(w, `{"allowed":true,"lease":"L-%s"}`, single.Tenant)
}

// next is the tenants of the next request to arrive.
func (h *heldServer) next(t *testing.T) []string {
	t.Helper()
	select {
	case got := <-h.arrivals:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("no request arrived")
		return nil
	}
}

// acquires makes n pendings for the tenants prefix0..prefix(n-1).
func acquires(c *Client, prefix string, n int) []*pending {
	var out []*pending
	for i := range n {
		p := c.get()
		p.op, p.acq = opAcquire, acquireWire{Tenant: fmt.Sprintf("%s%d", prefix, i)}
		out = append(out, p)
	}
	return out
}

// pushAll queues ps at once, as calls made together while the senders are
// busy would be.
func pushAll(c *Client, ps []*pending) {
	c.queue.mu.Lock()
	c.queue.calls = append(c.queue.calls, ps...)
	c.queue.mu.Unlock()
	c.queue.signal()
}

func tenantsOf(ps []*pending) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.acq.Tenant)
	}
	return out
}

// checkAnswers: each call got its own slot's answer.
func checkAnswers(t *testing.T, ps []*pending) {
	t.Helper()
	for _, p := range ps {
		select {
		case res := <-p.done:
			if res.err != nil || res.decodeErr != nil || res.status != http.StatusOK || res.answer.Lease != "L-"+p.acq.Tenant {
				t.Errorf("%s: %+v, want its own answer L-%s", p.acq.Tenant, res, p.acq.Tenant)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", p.acq.Tenant)
		}
	}
}

// checkLanded waits until c counts no request in flight.
func checkLanded(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.queue.mu.Lock()
		flights, flying := c.queue.flights, c.queue.flying
		c.queue.mu.Unlock()
		if flights == 0 && flying == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("all answered, still %d requests of %d calls in flight", flights, flying)
		}
		time.Sleep(time.Millisecond)
	}
}

func newTestClient(t *testing.T, url string, cfg Config) *Client {
	t.Helper()
	c, err := New(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// With one request in flight at most: a call made while nothing is in
// flight goes at once, alone, to its single endpoint; the 10 calls made
// while it is in flight go together when it returns, in the order they
// were made, as requests of at most MaxBatch calls; each caller gets its
// own slot's answer.
func TestQueuedCallsGoTogetherWhenTheRequestInFlightReturns(t *testing.T) {
	for _, tc := range []struct {
		maxBatch int
		want     [][]string
	}{
		{0, [][]string{{"a0"}, {"b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9"}}},
		{4, [][]string{{"a0"}, {"b0", "b1", "b2", "b3"}, {"b4", "b5", "b6", "b7"}, {"b8", "b9"}}},
	} {
		t.Run(fmt.Sprintf("MaxBatch %d", tc.maxBatch), func(t *testing.T) {
			h := newHeldServer(t)
			c := newTestClient(t, h.URL, Config{MaxInFlight: 1, MaxBatch: tc.maxBatch})
			first := acquires(c, "a", 1)
			pushAll(c, first)
			if got := h.next(t); !slices.Equal(got, tc.want[0]) {
				t.Fatalf("first request: %q, want %q", got, tc.want[0])
			}
			rest := acquires(c, "b", 10)
			for _, p := range rest {
				c.queue.push(p)
			}
			close(h.gate)
			for i, want := range tc.want[1:] {
				if got := h.next(t); !slices.Equal(got, want) {
					t.Fatalf("request %d: %q, want %q", i+2, got, want)
				}
			}
			checkAnswers(t, append(first, rest...))
			checkLanded(t, c)
			if st := c.Stats(); st.Requests != int64(len(tc.want)) || st.Calls != 11 {
				t.Fatalf("stats %+v, want %d requests of 11 calls", st, len(tc.want))
			}
		})
	}
}

// With requests in flight, an idle sender waits until as many calls are
// queued as a request in flight carries on average: one call in flight,
// then 4 queued at once go (4 ≥ 1); with 5 calls in 2 requests in flight,
// 2 queued wait (2 < 2.5) and go with the third (3 ≥ 2.5), not alone.
func TestIdleSenderWaitsForABatchWhileRequestsAreInFlight(t *testing.T) {
	h := newHeldServer(t)
	c := newTestClient(t, h.URL, Config{MaxInFlight: 3})
	a := acquires(c, "a", 1)
	pushAll(c, a)
	if got := h.next(t); !slices.Equal(got, tenantsOf(a)) {
		t.Fatalf("first request %q, want %q", got, tenantsOf(a))
	}
	b := acquires(c, "b", 4)
	pushAll(c, b)
	if got := h.next(t); !slices.Equal(got, tenantsOf(b)) {
		t.Fatalf("second request %q, want %q", got, tenantsOf(b))
	}
	d := acquires(c, "d", 3)
	pushAll(c, d[:2])
	c.queue.push(d[2])
	if got := h.next(t); !slices.Equal(got, tenantsOf(d)) {
		t.Fatalf("third request %q, want %q: the first two went without the third", got, tenantsOf(d))
	}
	close(h.gate)
	checkAnswers(t, slices.Concat(a, b, d))
	checkLanded(t, c)
	if st := c.Stats(); st.Requests != 3 || st.Calls != 8 {
		t.Fatalf("stats %+v, want 3 requests of 8 calls", st)
	}
}

// The rule itself, exactly: take returns nothing while fewer calls wait
// than the requests in flight carry on average, everything (up to n,
// skipping abandoned calls) otherwise, and counts what it took in flight
// until landed.
func TestTakeRule(t *testing.T) {
	q := newQueue()
	c := &Client{}
	c.pendings.New = func() any { return &pending{done: make(chan result, 1)} }
	for _, p := range acquires(c, "x", 3) {
		q.push(p)
	}
	q.calls[1].abandon()
	if !q.idle() {
		t.Fatal("nothing taken yet, and the queue is not idle (a sender would not yield)")
	}
	if got := tenantsOf(q.take(nil, 10)); !slices.Equal(got, []string{"x0", "x2"}) {
		t.Fatalf("nothing in flight: took %q, want x0 x2 (x1 abandoned)", got)
	}
	if q.idle() {
		t.Fatal("a request in flight, and the queue is idle (a sender would yield)")
	}
	// In flight: 1 request of 2 calls.
	q.push(acquires(c, "y", 1)[0])
	if got := q.take(nil, 10); len(got) != 0 {
		t.Fatalf("1 queued, 2 in flight in 1 request: took %q, want none", tenantsOf(got))
	}
	q.push(acquires(c, "z", 1)[0])
	if got := tenantsOf(q.take(nil, 1)); !slices.Equal(got, []string{"y0"}) {
		t.Fatalf("2 queued, 2 in flight in 1 request, n 1: took %q, want y0", got)
	}
	// In flight: 2 requests of 3 calls; z0 waits.
	if got := q.take(nil, 10); len(got) != 0 || q.flights != 2 || q.flying != 3 {
		t.Fatalf("took %q with %d requests of %d calls in flight, want none with 2 of 3", tenantsOf(got), q.flights, q.flying)
	}
	q.landed(2)
	q.landed(1)
	if got := tenantsOf(q.take(nil, 10)); !slices.Equal(got, []string{"z0"}) || q.flights != 1 || q.flying != 1 {
		t.Fatalf("all landed: took %q (in flight %d, %d), want z0 (1, 1)", got, q.flights, q.flying)
	}
	if q.landed(1); !q.idle() {
		t.Fatal("every request landed, and the queue is not idle")
	}
}
