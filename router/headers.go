package router

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Rate-limit headers of the LLM proxy's answers. They describe the tenant's
// own budget, the caller's quota; a pool's limits are shared by every tenant
// and are not advertised (a pool refusal still says so in its error message
// and carries the pool's honest retry-after). A dimension without a limit
// (Limit 0) is left out.
//
// OpenAI's headers, as api.openai.com sends them:
//
//	x-ratelimit-limit-requests: 60
//	x-ratelimit-remaining-requests: 59
//	x-ratelimit-reset-requests: 1m0s
//	x-ratelimit-limit-tokens: 100000
//	x-ratelimit-remaining-tokens: 95904
//	x-ratelimit-reset-tokens: 59.001s
//
// The resets are Go duration strings rounded up to the millisecond ("20ms",
// "6s", "1m0s", "59.001s"): the format OpenAI uses, which its SDKs parse.
//
// The IETF fields of draft-ietf-httpapi-ratelimit-headers (-09 and later:
// policies named by sf-strings, w and t in whole seconds, rounded up):
//
//	RateLimit-Policy: "requests";q=60;w=60, "tokens";q=100000;qu="tokens";w=60, "concurrency";q=10;qu="concurrent-requests"
//	RateLimit: "requests";r=59;t=60, "tokens";r=95904;t=60, "concurrency";r=9;t=120
//
// The tokens policy names its unit with qu="tokens" because the draft's
// default unit is "request"; "concurrent-requests" is a unit the draft
// registers. Concurrency has no window, so no w; its t is when the last slot
// in use expires unless renewed.

// The header names. Go canonicalises names on the wire ("X-Ratelimit-Limit-Requests");
// HTTP header names are case-insensitive.
const (
	hdrRetryAfterMS    = "retry-after-ms"
	hdrRateLimit       = "RateLimit"
	hdrRateLimitPolicy = "RateLimit-Policy"
	hdrReason          = "x-tokenring-reason"
	hdrWaitMS          = "x-tokenring-wait-ms"
	hdrPriority        = "x-tokenring-priority"
	hdrOpenAIPrefix    = "x-ratelimit-"
)

// setRateLimitHeaders writes the OpenAI and IETF rate-limit headers for a
// tenant whose status is st, counted over window.
func setRateLimitHeaders(h http.Header, st limiter.Status, window time.Duration) {
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

// setRetryHeaders writes retry-after (whole seconds, rounded up, at least 1)
// and retry-after-ms (at least 1) for a refusal.
func setRetryHeaders(h http.Header, ms int64) {
	ms = max(1, ms)
	h.Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
	h.Set(hdrRetryAfterMS, strconv.FormatInt(ms, 10))
}

// openAIDuration formats d like OpenAI's x-ratelimit-reset-* values: a Go
// duration rounded up to the millisecond, "0s" for none.
func openAIDuration(d time.Duration) string {
	return (time.Duration(ceilMS(d)) * time.Millisecond).String()
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// isRateLimitHeader reports whether an upstream's response header describes
// the upstream's own rate limits in a name the proxy writes itself; those are
// dropped so the answer carries the tenant's limits only.
func isRateLimitHeader(name string) bool {
	n := strings.ToLower(name)
	return strings.HasPrefix(n, hdrOpenAIPrefix) || n == "ratelimit" || n == "ratelimit-policy"
}
