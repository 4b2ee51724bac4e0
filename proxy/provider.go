package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// provider is an LLM API shape the proxy speaks: how its requests are
// parsed and counted, where they go, how its errors look and where its
// answers report their usage. The shared path (proxy, forward, relayBody,
// relayStream, the renewal and the settling) knows a provider only through
// these methods, so a new API shape is one value that implements them
// (openai.go and anthropic.go are the two there are). Implementations are
// stateless and safe for concurrent use; what a request needs to remember
// between its parse and its answer lives in its proxyCall.
type provider interface {
	// name names the provider in error messages ("openai").
	name() string
	// upstream is where the provider's requests go, from cfg, and the path
	// appended to its BaseURL.
	upstream(cfg Config) (up Upstream, path string)
	// parse validates a request body and fills c's model, maxTokens,
	// stream, body and stripUsage, and says how its prompt is counted
	// (setCount); it counts nothing: the proxy counts once the tenant is
	// known to be allowed (countProxyPrompt). An error is the client's
	// mistake: it is answered 400 with its text.
	parse(c *proxyCall, body []byte) error
	// authorize sets key, the configured upstream key, on the headers of a
	// forwarded request (the client's own credentials are already removed).
	authorize(h http.Header, key string)
	// fail writes e in the provider's error shape.
	fail(w http.ResponseWriter, e apiError)
	// readAnswer reads the usage, or failing that the content, of a whole
	// 2xx answer into s; false when raw is not the provider's JSON.
	readAnswer(s *usageSeen, raw []byte) bool
	// readEvent reads the data of one stream event into s. end is true for
	// the stream's terminal event: the lease is settled before it is
	// written. pass is false for an event the client must not receive (one
	// the proxy caused, see proxyCall.stripUsage).
	readEvent(c *proxyCall, s *usageSeen, data []byte) (end, pass bool)
}

// ownLimitHeaders is a provider whose API has rate-limit headers of its
// own, written beside OpenAI's and the IETF's, which every answer carries
// (headers.go). Optional: a provider without it writes those two alone.
type ownLimitHeaders interface {
	// limitHeaders writes the headers of a level whose status is st, at
	// now.
	limitHeaders(h http.Header, st limiter.Status, now time.Time)
}

// errKind is what went wrong, for a provider to name in its own error
// shape.
type errKind uint8

const (
	errInvalid      errKind = iota // a malformed request, a wrong method, a request cancelled by the client
	errAuth                        // no known API key
	errTooLarge                    // a request body over router.MaxBody
	errOverloaded                  // the key's owner is alive but slow
	errServer                      // the proxy, its configuration or the upstream failed
	errRateRequests                // refused on requests, concurrency or a full queue
	errRateTokens                  // refused on tokens
	errQuota                       // refused on a budget (OpenAI's insufficient_quota)
)

// apiError is an error answer before a provider shapes it.
type apiError struct {
	status int
	kind   errKind
	msg    string
}

// jsonContentType is the Content-Type of JSON bodies (shared: a header
// value is never modified in place).
var jsonContentType = []string{"application/json"}

// writeJSON writes v, a provider's error body, as the code answer.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func badRequest(format string, args ...any) apiError {
	return apiError{http.StatusBadRequest, errInvalid, fmt.Sprintf(format, args...)}
}

// proxyCall is a validated proxy request.
type proxyCall struct {
	p            provider
	tenant       string
	account      Account // the client key's upstream account (Config.Account)
	model        string
	promptTokens int64                    // counted locally (countProxyPrompt)
	count        func(router.Counter) int // counts the prompt; set by parse (setCount)
	promptBytes  int                      // the bytes count reads
	maxTokens    int64                    // the completion bound the client gave (× n); 0: none
	noCompletion bool                     // the answer has no completion (embeddings): the prompt alone is reserved
	stream       bool                     // the client asked for a stream
	stripUsage   bool                     // the proxy asked the upstream for usage in the stream; the provider drops it from what the client receives
	body         []byte                   // what to forward
}

// chatRequest is what every provider's request has in common; a provider's
// request type embeds it.
type chatRequest struct {
	Model     string           `json:"model"`
	Messages  []prompt.Message `json:"messages"`
	MaxTokens *int64           `json:"max_tokens"`
	Stream    bool             `json:"stream"`
}

// decodeChat decodes body into in, a provider's request type that embeds a
// chatRequest, common, and checks the common fields but max_tokens (see
// setMaxTokens). Fields it does not know are the upstream's business.
func decodeChat(body []byte, in any, common *chatRequest) error {
	if err := json.Unmarshal(body, in); err != nil {
		return fmt.Errorf("invalid JSON body: %v", err)
	}
	return checkChat(common)
}

// checkChat checks the common fields of a decoded request but max_tokens.
func checkChat(common *chatRequest) error {
	if err := router.CheckName("model", common.Model, true); err != nil {
		return err
	}
	if len(common.Messages) == 0 {
		return errors.New("messages is required and must not be empty")
	}
	return nil
}

// setMaxTokens checks the completion bound the client sent as the field
// name, if it sent one, and records it in c.
func (c *proxyCall) setMaxTokens(name string, mt *int64) error {
	if mt == nil {
		return nil
	}
	if err := router.CheckCount(name, *mt); err != nil {
		return err
	}
	c.maxTokens = *mt
	return nil
}

// setCount records how c's prompt is counted: f, reading n bytes of it.
func (c *proxyCall) setCount(n int, f func(router.Counter) int) { c.promptBytes, c.count = n, f }

// countProxyPrompt sets c's promptTokens: its prompt counted with the
// router's Counter, or, without one or when the prompt is over
// maxPromptBytes (a proxy's caller cannot send its own count), estimated at
// one token per three bytes of the body (prompt's own fallback: too much
// rather than too little; the upstream's usage settles it).
func (s *Server) countProxyPrompt(c *proxyCall) {
	if s.counter == nil || c.count == nil || c.promptBytes > s.maxPromptBytes {
		c.promptTokens = int64(len(c.body)+2) / 3
		return
	}
	c.promptTokens = int64(c.count(s.counter))
}

// textCounter counts completion text of model with k, or, without one,
// estimates one token per three bytes.
func textCounter(k router.Counter, model string) func(string) int64 {
	return func(t string) int64 {
		if t == "" {
			return 0
		}
		if k == nil {
			return int64(len(t)+2) / 3
		}
		return int64(k.Text(model, t))
	}
}

// maxTextBuf is the completion text buffered before it is counted.
const maxTextBuf = 64 << 10

// usageSeen is what an answer has shown of its usage so far. Providers fill
// it from answers and stream events; the exchange settles with usage.
type usageSeen struct {
	countText func(string) int64 // counts completion text; see textCounter
	prompt    int64              // reported prompt tokens; valid when promptSet
	promptSet bool
	// cached and cacheWrite are the reported parts of the prompt read
	// from and written to the provider's prompt cache: what a budget
	// charges at their prices (limiter.Usage).
	cached, cacheWrite int64
	completion         int64 // reported completion tokens; final when final
	final              bool
	text               strings.Builder // completion text not counted yet
	counted            int64           // tokens of the completion text counted so far
}

// addText records completion text, counting it in pieces so memory stays
// bounded (each cut can shift the count by about a token).
func (s *usageSeen) addText(t string) {
	s.text.WriteString(t)
	if s.text.Len() >= maxTextBuf {
		s.counted += s.countText(s.text.String())
		s.text.Reset()
	}
}

// usage is the usage to settle with: what was reported, else the counted
// prompt and the completion counted from the text seen (never less than a
// partial count the upstream reported).
func (s *usageSeen) usage(countedPrompt int64) limiter.Usage {
	u := limiter.Usage{PromptTokens: countedPrompt, CompletionTokens: s.completion}
	if s.promptSet {
		u.PromptTokens = s.prompt
		u.CachedTokens = min(max(s.cached, 0), u.PromptTokens)
		u.CacheWriteTokens = min(max(s.cacheWrite, 0), u.PromptTokens-u.CachedTokens)
	}
	if !s.final {
		u.CompletionTokens = max(s.completion, s.counted+s.countText(s.text.String()))
	}
	return u
}
