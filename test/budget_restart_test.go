package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// budgetConfig: gpt-4o's price, a month's $1.00 for every tenant, and a
// tenant whose $0.01 lasts five-second periods.
const budgetConfig = `
prices:
  gpt-4o: {input: "2.50", cached_input: "1.25", output: "10.00"}
limits:
  window: 10m
  default: {rpm: 100000, tpm: 1000000000, budget: {usd: "1.00", period: month}}
  tenants:
    short: {rpm: 100000, tpm: 1000000000, budget: {usd: "0.01", period: 5s}}
replication:
  interval: 100ms
`

// gpt4oCost is what a request of prompt and completion tokens costs at
// budgetConfig's gpt-4o price, in picodollars.
func gpt4oCost(prompt, completion int64) int64 { return prompt*2_500_000 + completion*10_000_000 }

// budgetStatus is a tenant's own budget as GET /v1/tenants/{t} reports it.
type budgetStatus struct {
	SpentUSD    string `json:"spent_usd"`
	HeldUSD     string `json:"held_usd"`
	PeriodStart string `json:"period_start"`
	ResetMS     int64  `json:"reset_ms"`
}

func tenantBudget(t *testing.T, client *http.Client, p *Proc, tenant string) budgetStatus {
	t.Helper()
	resp, err := client.Get(p.URL() + "/v1/tenants/" + tenant + "?model=gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct {
		Limits struct{ Budget *budgetStatus }
	}
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != http.StatusOK || st.Limits.Budget == nil {
		t.Fatalf("GET /v1/tenants/%s: %d %s", tenant, resp.StatusCode, body)
	}
	return *st.Limits.Budget
}

// spend runs one request of tenant through p: acquire, then settle with
// prompt and completion tokens; it reports whether it was admitted.
func spend(t *testing.T, client *http.Client, p *Proc, tenant string, prompt, completion int64) bool {
	t.Helper()
	code, a, err := Post(t.Context(), client, p.URL()+"/v1/acquire",
		fmt.Sprintf(`{"tenant":%q,"model":"gpt-4o","prompt_tokens":%d,"max_tokens":%d}`, tenant, prompt, completion))
	if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
		t.Fatalf("acquire %s: %d %v %v", tenant, code, a, err)
	}
	if a["allowed"] != true {
		if a["reason"] != "budget" {
			t.Fatalf("%s refused for %v, not its budget", tenant, a["reason"])
		}
		return false
	}
	code, out, err := Post(t.Context(), client, p.URL()+"/v1/complete", fmt.Sprintf(
		`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, tenant, a["lease"], prompt, completion))
	if err != nil || code != http.StatusOK || out["settled"] != true {
		t.Fatalf("complete %s: %d %v %v", tenant, code, out, err)
	}
	return true
}

// A month's budget through a restart of the whole cluster (every member
// SIGKILLed at once, then started again) with -redis: each tenant's spend
// comes back as the last replication round left it, exactly, and the
// budget still binds where it did. A budget without -redis is warned
// about at start.
func TestBudgetThroughWholeClusterRestart(t *testing.T) {
	needFull(t)
	url := startRedis(t)
	c := NewCluster(t, daemon, 3, budgetConfig, "-redis", url)
	client := newClient()
	defer client.CloseIdleConnections()
	const tenants = 10
	spent := make(map[string]int64)
	for i := range tenants { // $0.25 + i × $0.01 each, through every member
		tn := fmt.Sprintf("b-%d", i)
		for j := range 5 + i {
			if !spend(t, client, c.Procs[(i+j)%3], tn, 2000, 4500) { // $0.05 each
				t.Fatalf("%s refused at $%s", tn, limiter.USD(spent[tn]))
			}
			spent[tn] += gpt4oCost(2000, 4500)
		}
	}
	waitReplicated(t, c.Procs)
	for _, p := range c.Procs {
		c.Kill(p)
	}
	for _, p := range c.Procs {
		c.Restart(p)
	}
	c.WaitConverged(30 * time.Second)
	for i := range tenants {
		tn := fmt.Sprintf("b-%d", i)
		if b := tenantBudget(t, client, c.Procs[i%3], tn); b.SpentUSD != limiter.USD(spent[tn]) || b.HeldUSD != "0.00" {
			t.Errorf("%s after the restart: spent %s held %s, want %s", tn, b.SpentUSD, b.HeldUSD, limiter.USD(spent[tn]))
		}
		// What is left of $1.00 admits exactly that many more $0.05.
		more := 0
		for spend(t, client, c.Procs[(i+1)%3], tn, 2000, 4500) {
			more++
		}
		if want := int((1e12 - spent[tn]) / gpt4oCost(2000, 4500)); more != want {
			t.Errorf("%s: %d more admitted after the restart, want %d", tn, more, want)
		}
	}
	t.Run("warned without redis", func(t *testing.T) {
		one := NewCluster(t, daemon, 1, budgetConfig)
		if log := one.Procs[0].Log(); !strings.Contains(log, "budgets without -redis") {
			t.Errorf("no warning of budgets without -redis:\n%s", tail(log, 2000))
		}
	})
}

// A short custom period (5 s) in a real process: what was spent is
// forgotten at the boundary, once: the period_start moves by exactly one
// period, and what is spent after it stays counted until the next.
func TestBudgetPeriodResetsOnce(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 1, budgetConfig)
	client := newClient()
	defer client.CloseIdleConnections()
	p := c.Procs[0]
	for attempt := 0; ; attempt++ {
		before := tenantBudget(t, client, p, "short")
		if before.ResetMS < 2000 && attempt < 3 { // too near a boundary to spend and read within one period
			time.Sleep(time.Duration(before.ResetMS+50) * time.Millisecond)
			continue
		}
		if !spend(t, client, p, "short", 1000, 500) { // $0.0075 of $0.01
			t.Fatal("short refused in a new period")
		}
		if spend(t, client, p, "short", 1000, 500) {
			t.Fatal("short admitted past $0.01")
		}
		in := tenantBudget(t, client, p, "short")
		if in.SpentUSD != "0.0075" {
			t.Fatalf("spent %s, want 0.0075", in.SpentUSD)
		}
		time.Sleep(time.Duration(in.ResetMS+50) * time.Millisecond)
		after := tenantBudget(t, client, p, "short")
		p0, _ := time.Parse(time.RFC3339, in.PeriodStart)
		p1, _ := time.Parse(time.RFC3339, after.PeriodStart)
		if after.SpentUSD != "0.00" || p1.Sub(p0) != 5*time.Second {
			t.Fatalf("after the boundary: %+v (period %s → %s)", after, in.PeriodStart, after.PeriodStart)
		}
		if !spend(t, client, p, "short", 1000, 500) {
			t.Fatal("refused after the boundary")
		}
		if again := tenantBudget(t, client, p, "short"); again.SpentUSD != "0.0075" || again.PeriodStart != after.PeriodStart {
			t.Fatalf("within the new period: %+v, want 0.0075 spent since %s", again, after.PeriodStart)
		}
		return
	}
}
