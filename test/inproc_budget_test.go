package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// budgetPrices are three models' prices, picodollars per token
// (micro-dollars per million tokens).
var budgetPrices = map[string]limiter.Price{
	"gpt-4o":        {Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 2_500_000, Output: 10_000_000},
	"gpt-4o-mini":   {Input: 150_000, CachedInput: 75_000, CacheWrite: 150_000, Output: 600_000},
	"claude-sonnet": {Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000},
}

// picoUSD parses a USD amount the API writes (limiter.USD) back into
// picodollars, exactly.
func picoUSD(t testing.TB, s string) int64 {
	whole, frac, _ := strings.Cut(s, ".")
	frac += strings.Repeat("0", 12-len(frac))
	w, err1 := strconv.ParseInt(whole, 10, 64)
	f, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil || len(frac) != 12 {
		t.Fatalf("not a USD amount: %q", s)
	}
	return w*1e12 + f
}

// budgetLevel is one level of GET /v1/tenants/{t} with its budget.
type budgetLevel struct {
	Level  string
	Limits struct {
		Budget *struct {
			LimitUSD     string `json:"limit_usd"`
			SpentUSD     string `json:"spent_usd"`
			HeldUSD      string `json:"held_usd"`
			RemainingUSD string `json:"remaining_usd"`
		}
	}
}

// budgetLevels reads tenant's levels through url.
func budgetLevels(client *http.Client, url, tenant string) ([]budgetLevel, error) {
	resp, err := client.Get(url + "/v1/tenants/" + tenant)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct{ Levels []budgetLevel }
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != http.StatusOK || len(st.Levels) != 2 {
		return nil, fmt.Errorf("GET /v1/tenants/%s: %d %s", tenant, resp.StatusCode, body)
	}
	return st.Levels, nil
}

// TestInProcBudgetIsExact: five tenants with a $0.30 budget each under a
// team with $1.00, all in reservation max_tokens, on three members with
// the shipped defaults. 500 requests at once, through every member, for
// three models of different prices and prompts and completions of every
// size, cached or not: while they run, no level's spent plus held ever
// passes its budget, by a picodollar; once every lease is settled or has
// expired (one admitted request in ten is abandoned), nothing is held and
// each level's spend is exactly the real costs of its settled requests
// plus the reservations of its expired ones.
func TestInProcBudgetIsExact(t *testing.T) {
	noLeaks(t)
	const tenants, requests = 5, 500
	const teamBudget, tenantBudget = int64(1e12), int64(3e11)
	const ttl = 3 * time.Second
	limits := func(key string) limiter.Limits {
		l := limiter.Limits{Window: time.Minute, LeaseTTL: ttl, Reserve: limiter.ReserveMaxTokens, Spend: tenantBudget}
		if key == router.GroupKey("eng") {
			l.Spend = teamBudget
		}
		return l
	}
	chain := func(string, string) router.Chain {
		return router.Chain{Groups: [router.MaxGroups]string{"eng"}, NGroups: 1}
	}
	price := func(model string) (limiter.Price, bool) { p, ok := budgetPrices[model]; return p, ok }
	c := NewInProc(t, 3, limits, WithChain(chain), WithPrices(price), WithGossip(steadyGossip))
	client := inProcClient(t)

	var mu sync.Mutex
	charged := make(map[string]int64) // tenant → what its requests were charged: real costs, expired holds
	var admitted, refusedForBudget, abandoned atomic.Int64
	var refusedBy sync.Map // level → true
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 9))
			tenant := fmt.Sprintf("acme-%d", i%tenants)
			model := []string{"gpt-4o", "gpt-4o-mini", "claude-sonnet"}[rng.IntN(3)]
			prompt, maxTokens := 50+rng.Int64N(3000), 1+rng.Int64N(1500)
			url := c.URL(i % 3)
			<-start
			code, a, err := Post(context.Background(), client, url+"/v1/acquire",
				fmt.Sprintf(`{"tenant":%q,"model":%q,"prompt_tokens":%d,"max_tokens":%d}`, tenant, model, prompt, maxTokens))
			switch {
			case err != nil:
				t.Errorf("acquire: %v", err)
				return
			case code == http.StatusTooManyRequests:
				if a["reason"] == "budget" {
					refusedForBudget.Add(1)
					refusedBy.Store(strings.HasPrefix(a["refused_by"].(string), "group:"), true)
				} else {
					t.Errorf("refused for %v, not the budget: %v", a["reason"], a)
				}
				return
			case code != http.StatusOK || a["allowed"] != true:
				t.Errorf("acquire: %d %v", code, a)
				return
			}
			admitted.Add(1)
			p := budgetPrices[model]
			if i%10 == 0 { // abandoned: its lease expires, and what it held is spent
				abandoned.Add(1)
				mu.Lock()
				charged[tenant] += prompt*max(p.Input, p.CachedInput, p.CacheWrite) + maxTokens*p.Output
				mu.Unlock()
				return
			}
			time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
			u := limiter.Usage{PromptTokens: prompt, CompletionTokens: rng.Int64N(maxTokens + 1)}
			if model == "claude-sonnet" {
				u.CachedTokens = rng.Int64N(prompt + 1)
				u.CacheWriteTokens = rng.Int64N(prompt - u.CachedTokens + 1)
			} else if rng.IntN(2) == 0 {
				u.CachedTokens = rng.Int64N(prompt + 1)
			}
			code, out, err := Post(context.Background(), client, c.URL((i+1)%3)+"/v1/complete", fmt.Sprintf(
				`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"cached_tokens":%d,"cache_write_tokens":%d}}`,
				tenant, a["lease"], u.PromptTokens, u.CompletionTokens, u.CachedTokens, u.CacheWriteTokens))
			if err != nil || code != http.StatusOK || out["settled"] != true {
				t.Errorf("complete: %d %v %v", code, out, err)
				return
			}
			mu.Lock()
			charged[tenant] += p.Cost(u)
			mu.Unlock()
		})
	}
	// The watches: every level's spent + held, read from its owner through
	// every member, never passes its budget.
	var watched atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	for w := range 3 {
		watch.Go(func() { watchBudgets(t, client, c.URL(w), tenants, []int64{tenantBudget, teamBudget}, stop, &watched) })
	}
	close(start)
	wg.Wait()
	close(stop)
	watch.Wait()
	if t.Failed() {
		return
	}
	_, byGroup := refusedBy.Load(true)
	_, byTenant := refusedBy.Load(false)
	if admitted.Load() == 0 || !byGroup || !byTenant || watched.Load() < 9 {
		t.Fatalf("%d admitted, %d refused for a budget (by the team: %v, by a tenant: %v), %d watches: the run did not reach both budgets",
			admitted.Load(), refusedForBudget.Load(), byGroup, byTenant, watched.Load())
	}
	checkSpentExactly(t, client, c, tenants, charged, ttl)
	t.Logf("%d admitted (%d abandoned), %d refused for a budget; %d watches", admitted.Load(), abandoned.Load(),
		refusedForBudget.Load(), watched.Load())
}

// watchBudgets reads the levels of every tenant through url until stop
// closes, and fails t if a level's spent + held passes its budget
// (limits: the tenants', the team's), counting the rounds in watched.
func watchBudgets(t *testing.T, client *http.Client, url string, tenants int, limits []int64, stop chan struct{}, watched *atomic.Int64) {
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		levels, err := budgetLevels(client, url, fmt.Sprintf("acme-%d", k%tenants))
		if err != nil {
			t.Error(err)
			return
		}
		for j, l := range levels {
			b := l.Limits.Budget
			limit := limits[j]
			if b == nil || picoUSD(t, b.LimitUSD) != limit {
				t.Errorf("%s: budget %+v, want a limit of %s", l.Level, b, limiter.USD(limit))
				return
			}
			if s := picoUSD(t, b.SpentUSD) + picoUSD(t, b.HeldUSD); s > limit {
				t.Errorf("%s: spent %s + held %s past its budget %s", l.Level, b.SpentUSD, b.HeldUSD, b.LimitUSD)
			}
		}
		watched.Add(1)
	}
}

// checkSpentExactly waits until the abandoned leases have expired and
// nothing is held, and fails t unless each tenant's spend is what was
// charged to it, and the team's the sum, exactly.
func checkSpentExactly(t *testing.T, client *http.Client, c *InProc, tenants int, charged map[string]int64, ttl time.Duration) {
	var team int64
	for _, v := range charged {
		team += v
	}
	deadline := time.Now().Add(ttl + 10*time.Second)
	for k := 0; k < tenants; k++ {
		tenant := fmt.Sprintf("acme-%d", k)
		for {
			levels, err := budgetLevels(client, c.URL(k%3), tenant)
			if err != nil {
				t.Fatal(err)
			}
			tb, gb := levels[0].Limits.Budget, levels[1].Limits.Budget
			if tb.HeldUSD == "0.00" && gb.HeldUSD == "0.00" {
				if got := picoUSD(t, tb.SpentUSD); got != charged[tenant] {
					t.Errorf("%s spent %s, its requests cost %s", tenant, tb.SpentUSD, limiter.USD(charged[tenant]))
				}
				if got := picoUSD(t, gb.SpentUSD); got != team {
					t.Errorf("team eng spent %s, its requests cost %s", gb.SpentUSD, limiter.USD(team))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still held after every lease's TTL: %+v %+v", tenant, *tb, *gb)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
