package proxy_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/test/fakeupstream"
)

// budgetPrice is every model's price in the budget test: $2.50 a million
// prompt tokens, $1.25 cached, $3.75 written to the cache, $10 output.
var budgetPrice = limiter.Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 3_750_000, Output: 10_000_000}

// spentUSD reads acme's budget: what it spent and holds.
func (e *proxyEnv) spentUSD(t *testing.T) (spent, held string) {
	t.Helper()
	resp, err := e.client.Get(e.url + "/v1/tenants/acme")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Limits struct {
			Budget *struct {
				SpentUSD string `json:"spent_usd"`
				HeldUSD  string `json:"held_usd"`
			} `json:"budget"`
		} `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Limits.Budget == nil {
		t.Fatalf("acme's status: %v %+v", err, out)
	}
	return out.Limits.Budget.SpentUSD, out.Limits.Budget.HeldUSD
}

// TestProxySettlesCachedTokensIntoTheBudget: each provider's usage is
// charged to the tenant's budget at its exact cost, the cached prompt
// tokens at their price (OpenAI's prompt_tokens_details.cached_tokens and
// the Responses API's input_tokens_details, Anthropic's
// cache_read_input_tokens and cache_creation_input_tokens), streamed or not.
func TestProxySettlesCachedTokensIntoTheBudget(t *testing.T) {
	e := startProxy(t, proxyOpts{
		tenant: limiter.Limits{Requests: 100, Tokens: 1 << 40, Concurrency: 10, Spend: 1e12},
		price:  func(string) (limiter.Price, bool) { return budgetPrice, true },
	})
	var total int64
	for _, c := range []struct {
		name, path, body string
		reply            fakeupstream.UpstreamReply
	}{
		{"chat", "/v1/chat/completions", openAIBody(`,"max_tokens":100`),
			fakeupstream.UpstreamReply{PromptTokens: 1000, CachedTokens: 600, CompletionTokens: 50}},
		{"chat streamed", "/v1/chat/completions", openAIBody(`,"max_tokens":100,"stream":true,"stream_options":{"include_usage":true}`),
			fakeupstream.UpstreamReply{PromptTokens: 100, CachedTokens: 40, CompletionTokens: 5}},
		{"responses", "/v1/responses", responsesBody(`,"max_output_tokens":100`),
			fakeupstream.UpstreamReply{PromptTokens: 800, CachedTokens: 300, CompletionTokens: 20}},
		{"anthropic", "/v1/messages", claudeBody(""),
			fakeupstream.UpstreamReply{PromptTokens: 1200, CachedTokens: 500, CacheWriteTokens: 200, CompletionTokens: 30}},
	} {
		e.up.SetReply(c.reply)
		if a := e.post(t, c.path, clientKey, c.body); a.code != http.StatusOK {
			t.Fatalf("%s: %d %s", c.name, a.code, a.body)
		}
		total += budgetPrice.Cost(limiter.Usage{PromptTokens: c.reply.PromptTokens, CachedTokens: c.reply.CachedTokens,
			CacheWriteTokens: c.reply.CacheWriteTokens, CompletionTokens: c.reply.CompletionTokens})
		var spent, held string
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) { // a stream settles as it ends
			if spent, held = e.spentUSD(t); (held == "0.00" && spent == limiter.USD(total)) || time.Now().After(end) {
				break
			}
		}
		if held != "0.00" || spent != limiter.USD(total) {
			t.Fatalf("after %s: spent %s, held %s; want %s spent, nothing held", c.name, spent, held, limiter.USD(total))
		}
	}
}
