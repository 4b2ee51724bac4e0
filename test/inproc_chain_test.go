package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/promtest"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// Chains across three members: every acquire charges its tenant, its team
// and the org, owned wherever the ring puts them, sent through every
// member at once. The org's limit binds: exactly its limit is admitted,
// and every level counts exactly what was admitted through it (no partial
// charge is left behind by a refusal). Keys that share an owner are
// decided there in one call (a run): the members' call metrics show runs.
//
// With the shipped hot-key rate the shared groups soon go hot and are
// served from slices; with slices off every group goes by runs, and the
// teams' limits bind first (3 × 30 < 100), so a team refuses in the middle
// of a run whose org comes after it.
func TestInProcChainsAreExact(t *testing.T) {
	t.Run("shipped defaults", func(t *testing.T) { testInProcChainsAreExact(t, 0, 40) })
	t.Run("slices off", func(t *testing.T) { testInProcChainsAreExact(t, -1, 30) })
}

func testInProcChainsAreExact(t *testing.T, hotKeyRate int, teamLimit int64) {
	noLeaks(t)
	const tenants, teams, orgLimit = 30, 3, 100
	limits := func(key string) limiter.Limits {
		l := limiter.Limits{Requests: 1000, Tokens: 1 << 40, Concurrency: 1 << 20, Window: time.Minute, LeaseTTL: 2 * time.Minute}
		switch {
		case key == router.GroupKey("org"):
			l.Requests = orgLimit
		case strings.HasPrefix(key, "g:team-"):
			l.Requests = teamLimit
		}
		return l
	}
	// The teams are named once the ring is known: each shares the org's
	// owner, so that a team and the org above it make a run, and a team's
	// refusal stops a run before the org.
	var teamNames [teams]string
	teamOf := func(tenant string) string {
		var i int
		fmt.Sscanf(tenant, "tenant-%d", &i)
		return teamNames[i%teams]
	}
	chain := func(tenant, _ string) router.Chain {
		return router.Chain{Groups: [router.MaxGroups]string{teamOf(tenant), "org"}, NGroups: 2}
	}
	c := NewInProc(t, 3, limits, WithChain(chain), WithHotKeyRate(hotKeyRate), WithForwardTimeout(5*time.Second), WithGossip(steadyGossip))
	client := inProcClient(t)
	rg := c.Member(0).Node.Ring()
	orgOwner, _ := rg.Owner(router.GroupKey("org"))
	for k, i := 0, 0; i < teams; k++ {
		if o, _ := rg.Owner(router.GroupKey(fmt.Sprintf("team-%d", k))); o.Name == orgOwner.Name {
			teamNames[i] = fmt.Sprintf("team-%d", k)
			i++
		}
	}

	// 30 clients, each sending 20 acquires one after the other through
	// the three members in turn: contention at every level without
	// hundreds of requests starving one process's gossip.
	const clients, each = 30, 20
	const n = clients * each
	admitted := make([]string, n) // the tenant of each admission
	var mu sync.Mutex
	refused := map[string]int{}
	acquire := func(i int) {
		tenant := fmt.Sprintf("tenant-%d", i%tenants)
		code, out, err := Post(context.Background(), client, c.URL((i/clients)%3)+"/v1/acquire",
			fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tenant))
		switch {
		case err != nil:
			t.Errorf("acquire %d: %v", i, err)
		case out["fallback"] == true:
			t.Errorf("acquire %d answered by the fallback: %v", i, out)
		case code == http.StatusOK:
			admitted[i] = tenant
		case code == http.StatusTooManyRequests:
			mu.Lock()
			refused[fmt.Sprint(out["refused_by"])]++
			mu.Unlock()
		default:
			t.Errorf("acquire %d: %d %v", i, code, out)
		}
	}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for i := w; i < n; i += clients {
				acquire(i)
			}
		}()
	}
	close(gate)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	perTenant, perTeam, total := map[string]int64{}, map[string]int64{}, int64(0)
	for _, tenant := range admitted {
		if tenant != "" {
			perTenant[tenant]++
			perTeam[teamOf(tenant)]++
			total++
		}
	}
	if want := min(orgLimit, teams*teamLimit); total != want {
		t.Fatalf("admitted %d, want exactly %d, the tighter of the org's limit and its teams' (refusals by level: %v)", total, want, refused)
	}
	// Every level's count, asked at its owner, is what was admitted
	// through it: refusals left nothing charged. Hot keys' slices (the
	// shipped hot_key_rate) are charged at their owners when cut and given
	// back once idle, so the counts settle on the admissions.
	used := func(tenant string) map[string]int64 {
		resp, err := client.Get(c.URL(0) + "/v1/tenants/" + tenant)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return levelsUsed(t, body)
	}
	var wrong []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		wrong = wrong[:0]
		for i := range tenants {
			tenant := fmt.Sprintf("tenant-%d", i)
			got := used(tenant)
			want := map[string]int64{"tenant:" + tenant: perTenant[tenant], "group:" + teamOf(tenant): perTeam[teamOf(tenant)], "group:org": total}
			for level, w := range want {
				if got[level] != w {
					wrong = append(wrong, fmt.Sprintf("%s: %s counts %d requests, want %d admitted through it", tenant, level, got[level], w))
				}
			}
		}
		if len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(wrong) > 0 {
		t.Errorf("20 s after the last acquire:\n%s", strings.Join(wrong, "\n"))
	}
	for team, got := range perTeam {
		if got > teamLimit {
			t.Errorf("%s admitted %d, over its limit %d", team, got, teamLimit)
		}
	}
	var runs uint64
	for i := range c.Len() {
		if m := promtest.Sample(t, c.Member(i).Registry, "tokenring_call_seconds", "run", "forwarded"); m != nil {
			runs += m.GetHistogram().GetSampleCount()
		}
	}
	if runs == 0 {
		t.Error("no run was forwarded: chains whose keys share another owner should be decided there in one call")
	}
}

// levelsUsed reads GET /v1/tenants/{t}'s answer: the requests each level
// counts (limit - remaining), by its label.
func levelsUsed(t *testing.T, body []byte) map[string]int64 {
	t.Helper()
	var out struct {
		Levels []struct {
			Level  string `json:"level"`
			Limits struct {
				Requests struct{ Limit, Remaining int64 } `json:"requests"`
			} `json:"limits"`
		} `json:"levels"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("tenant status %s: %v", body, err)
	}
	used := map[string]int64{}
	for _, l := range out.Levels {
		used[l.Level] = l.Limits.Requests.Limit - l.Limits.Requests.Remaining
	}
	return used
}
