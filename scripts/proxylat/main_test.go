package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestInterleaveAlternatesAndReports: every target gets warm + n requests,
// in turns that rotate each round, and the report gives each one's p50
// against the first's; a non-200 answer is an error.
func TestInterleaveAlternatesAndReports(t *testing.T) {
	var order []byte // requests are sequential: no lock needed
	var urls []string
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer k" || r.URL.Path != "/p" {
				http.Error(w, "bad", http.StatusBadRequest)
				return
			}
			order = append(order, byte('a'+i))
			time.Sleep(time.Duration(i) * 2 * time.Millisecond) // the second is 2 ms slower
		}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	lat, err := interleave(context.Background(), urls, "/p", "k", []byte("{}"), 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(order); got != "abbaabbaabbaab" {
		t.Fatalf("order %q, want 7 rounds of both, the first to go alternating", got)
	}
	if len(lat[0]) != 5 || len(lat[1]) != 5 {
		t.Fatalf("timed %d and %d requests, want 5 each", len(lat[0]), len(lat[1]))
	}
	var out strings.Builder
	report(&out, urls, lat)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "added p50 0 µs") || strings.HasSuffix(lines[1], "added p50 0 µs") {
		t.Fatalf("report:\n%s", out.String())
	}
	if _, err := interleave(context.Background(), urls[:1], "/nope", "k", nil, 0, 1); err == nil {
		t.Fatal("a non-200 answer was not an error")
	}
}
