package http1

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
)

// BenchmarkUpstreamRoundTrip: sequential POSTs of a chat-sized body to a
// net/http server answering 300 bytes, through the Client and through
// net/http's Transport, over loopback (the upstream side of the proxy).
// cpu-ns/op is the process's CPU time (user and system, the server's
// included) per call, steadier than ns/op on a shared machine. In one
// process net/http's Transport is the cheaper (its goroutines hand off to
// the server's within one scheduler: 79 allocations a call to 47, but
// about 40 µs of CPU to 55 on a 2-core machine); across processes, as the
// proxy runs, the Client takes about 15% off the node's CPU time per
// proxied call and 20-60 µs off its p50 (same-minute
// runs of tokenring load -system proxy against a node with each client),
// so this benchmark guards the allocations, not the speed:
//
//	go test -run '^$' -bench UpstreamRoundTrip -benchtime 20000x -count 5 ./internal/http1/
func BenchmarkUpstreamRoundTrip(b *testing.B) {
	answer := strings.Repeat("x", 300)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	body := `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"Say hello."}]}`
	for _, c := range []struct {
		name string
		rt   http.RoundTripper
	}{
		{"http1", &Client{}},
		{"nethttp", &http.Transport{MaxIdleConnsPerHost: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			defer c.rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != 300 {
					b.Fatal(n, err)
				}
				resp.Body.Close()
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
