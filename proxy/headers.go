package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Rate-limit headers of the LLM proxy's answers. They describe one level
// of the request's chain: on an admitted request and on most refusals the
// tenant's own budget, the caller's quota; on a refusal by the model's
// pool, the pool's (its limit, what remains of it, when it resets), since
// that is the level that bound and the one whose reset the caller must
// wait for (boundLevel). A dimension without a limit (Limit 0) is left
// out: a pool with a token limit alone shows no requests headers.
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
// Anthropic's headers, written beside those on the answers to Anthropic's
// endpoint (anthropicRateLimitHeaders), as api.anthropic.com sends them:
//
//	anthropic-ratelimit-requests-limit: 60
//	anthropic-ratelimit-requests-remaining: 59
//	anthropic-ratelimit-requests-reset: 2026-12-04T10:16:05Z
//	anthropic-ratelimit-tokens-limit: 100000
//	anthropic-ratelimit-tokens-remaining: 95904
//	anthropic-ratelimit-tokens-reset: 2026-12-04T10:16:05Z
//
// The resets are RFC 3339 times in UTC, rounded up to the second. Anthropic
// limits input and output tokens apart too (anthropic-ratelimit-input-tokens-*,
// -output-tokens-*); tokenring's token limit counts both, and is the
// tokens-* headers alone.
//
// The tokens policy names its unit with qu="tokens" because the draft's
// default unit is "request"; "concurrent-requests" is a unit the draft
// registers. Concurrency has no window, so no w; its t is when the last slot
// in use expires unless renewed.

// The header names. Go canonicalises names on the wire ("X-Ratelimit-Limit-Requests");
// HTTP header names are case-insensitive.
const (
	hdrRetryAfterMS    = "retry-after-ms"
	hdrRefusedBy       = "x-tokenring-refused-by" // the level that refused (router.Side.Label), beside x-tokenring-reason
	hdrRateLimit       = "RateLimit"
	hdrRateLimitPolicy = "RateLimit-Policy"
	hdrReason          = "x-tokenring-reason"
	hdrWaitMS          = "x-tokenring-wait-ms"
	hdrPriority        = "x-tokenring-priority"
	hdrOpenAIPrefix    = "x-ratelimit-"
	hdrAnthropicPrefix = "anthropic-ratelimit-"
)

// rateLimitDims are the dimensions of the rate-limit headers, in order,
// with their header names canonicalised once (so that setting them skips
// net/http's canonicalisation): OpenAI's limit, remaining and reset names
// for the windowed two.
var rateLimitDims = [...]struct {
	name, unit string // the IETF policy's name and its qu ("": requests)
	windowed   bool
	openAI     [3]string // x-ratelimit-{limit,remaining,reset}-<name>, canonical
}{
	{name: "requests", windowed: true, openAI: openAINames("requests")},
	{name: "tokens", unit: "tokens", windowed: true, openAI: openAINames("tokens")},
	{name: "concurrency", unit: "concurrent-requests"},
}

// anthropicNames are the names of Anthropic's headers, canonical: limit,
// remaining and reset for requests, then for tokens.
var anthropicNames = [2][3]string{anthropicNamesOf("requests"), anthropicNamesOf("tokens")}

func anthropicNamesOf(dim string) [3]string {
	return [3]string{
		http.CanonicalHeaderKey(hdrAnthropicPrefix + dim + "-limit"),
		http.CanonicalHeaderKey(hdrAnthropicPrefix + dim + "-remaining"),
		http.CanonicalHeaderKey(hdrAnthropicPrefix + dim + "-reset"),
	}
}

var (
	canonRateLimit       = http.CanonicalHeaderKey(hdrRateLimit)
	canonRateLimitPolicy = http.CanonicalHeaderKey(hdrRateLimitPolicy)
)

func openAINames(dim string) [3]string {
	return [3]string{
		http.CanonicalHeaderKey(hdrOpenAIPrefix + "limit-" + dim),
		http.CanonicalHeaderKey(hdrOpenAIPrefix + "remaining-" + dim),
		http.CanonicalHeaderKey(hdrOpenAIPrefix + "reset-" + dim),
	}
}

// setRateLimitHeaders writes the OpenAI and IETF rate-limit headers for a
// tenant whose status is st, counted over window. The values are built in
// one buffer and share one backing string: a proxied call sets them all.
func setRateLimitHeaders(h http.Header, st limiter.Status, window time.Duration) {
	if window <= 0 {
		window = limiter.DefaultWindow
	}
	w := ceilSeconds(window)
	dims := [len(rateLimitDims)]limiter.DimStatus{st.Requests, st.Tokens, st.Concurrency}
	var buf [512]byte
	b := buf[:0] // every value, one after the other
	type value struct {
		name string // canonical
		end  int    // in b
	}
	var values [len(rateLimitDims)*3 + 2]value
	n := 0
	ended := func(name string) { values[n] = value{name, len(b)}; n++ }
	var scratch [256]byte
	policy, state := scratch[:0:128], scratch[128:128]
	for i, d := range rateLimitDims {
		s := dims[i]
		if s.Limit <= 0 {
			continue
		}
		if d.windowed {
			b = strconv.AppendInt(b, s.Limit, 10)
			ended(d.openAI[0])
			b = strconv.AppendInt(b, s.Remaining, 10)
			ended(d.openAI[1])
			b = append(b, openAIDuration(s.Reset)...)
			ended(d.openAI[2])
		}
		if len(policy) > 0 {
			policy, state = append(policy, ", "...), append(state, ", "...)
		}
		policy = strconv.AppendQuote(policy, d.name)
		policy = strconv.AppendInt(append(policy, ";q="...), s.Limit, 10)
		if d.unit != "" {
			policy = strconv.AppendQuote(append(policy, ";qu="...), d.unit)
		}
		if d.windowed {
			policy = strconv.AppendInt(append(policy, ";w="...), w, 10)
		}
		state = strconv.AppendQuote(state, d.name)
		state = strconv.AppendInt(append(state, ";r="...), s.Remaining, 10)
		state = strconv.AppendInt(append(state, ";t="...), ceilSeconds(s.Reset), 10)
	}
	if len(policy) == 0 {
		return
	}
	b = append(b, policy...)
	ended(canonRateLimitPolicy)
	b = append(b, state...)
	ended(canonRateLimit)
	all := string(b)
	slots := make([]string, n) // one backing array for every value's []string
	start := 0
	for i, v := range values[:n] {
		slots[i] = all[start:v.end]
		h[v.name] = slots[i : i+1 : i+1]
		start = v.end
	}
}

// anthropicRateLimitHeaders writes Anthropic's rate-limit headers for a
// level whose status is st at now.
func anthropicRateLimitHeaders(h http.Header, st limiter.Status, now time.Time) {
	for i, d := range [2]limiter.DimStatus{st.Requests, st.Tokens} {
		if d.Limit <= 0 {
			continue
		}
		reset := now.Add(d.Reset)
		if reset.Truncate(time.Second) != reset {
			reset = reset.Truncate(time.Second).Add(time.Second)
		}
		n := anthropicNames[i]
		h[n[0]] = []string{strconv.FormatInt(d.Limit, 10)}
		h[n[1]] = []string{strconv.FormatInt(d.Remaining, 10)}
		h[n[2]] = []string{reset.UTC().Format(time.RFC3339)}
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

// ceilMS is d in whole milliseconds, rounded up; 0 for d <= 0.
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// isRateLimitHeader reports whether an upstream's response header describes
// the upstream's own rate limits (the operator's account) in a name the
// proxy writes itself; those are dropped so the answer carries tokenring's
// limits only.
func isRateLimitHeader(name string) bool {
	n := strings.ToLower(name)
	return strings.HasPrefix(n, hdrOpenAIPrefix) || strings.HasPrefix(n, hdrAnthropicPrefix) || n == "ratelimit" || n == "ratelimit-policy"
}
