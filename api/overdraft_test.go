package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/limiter"
)

// overdrawnTokens is the node's tokenring_overdrawn_tokens_total.
func overdrawnTokens(t *testing.T, s *server) int64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range s.node.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	return int64(promtest.Counter(t, reg, "tokenring_overdrawn_tokens_total"))
}

// tenantStatus is GET /v1/tenants/{t}: its limits, and each level's, as
// written.
type tenantStatus struct {
	Limits limitsJSON `json:"limits"`
	Levels []struct {
		Level  string     `json:"level"`
		Limits limitsJSON `json:"limits"`
	} `json:"levels"`
}

func (s *server) tenantStatus(t *testing.T, tenant string) (tenantStatus, string) {
	t.Helper()
	r, raw := s.send(t, http.MethodGet, "/v1/tenants/"+tenant, "")
	var st tenantStatus
	if err := json.Unmarshal(raw, &st); r.Code != http.StatusOK || err != nil || len(st.Levels) == 0 {
		t.Fatalf("GET /v1/tenants/%s: %d %s (%v)", tenant, r.Code, raw, err)
	}
	return st, string(raw)
}

// A tenant whose settles exceed their reservations is overdrawn: its
// status shows by how much (what the window counts − the limit) instead of
// a bare remaining 0, in the tenant's limits and its level, in the
// complete's answer and the next refusal; the node's
// tokenring_overdrawn_tokens_total counts exactly the tokens settled past
// the limit. A window within its limits writes no overdraft at all.
func TestOverdraftShown(t *testing.T) {
	clock := newFakeClock()
	s := start(t, setup{tenants: map[string]limiter.Limits{"": {Requests: 100, Tokens: 1000, Concurrency: 10, Window: time.Minute}}, now: clock.Now})
	var leases []string
	for range 3 { // no history: each reserves prompt + max_tokens = 300
		a := s.acquire(t, `{"tenant":"acme","prompt_tokens":100,"max_tokens":200}`)
		if !a.Allowed || a.ReservedTokens != 300 {
			t.Fatalf("acquire: %+v", a)
		}
		leases = append(leases, a.Lease)
	}
	if st, raw := s.tenantStatus(t, "acme"); st.Limits.Tokens.Remaining != 100 || strings.Contains(raw, "overdraft") {
		t.Fatalf("within the limit: %s", raw)
	}
	// Each uses 500 (the upstream ignored max_tokens, say): 900 → 1500.
	wantOver := []int64{100, 300, 500}
	for i, l := range leases {
		c := s.complete(t, "acme", l, `{"prompt_tokens":100,"completion_tokens":400}`)
		if !c.Settled || c.Limits.Tokens.Remaining != 0 || c.Limits.Tokens.Overdraft != wantOver[i] {
			t.Fatalf("complete %d: %+v, want tokens overdraft %d", i, c, wantOver[i])
		}
	}
	st, raw := s.tenantStatus(t, "acme")
	const counted, limit = 1500, 1000
	if got := st.Limits.Tokens; got.Remaining != 0 || got.Overdraft != counted-limit {
		t.Fatalf("status tokens %+v, want remaining 0 and overdraft %d: %s", got, counted-limit, raw)
	}
	if lv := st.Levels[0]; lv.Level != "tenant:acme" || lv.Limits.Tokens.Overdraft != counted-limit {
		t.Fatalf("level %+v", lv)
	}
	if !strings.Contains(raw, `"tokens":{"limit":1000,"remaining":0,"overdraft":500,"reset_ms":`) || strings.Count(raw, "overdraft") != 2 {
		t.Fatalf("status %s: the overdraft of tokens only, in the limits and the level", raw)
	}
	if got := overdrawnTokens(t, s); got != counted-limit {
		t.Fatalf("tokenring_overdrawn_tokens_total = %d, want %d", got, counted-limit)
	}
	if a := s.acquire(t, `{"tenant":"acme","prompt_tokens":1}`); a.Allowed || a.Reason != "tokens" || a.Limits.Tokens.Overdraft != counted-limit {
		t.Fatalf("an acquire while overdrawn: %+v", a)
	}
	// The window drains: the overdraft goes, and so does the field.
	clock.Advance(2 * time.Minute)
	if st, raw := s.tenantStatus(t, "acme"); st.Limits.Tokens.Remaining != limit || strings.Contains(raw, "overdraft") {
		t.Fatalf("after the window: %s", raw)
	}
}

// reservation: max_tokens against estimate, under load: a tenant whose
// history says completions are short gets many acquires at once, each of
// which then uses its whole max_tokens. Under estimate the settles take
// the window past its limit, which the status and the metric show; under
// max_tokens what the window counts never passes the limit, after any
// settle, and fewer acquires are admitted.
func TestReservationMaxTokensUnderLoad(t *testing.T) {
	const (
		limit       = 10_000
		concurrency = 50
		acquires    = 200
	)
	lim := limiter.Limits{Tokens: limit, Concurrency: concurrency, Window: time.Minute}
	whole := lim
	whole.Reserve = limiter.ReserveMaxTokens
	s := start(t, setup{tenants: map[string]limiter.Limits{"est": lim, "whole": whole}})

	run := func(tenant string) (admitted int, overdraft int64) {
		for range 20 { // history: completions of 10 tokens (estimate: 20 + 15)
			a := s.acquire(t, fmt.Sprintf(`{"tenant":%q,"prompt_tokens":20,"max_tokens":400}`, tenant))
			s.complete(t, tenant, a.Lease, `{"prompt_tokens":20,"completion_tokens":10}`)
		}
		allowed, _ := s.burst(t, acquires, func(int) string {
			return fmt.Sprintf(`{"tenant":%q,"prompt_tokens":20,"max_tokens":400}`, tenant)
		})
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, a := range allowed { // each uses its whole max_tokens, all at once too
			wg.Go(func() {
				c := s.complete(t, tenant, a.Lease, `{"prompt_tokens":20,"completion_tokens":400}`)
				mu.Lock()
				defer mu.Unlock()
				if !c.Settled {
					t.Errorf("%s: complete %+v", tenant, c)
				}
				if tenant == "whole" && c.Limits.Tokens.Overdraft != 0 {
					t.Errorf("max_tokens: a complete answered %+v: past the limit", c.Limits.Tokens)
				}
			})
		}
		wg.Wait()
		st, raw := s.tenantStatus(t, tenant)
		used := int64(limit) - st.Limits.Tokens.Remaining + st.Limits.Tokens.Overdraft
		t.Logf("%s: %d of %d admitted, %d tokens counted of %d: %s", tenant, len(allowed), acquires, used, limit, raw)
		return len(allowed), st.Limits.Tokens.Overdraft
	}

	before := overdrawnTokens(t, s)
	nWhole, overWhole := run("whole")
	if overWhole != 0 || overdrawnTokens(t, s) != before {
		t.Fatalf("max_tokens: overdraft %d, %d tokens overdrawn: usage passed the limit", overWhole, overdrawnTokens(t, s)-before)
	}
	nEst, overEst := run("est")
	if overEst <= 0 {
		t.Fatalf("estimate: no overdraft; the test shows no trade-off")
	}
	if got := overdrawnTokens(t, s) - before; got != overEst {
		t.Fatalf("tokenring_overdrawn_tokens_total grew by %d, the overdraft is %d", got, overEst)
	}
	if bound := int64(concurrency) * (400 - 15); overEst > bound {
		t.Fatalf("estimate overdrew %d, over concurrency × (max_tokens − estimate) = %d", overEst, bound)
	}
	if nEst <= nWhole {
		t.Fatalf("estimate admitted %d, max_tokens %d: estimate should admit more", nEst, nWhole)
	}
}
