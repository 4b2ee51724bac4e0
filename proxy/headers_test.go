package proxy

import (
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// TestRateLimitHeadersAsFormattedOneByOne: the headers built in one buffer
// are, name for name and value for value, those formatted one h.Set at a
// time (the reference below, the code this replaced), for random statuses
// including unlimited dimensions, zero and huge values, and a header map
// that already holds other headers.
func TestRateLimitHeadersAsFormattedOneByOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dim := func() limiter.DimStatus {
		if rng.IntN(4) == 0 {
			return limiter.DimStatus{} // unlimited: left out
		}
		vals := []int64{0, 1, 59, 100_000, 1 << 40, rng.Int64N(1 << 62)}
		return limiter.DimStatus{
			Limit:     vals[rng.IntN(len(vals)-1)+1],
			Remaining: vals[rng.IntN(len(vals))],
			Reset:     time.Duration(rng.Int64N(int64(3 * time.Hour))),
		}
	}
	for i := range 5000 {
		st := limiter.Status{Requests: dim(), Tokens: dim(), Concurrency: dim()}
		window := time.Duration(rng.Int64N(int64(2*time.Hour))) - time.Minute
		got, want := http.Header{"Content-Type": {"application/json"}}, http.Header{"Content-Type": {"application/json"}}
		setRateLimitHeaders(got, st, window)
		setRateLimitHeadersRef(want, st, window)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d (%+v, window %v):\n got %v\nwant %v", i, st, window, got, want)
		}
	}
}

// BenchmarkRateLimitHeaders is the headers of one proxied call, all three
// dimensions limited.
func BenchmarkRateLimitHeaders(b *testing.B) {
	st := limiter.Status{
		Requests:    limiter.DimStatus{Limit: 600, Remaining: 599, Reset: 59001 * time.Millisecond},
		Tokens:      limiter.DimStatus{Limit: 1_000_000, Remaining: 995_904, Reset: 59001 * time.Millisecond},
		Concurrency: limiter.DimStatus{Limit: 10, Remaining: 9, Reset: 2 * time.Minute},
	}
	b.ReportAllocs()
	for b.Loop() {
		setRateLimitHeaders(make(http.Header, 16), st, time.Minute)
	}
}

// setRateLimitHeadersRef is setRateLimitHeaders as it was, one h.Set and
// one string at a time: the reference of the test above.
func setRateLimitHeadersRef(h http.Header, st limiter.Status, window time.Duration) {
	if window <= 0 {
		window = limiter.DefaultWindow
	}
	w := ceilSeconds(window)
	var policy, state []string
	for _, d := range []struct {
		name, unit string
		s          limiter.DimStatus
		windowed   bool
	}{
		{"requests", "", st.Requests, true},
		{"tokens", "tokens", st.Tokens, true},
		{"concurrency", "concurrent-requests", st.Concurrency, false},
	} {
		if d.s.Limit <= 0 {
			continue
		}
		if d.windowed {
			h.Set(hdrOpenAIPrefix+"limit-"+d.name, strconv.FormatInt(d.s.Limit, 10))
			h.Set(hdrOpenAIPrefix+"remaining-"+d.name, strconv.FormatInt(d.s.Remaining, 10))
			h.Set(hdrOpenAIPrefix+"reset-"+d.name, openAIDuration(d.s.Reset))
		}
		p := strconv.Quote(d.name) + ";q=" + strconv.FormatInt(d.s.Limit, 10)
		if d.unit != "" {
			p += ";qu=" + strconv.Quote(d.unit)
		}
		if d.windowed {
			p += ";w=" + strconv.FormatInt(w, 10)
		}
		policy = append(policy, p)
		state = append(state, strconv.Quote(d.name)+";r="+strconv.FormatInt(d.s.Remaining, 10)+";t="+strconv.FormatInt(ceilSeconds(d.s.Reset), 10))
	}
	if len(policy) > 0 {
		h.Set(hdrRateLimitPolicy, strings.Join(policy, ", "))
		h.Set(hdrRateLimit, strings.Join(state, ", "))
	}
}

// TestAnthropicRateLimitHeaders: Anthropic's headers are the limit, the
// remaining and the reset of requests and tokens, each reset an RFC 3339
// time in UTC rounded up to the second; an unlimited dimension and
// concurrency are left out.
func TestAnthropicRateLimitHeaders(t *testing.T) {
	now := time.Date(2026, 12, 4, 11, 15, 5, 500_000_000, time.FixedZone("CET", 3600))
	h := http.Header{}
	anthropicRateLimitHeaders(h, limiter.Status{
		Requests:    limiter.DimStatus{Limit: 60, Remaining: 59, Reset: 59200 * time.Millisecond},
		Tokens:      limiter.DimStatus{Limit: 100_000, Remaining: 0, Reset: 1500 * time.Millisecond},
		Concurrency: limiter.DimStatus{Limit: 4, Remaining: 3},
	}, now)
	want := http.Header{
		"Anthropic-Ratelimit-Requests-Limit":     {"60"},
		"Anthropic-Ratelimit-Requests-Remaining": {"59"},
		"Anthropic-Ratelimit-Requests-Reset":     {"2026-12-04T10:16:05Z"},
		"Anthropic-Ratelimit-Tokens-Limit":       {"100000"},
		"Anthropic-Ratelimit-Tokens-Remaining":   {"0"},
		"Anthropic-Ratelimit-Tokens-Reset":       {"2026-12-04T10:15:07Z"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %v\nwant %v", h, want)
	}
	h = http.Header{}
	anthropicRateLimitHeaders(h, limiter.Status{Tokens: limiter.DimStatus{Limit: 10, Remaining: 10}}, now.Truncate(time.Second))
	if len(h) != 3 || h.Get("anthropic-ratelimit-tokens-reset") != "2026-12-04T10:15:05Z" {
		t.Errorf("tokens alone, nothing to reset: %v", h)
	}
}
