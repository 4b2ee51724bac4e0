package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// An overdraft seen from another member: a tenant and its team, owned by
// one member and asked through another (so every call is a run forwarded
// over the peer protocol, and every answer crosses it). The tenant
// estimates and its requests use more than it reserved: the complete's
// answers, GET /v1/tenants and /admin/limits show its overdraft as its
// owner counts it; the team, in max_tokens, reserves the whole bound
// and shows none; the owner's tokenring_overdrawn_tokens_total counts
// exactly the tokens past the limit, the asking member's none.
func TestInProcOverdraftAcrossMembers(t *testing.T) {
	noLeaks(t)
	limits := func(key string) limiter.Limits {
		l := limiter.Limits{Tokens: 1000, Concurrency: 10, Window: time.Minute, LeaseTTL: 2 * time.Minute}
		if strings.HasPrefix(key, "g:") {
			l.Tokens, l.Reserve = 1_000_000, limiter.ReserveMaxTokens
		}
		return l
	}
	var team string
	chain := func(string, string) router.Chain {
		return router.Chain{Groups: [router.MaxGroups]string{team}, NGroups: 1}
	}
	c := NewInProc(t, 3, limits, WithChain(chain), WithHotKeyRate(-1), WithGossip(steadyGossip))
	client := inProcClient(t)
	rg := c.Member(0).Node.Ring()
	var tenant, owner string
	for k := 0; owner == ""; k++ { // a tenant and a team owned by one member other than member 0
		to, _ := rg.Owner(router.TenantKey(fmt.Sprintf("acme-%d", k)))
		for j := 0; j < 50 && to.Name != c.Member(0).Name; j++ {
			if gowner, _ := rg.Owner(router.GroupKey(fmt.Sprintf("team-%d", j))); gowner.Name == to.Name {
				tenant, team, owner = fmt.Sprintf("acme-%d", k), fmt.Sprintf("team-%d", j), to.Name
				break
			}
		}
	}
	via := c.URL(0)
	post := func(path, body string) map[string]any {
		t.Helper()
		code, out, err := Post(context.Background(), client, via+path, body)
		if err != nil || code != http.StatusOK {
			t.Fatalf("POST %s %s: %d %v %v", path, body, code, out, err)
		}
		return out
	}
	overdraft := func(limits any) any { return limits.(map[string]any)["tokens"].(map[string]any)["overdraft"] }
	var leases []string
	for range 3 { // no history: prompt + max_tokens, 300 at each level
		a := post("/v1/acquire", fmt.Sprintf(`{"tenant":%q,"prompt_tokens":100,"max_tokens":200}`, tenant))
		if a["allowed"] != true || a["reserved_tokens"] != 300.0 || a["owner"] != owner {
			t.Fatalf("acquire: %v, want 300 reserved at %s", a, owner)
		}
		leases = append(leases, a["lease"].(string))
	}
	for i, l := range leases { // each uses 500: 900 → 1500 of 1000
		a := post("/v1/complete", fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":100,"completion_tokens":400}}`, tenant, l))
		if want := []float64{100, 300, 500}[i]; a["settled"] != true || overdraft(a["limits"]) != want {
			t.Fatalf("complete %d through a member that owns nothing of it: %v, want an overdraft of %v", i, a, want)
		}
	}
	get := func(path string) []byte {
		t.Helper()
		resp, err := client.Get(via + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return body
	}
	var st struct {
		Limits map[string]any
		Levels []struct {
			Level, Owner string
			Limits       map[string]any
		}
	}
	body := get("/v1/tenants/" + tenant)
	if err := json.Unmarshal(body, &st); err != nil || len(st.Levels) != 2 {
		t.Fatalf("/v1/tenants: %s", body)
	}
	if overdraft(st.Limits) != 500.0 || overdraft(st.Levels[0].Limits) != 500.0 || st.Levels[0].Owner != owner ||
		overdraft(st.Levels[1].Limits) != nil || st.Levels[1].Level != "group:"+team {
		t.Fatalf("/v1/tenants: %s, want the tenant's tokens overdrawn by 500 and the team's not", body)
	}
	var adm struct {
		Levels []struct{ Overdraft, Remaining struct{ TPM int64 } }
	}
	body = get("/admin/limits?tenant=" + tenant)
	if err := json.Unmarshal(body, &adm); err != nil || len(adm.Levels) != 2 || adm.Levels[0].Overdraft.TPM != 500 ||
		adm.Levels[1].Overdraft.TPM != 0 || adm.Levels[1].Remaining.TPM != 1_000_000-1500 {
		t.Fatalf("/admin/limits: %s", body)
	}
	for i := range 3 {
		m := c.Member(i)
		want := 0.0
		if m.Name == owner {
			want = 500
		}
		if got := promtest.Counter(t, m.Registry, "tokenring_overdrawn_tokens_total"); got != want {
			t.Errorf("%s: tokenring_overdrawn_tokens_total %v, want %v", m.Name, got, want)
		}
	}
}
