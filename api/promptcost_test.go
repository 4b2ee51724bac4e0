package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/prompt"
	"github.com/tokenring/tokenring/router"
)

// spyCounter is the router's prompt counter in these tests: it counts one
// token a call and records each call, so a test can assert that nothing
// was counted.
type spyCounter struct{ calls atomic.Int64 }

func (c *spyCounter) Text(string, string) int               { c.calls.Add(1); return 1 }
func (c *spyCounter) Messages(string, []prompt.Message) int { c.calls.Add(1); return 1 }

// costSetup is a node whose token "alpha-token" may act for alpha only,
// each tenant with 2 requests a minute.
func costSetup() setup {
	return setup{
		tenants: map[string]limiter.Limits{"": {Requests: 2, Tokens: 1 << 40, Concurrency: 10, Window: time.Minute, LeaseTTL: time.Minute}},
		now:     newFakeClock().Now,
		clients: map[string][]string{"alpha-token": {"alpha"}},
	}
}

// costRouter is a router of costSetup counting with spy, with more
// applied to its Config.
func costRouter(t *testing.T, spy *spyCounter, more ...func(*Config)) *testAPI {
	t.Helper()
	return twinRouter(t, costSetup(), append([]func(*Config){func(c *Config) { c.Counter = spy }}, more...)...)
}

// bigPrompt is an acquire body for tenant with a prompt of n bytes.
func bigPrompt(tenant string, n int) string {
	return fmt.Sprintf(`{"tenant":%q,"prompt":%q,"max_tokens":1}`, tenant, strings.Repeat("a", n))
}

// TestForbiddenPromptNotCounted: a token for alpha acquiring for beta with
// a 1 MiB prompt (and with messages) is answered 403 without the prompt
// counted, on its own endpoint and in a batch's slot.
func TestForbiddenPromptNotCounted(t *testing.T) {
	spy := &spyCounter{}
	r := costRouter(t, spy)
	st := plainStep{path: "/v1/acquire", token: "alpha-token"}
	body := bigPrompt("beta", 1<<20-64)
	if a := viaHTTP(r, st, body); a.status != 403 || !strings.Contains(a.body, `may not act for tenant \"beta\"`) {
		t.Fatalf("1 MiB prompt for a forbidden tenant: %d %s", a.status, a.body)
	}
	msgs := `{"tenant":"beta","messages":[{"role":"user","content":"hello"}]}`
	if a := viaHTTP(r, st, msgs); a.status != 403 {
		t.Fatalf("messages for a forbidden tenant: %d %s", a.status, a.body)
	}
	batch := `{"calls":[{"op":"acquire","tenant":"beta","prompt":"` + strings.Repeat("b", 512<<10) + `"}]}`
	a := viaHTTP(r, plainStep{path: "/v1/batch", token: "alpha-token"}, batch)
	if a.status != 200 || !strings.Contains(a.body, `"status":403`) {
		t.Fatalf("batch for a forbidden tenant: %d %.200s", a.status, a.body)
	}
	if n := spy.calls.Load(); n != 0 {
		t.Fatalf("the counter was called %d times for forbidden tenants, want 0", n)
	}
	// The seam is live: an allowed tenant's prompt is counted.
	if a := viaHTTP(r, st, bigPrompt("alpha", 10)); a.status != 200 || spy.calls.Load() != 1 {
		t.Fatalf("an allowed prompt: %d %s, %d counts, want 200 and 1", a.status, a.body, spy.calls.Load())
	}
}

// TestExhaustedTenantNotCounted: once alpha's request window is full, an
// acquire with a prompt is refused 429 (reason requests, the honest
// retry-after) without counting, on every path, and changes nothing.
func TestExhaustedTenantNotCounted(t *testing.T) {
	spy := &spyCounter{}
	r := costRouter(t, spy)
	st := plainStep{path: "/v1/acquire", token: "alpha-token"}
	for i := range 2 {
		if a := viaHTTP(r, st, `{"tenant":"alpha","prompt_tokens":5,"max_tokens":1}`); a.status != 200 {
			t.Fatalf("acquire %d: %d %s", i, a.status, a.body)
		}
	}
	want := viaHTTP(r, st, `{"tenant":"alpha","prompt_tokens":5,"max_tokens":1}`) // the refusal itself
	if want.status != 429 || !strings.Contains(want.body, `"reason":"requests"`) {
		t.Fatalf("third acquire: %d %s", want.status, want.body)
	}
	// (The fast paths leave a prompt and messages to encoding/json, hence
	// to ServeHTTP: TestServePlainDeclinesUntouched.)
	for _, body := range []string{bigPrompt("alpha", 200<<10), `{"tenant":"alpha","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`} {
		a := viaHTTP(r, st, body)
		if a.status != 429 || a.body != want.body || a.header["Retry-After"] != want.header["Retry-After"] {
			t.Fatalf("%d %s %v; want the refusal %s %v", a.status, a.body, a.header, want.body, want.header)
		}
	}
	b := viaHTTP(r, plainStep{path: "/v1/batch", token: "alpha-token"}, `{"calls":[{"op":"acquire","tenant":"alpha","prompt":"x"}]}`)
	if !strings.Contains(b.body, `"status":429`) {
		t.Fatalf("batch: %s", b.body)
	}
	if n := spy.calls.Load(); n != 0 {
		t.Fatalf("the counter was called %d times for an exhausted tenant, want 0", n)
	}
	st2 := viaHTTP(r, plainStep{path: "/v1/acquire", token: "alpha-token"}, `{"tenant":"alpha","prompt_tokens":5,"max_tokens":1}`)
	if st2.body != want.body {
		t.Fatalf("the probes changed the tenant's state: %s, want %s", st2.body, want.body)
	}
}

// TestPromptOverCap: a prompt (or messages) over max_prompt_bytes is a 413
// naming the cap, without counting; at the cap it is counted.
func TestPromptOverCap(t *testing.T) {
	spy := &spyCounter{}
	r := costRouter(t, spy, func(c *Config) { c.MaxPromptBytes = 1000 })
	st := plainStep{path: "/v1/acquire", token: "alpha-token"}
	for _, body := range []string{bigPrompt("alpha", 1001),
		`{"tenant":"alpha","messages":[{"role":"user","content":"` + strings.Repeat("m", 1000) + `"}]}`} {
		a := viaHTTP(r, st, body)
		var e errorBody
		_ = json.Unmarshal([]byte(a.body), &e)
		if a.status != 413 || !strings.Contains(e.Error, "cap of 1000 bytes") || !strings.Contains(e.Error, "prompt_tokens") {
			t.Fatalf("over the cap: %d %s", a.status, a.body)
		}
	}
	if n := spy.calls.Load(); n != 0 {
		t.Fatalf("counted %d prompts over the cap", n)
	}
	if a := viaHTTP(r, st, bigPrompt("alpha", 1000)); a.status != 200 || spy.calls.Load() != 1 {
		t.Fatalf("at the cap: %d %s, %d counts", a.status, a.body, spy.calls.Load())
	}
	def := costRouter(t, &spyCounter{})
	if a := viaHTTP(def, st, bigPrompt("alpha", router.DefaultMaxPromptBytes+1)); a.status != 413 || !strings.Contains(a.body, "cap of 262144 bytes") {
		t.Fatalf("over the default cap: %d %.300s", a.status, a.body)
	}
}
