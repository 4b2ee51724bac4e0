package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

// TestLoadBatchClient: -client batch against a real node counts exactly
// (2 tenants allowed 30 requests each: 60 admitted and completed, 140
// refused, whoever answered them) in fewer HTTP requests than calls; under
// -announce it reports on stderr the calls and requests its client sent,
// as many as the node saw.
func TestLoadBatchClient(t *testing.T) {
	r := newRouter(t, limiter.Limits{Requests: 30})
	var requests, batches atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		requests.Add(1)
		if req.URL.Path == "/v1/batch" {
			batches.Add(1)
		}
		r.ServeHTTP(w, req)
	}))
	defer hs.Close()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"load", "-json", "-announce", "-targets", hs.URL, "-client", "batch",
		"-n", "200", "-c", "32", "-tenants", "2", "-d", "1m"}, &stdout, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	var res loadResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	want := loadResult{Requests: 200, Allowed: 60, Refused: 140, Completions: 60,
		Codes: map[string]int{"200": 60, "429": 140}, Route: "rr", Workers: 32}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	if got := requests.Load(); got >= 260 || batches.Load() == 0 {
		t.Fatalf("%d HTTP requests (%d batches) for 260 calls: want fewer, some batched", got, batches.Load())
	}
	report := fmt.Sprintf("tokenring load: batch client %s: 260 calls in %d requests", hs.URL, requests.Load())
	if !strings.Contains(stderr.String(), report) {
		t.Fatalf("stderr %q, want a line starting %q", stderr.String(), report)
	}
	t.Logf("260 calls in %d HTTP requests, %d of them batches", requests.Load(), batches.Load())
}

// TestLoadPrefillFillsEveryWindow: -prefill 20 over 3 tenants allowed 50
// requests a window each, against a real node, leaves each 30 for the run:
// exactly 90 of its 200 acquires are admitted. The prefill's leases are
// completed (the concurrency limit of 5 would refuse them otherwise), and a
// prefill the limits refuse is an error before the run.
func TestLoadPrefillFillsEveryWindow(t *testing.T) {
	hs := httptest.NewServer(newRouter(t, limiter.Limits{Requests: 50, Concurrency: 5}))
	defer hs.Close()
	res, err := runLoadCLI(t, "-targets", hs.URL, "-client", "raw", "-prefix", "p-", "-prefill", "20",
		"-n", "200", "-c", "4", "-tenants", "3", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 200, Allowed: 90, Refused: 110, Completions: 90,
		Codes: map[string]int{"200": 90, "429": 110}, Route: "rr", Workers: 4}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	// 3 × 20 more than the 150 left is a refusal: the run does not start.
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"load", "-targets", hs.URL, "-prefix", "q-", "-prefill", "51",
		"-tenants", "3", "-n", "10", "-d", "1m"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "refused") || stdout.Len() > 0 {
		t.Fatalf("a prefill over the limit: err %v, printed %q; want a refusal error and no result", err, stdout.String())
	}
}

// newRouter is a real node and its router, every tenant under l, closed
// when the test ends.
func newRouter(t *testing.T, l limiter.Limits) *frontdoor.Door {
	t.Helper()
	limits := func(string) limiter.Limits { return l }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r, err := frontdoor.New(n, frontdoor.Config{Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
