package test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
)

// chainConfig: org-acme over team-a (tenants a1, a2) and team-b (b1, b2)
// and tenant c1, whose requests for model m have a limit of their own
// and go to pool m. Traffic wants more than every level allows, and the
// org's limit is exactly what the levels below it admit together
// (50 + 20 + 20 + 25), so that every level ends exactly at its limit.
const chainConfig = `
limits:
  default: {rpm: 100000, tpm: 100000000, concurrency: 100000}
  tenants:
    a1: {rpm: 30, parent: team-a}
    a2: {rpm: 30, parent: team-a}
    b1: {rpm: 20, parent: team-b}
    b2: {rpm: 20, parent: team-b}
    c1: {parent: org-acme, models: {m: {rpm: 25}}}
  groups:
    team-a: {rpm: 50, parent: org-acme}
    team-b: {rpm: 1000, parent: org-acme}
    org-acme: {rpm: 115}
  window: 60s
  lease_ttl: 120s
pools:
  m: {rpm: 1000}
`

// TestClusterChainExact: three tokenringd processes, chains whose levels
// are owned by different members, 600 acquires at once, each sent to the
// members in turn: no client error, no fallback, and every level (tenant,
// group, models entry, pool) holds exactly its limit, which is exactly the
// sum of what its tenants were admitted: no refused acquire stayed charged
// at any level.
func TestClusterChainExact(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, chainConfig, steady...)
	tenants := []string{"a1", "a2", "b1", "b2", "c1"}
	const n = 600
	client := newClient()
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	admitted, refusedBy := map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		tenant := tenants[i%len(tenants)]
		body := fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tenant)
		if tenant == "c1" {
			body = `{"tenant":"c1","model":"m","prompt_tokens":1,"max_tokens":1}`
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			code, out, err := Post(context.Background(), client, c.Procs[i%len(c.Procs)].URL()+"/v1/acquire", body)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("acquire %d: %v", i, err)
			case out["fallback"] == true:
				t.Errorf("acquire %d fell back although every owner is up: %v", i, out)
			case code == http.StatusOK && out["allowed"] == true:
				admitted[tenant]++
			case code == http.StatusTooManyRequests && out["reason"] == "requests":
				refusedBy[fmt.Sprint(out["refused_by"])]++
			default:
				t.Errorf("acquire %d: %d %v", i, code, out)
			}
		}()
	}
	close(gate)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	waitSlicesEnded() // a hot level's unused slices count at its owner until given back
	want := map[string]int64{
		"tenant:b1": 20, "tenant:b2": 20, "tenant:c1|model:m": 25, "pool:m": 25,
		"group:team-a": 50, "group:team-b": 40, "group:org-acme": 115,
	}
	used := map[string]int64{}
	owners := map[string]string{}
	for _, q := range []struct{ tenant, model string }{{"a1", ""}, {"a2", ""}, {"b1", ""}, {"b2", ""}, {"c1", "m"}} {
		var st struct {
			Levels []struct {
				Level, Owner string
				Limits       struct {
					Requests struct{ Limit, Remaining int64 }
				}
			}
		}
		via := c.Procs[len(q.tenant)%len(c.Procs)]
		if err := GetJSON(via.URL()+"/v1/tenants/"+q.tenant+"?model="+url.QueryEscape(q.model), &st); err != nil {
			t.Fatal(err)
		}
		for _, l := range st.Levels {
			used[l.Level] = l.Limits.Requests.Limit - l.Limits.Requests.Remaining
			owners[l.Level] = l.Owner
		}
	}
	for level, w := range want {
		if used[level] != w {
			t.Errorf("%s holds %d requests, want exactly %d", level, used[level], w)
		}
	}
	a := int64(admitted["a1"] + admitted["a2"])
	if a != 50 || used["tenant:a1"]+used["tenant:a2"] != 50 || used["tenant:a1"] != int64(admitted["a1"]) || used["tenant:a2"] != int64(admitted["a2"]) {
		t.Errorf("team-a's tenants: admitted a1 %d a2 %d, hold %d and %d; want 50 in all, each holding what it was admitted",
			admitted["a1"], admitted["a2"], used["tenant:a1"], used["tenant:a2"])
	}
	for _, tenant := range []string{"b1", "b2", "c1"} {
		level := "tenant:" + tenant
		if tenant == "c1" {
			level += "|model:m"
		}
		if int64(admitted[tenant]) != want[level] {
			t.Errorf("%s admitted %d, want %d", tenant, admitted[tenant], want[level])
		}
	}
	distinct := map[string]bool{}
	for _, o := range owners {
		distinct[o] = true
	}
	if len(distinct) < 2 {
		t.Errorf("every level is owned by one member (%v): the test would not cross members", owners)
	}
	t.Logf("admitted %v; refused by %v; owners %v", admitted, refusedBy, owners)
}
