package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/client"
	"github.com/tokenring/tokenring/limiter"
)

// rawServer is a node behind an unstarted httptest server that counts the
// connections it accepted and closed, configured by setup before it starts.
func rawServer(t *testing.T, mux func(http.Handler) http.Handler, setup func(*http.Server)) (hs *httptest.Server, opened, closed *atomic.Int64) {
	t.Helper()
	r := newRouter(t, func(string) limiter.Limits { return limiter.Limits{Requests: 1000} })
	opened, closed = &atomic.Int64{}, &atomic.Int64{}
	hs = httptest.NewUnstartedServer(mux(r))
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	if setup != nil {
		setup(hs.Config)
	}
	hs.Start()
	t.Cleanup(hs.Close) // before newRouter's node closes
	return hs, opened, closed
}

func same(h http.Handler) http.Handler { return h }

func acquireOK(t *testing.T, c *client.Client) {
	t.Helper()
	if d, err := c.Acquire(context.Background(), client.AcquireRequest{Tenant: "acme", PromptTokens: 1}); err != nil || !d.Allowed {
		t.Errorf("acquire: %+v %v", d, err)
	}
}

// A node that closes each connection after its answer (Connection: close):
// each call dials again, and none fails.
func TestRawConnectionClosedByEachAnswer(t *testing.T) {
	hs, opened, _ := rawServer(t, same, func(s *http.Server) { s.SetKeepAlivesEnabled(false) })
	c := newClient(t, hs.URL, client.Config{MaxInFlight: 1})
	for range 5 {
		acquireOK(t, c)
	}
	if n := opened.Load(); n != 5 {
		t.Fatalf("%d connections for 5 calls, want 5", n)
	}
}

// A connection the node closed while it was idle (its idle timeout) is
// not written to: the next call dials again, and does not fail.
func TestRawIdleConnectionClosedByTheNode(t *testing.T) {
	hs, opened, closed := rawServer(t, same, func(s *http.Server) { s.IdleTimeout = 20 * time.Millisecond })
	c := newClient(t, hs.URL, client.Config{MaxInFlight: 1})
	acquireOK(t, c)
	deadline := time.Now().Add(10 * time.Second)
	for closed.Load() == 0 { // the node's idle timeout closes it
		if time.Now().After(deadline) {
			t.Fatal("the node never closed the idle connection")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(60 * time.Millisecond) // idle past the client's check (rawIdleCheck)
	acquireOK(t, c)
	if n := opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: the closed one was not used again", n)
	}
}

// Calls and their batches go under the base URL's path; chunked answers
// (a batch's, over 2 KiB) leave the connection ready for the next one.
func TestRawBasePathAndChunkedAnswers(t *testing.T) {
	var paths atomic.Int64
	under := func(h http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/prefix/", http.StripPrefix("/prefix", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			paths.Add(1)
			h.ServeHTTP(w, req)
		})))
		return mux
	}
	hs, opened, _ := rawServer(t, under, nil)
	c := newClient(t, hs.URL+"/prefix/", client.Config{MaxInFlight: 1})
	for range 3 {
		done := make(chan struct{})
		for range 40 {
			go func() {
				defer func() { done <- struct{}{} }()
				acquireOK(t, c)
			}()
		}
		for range 40 {
			<-done
		}
	}
	if st := c.Stats(); st.Requests != paths.Load() || st.Calls != 120 || opened.Load() != 1 {
		t.Fatalf("stats %+v, %d requests under /prefix/, %d connections; want every request under it, 120 calls, 1 connection",
			st, paths.Load(), opened.Load())
	}
}
