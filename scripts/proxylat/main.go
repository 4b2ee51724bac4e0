// Command proxylat times sequential chat completions sent in turn to
// several base URLs, request by request: the first is usually the
// upstream itself, the others proxies in front of it (two builds of
// tokenringd, say). The added latency of a proxy is then the difference
// of two medians taken over the same seconds, so a shared host that slows
// down weighs on every target alike, where separate runs would not.
//
//	go run ./scripts/proxylat -n 3000 -targets http://127.0.0.1:9000,http://127.0.0.1:8080
//
// It prints, for each target, its p50 and p99 and its p50 minus the
// first target's (µs).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	n := flag.Int("n", 3000, "timed requests to each target (after 200 untimed ones each)")
	targets := flag.String("targets", "", "comma-separated base `URLs`; the first is the baseline")
	path := flag.String("path", "/v1/chat/completions", "request path")
	key := flag.String("api-key", "sk-bench", "sent as Authorization: Bearer")
	body := flag.String("body", `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"Say hello."}]}`, "request body")
	flag.Parse()
	urls := strings.Split(*targets, ",")
	if *targets == "" || *n < 1 {
		fmt.Fprintln(os.Stderr, "proxylat: -targets and a positive -n are required")
		os.Exit(2)
	}
	lat, err := interleave(context.Background(), urls, *path, *key, []byte(*body), 200, *n)
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxylat:", err)
		os.Exit(1)
	}
	report(os.Stdout, urls, lat)
}

// interleave sends warm untimed and then n timed requests to each of urls,
// one at a time, rotating the order every round, and returns each target's
// latencies.
func interleave(ctx context.Context, urls []string, path, key string, body []byte, warm, n int) ([][]time.Duration, error) {
	clients := make([]*http.Client, len(urls)) // a kept-alive connection each
	for i := range clients {
		clients[i] = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		defer clients[i].CloseIdleConnections()
	}
	lat := make([][]time.Duration, len(urls))
	for round := range warm + n {
		for j := range urls {
			i := (j + round) % len(urls)
			d, err := post(ctx, clients[i], urls[i]+path, key, body)
			if err != nil {
				return nil, err
			}
			if round >= warm {
				lat[i] = append(lat[i], d)
			}
		}
	}
	return lat, nil
}

// post sends one request and reads its whole answer, which must be a 200.
func post(ctx context.Context, c *http.Client, url, key string, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return time.Since(start), nil
}

// quantile is the q-quantile of sorted (nearest rank below).
func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[int(q*float64(len(sorted)-1))]
}

// report prints each target's p50 and p99 and its p50 minus the first's.
func report(w io.Writer, urls []string, lat [][]time.Duration) {
	p50 := make([]time.Duration, len(urls))
	for i := range urls {
		slices.Sort(lat[i])
		p50[i] = quantile(lat[i], 0.5)
	}
	for i, u := range urls {
		fmt.Fprintf(w, "%s\tp50 %d µs\tp99 %d µs\tadded p50 %d µs\n", u,
			p50[i].Microseconds(), quantile(lat[i], 0.99).Microseconds(), (p50[i] - p50[0]).Microseconds())
	}
}
