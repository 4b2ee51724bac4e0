package api

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// v2Lease is a lease of the shape every lease had before chains: a tenant
// and, when pool is not "", its pool.
func v2Lease(tenant string, tid uint64, tfb bool, pool string, pid uint64, pfb bool, node string) router.Lease {
	l := router.Lease{Tenant: tenant, Node: node}
	l.Add(router.TenantKey(tenant), tid, tfb)
	if pool != "" {
		l.Add(router.PoolKey(pool), pid, pfb)
	}
	return l
}

// chainLease is a lease of a four-level chain with per-model keys and a pool.
func chainLease() router.Lease {
	l := router.Lease{Tenant: "key-7f3a", Node: "n2"}
	tk, gk, ok := router.TenantKey("key-7f3a"), router.GroupKey("team-research"), router.GroupKey("org-acme")
	for i, k := range []string{tk, router.ModelKey(tk, "gpt-4o"), gk, router.ModelKey(gk, "gpt-4o-*"), ok, router.GroupKey("root"), router.PoolKey("gpt-4o")} {
		l.Add(k, uint64(i+1)<<40|uint64(i), i == 3)
	}
	return l
}

// chainSpec is a chain of limits for tests, by limiter key: limits of
// each key (a key not listed is unlimited), the parent group of a tenant
// ("t:<tenant>") or group ("g:<group>"), and the models entries (exact
// names) of each level key.
type chainSpec struct {
	limits map[string]limiter.Limits
	parent map[string]string
	models map[string][]string
	pools  map[string]bool // models that are pools of their own name
}

func (c chainSpec) limitsOf(key string) limiter.Limits { return c.limits[key] }

func (c chainSpec) chain(tenant, model string) router.Chain {
	var ch router.Chain
	level := router.TenantKey(tenant)
	for i := 0; ; i++ {
		for _, e := range c.models[level] {
			if e == model {
				ch.Models[i] = e
			}
		}
		g, ok := c.parent[level]
		if !ok || i == router.MaxGroups {
			return ch
		}
		ch.Groups[i], ch.NGroups = g, i+1
		level = router.GroupKey(g)
	}
}

// startChain starts one node and its router with spec's chains, on clock
// now (time.Now when nil).
func startChain(t testing.TB, spec chainSpec, now func() time.Time) *server {
	t.Helper()
	if now == nil {
		now = time.Now
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: spec.limitsOf, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	r := newAPI(t, n, router.Config{
		Limits:  spec.limitsOf,
		Chain:   spec.chain,
		PoolFor: func(model string) (string, bool) { return model, spec.pools[model] },
		Now:     now,
	}, Config{Now: now})
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	return &server{Server: hs, node: n, api: r}
}

// chainReply is a decoded acquire answer with refused_by.
type chainReply struct {
	reply
	RefusedBy string `json:"refused_by"`
}

func (s *server) chainAcquire(t testing.TB, tenant, model string, tokens int64) chainReply {
	t.Helper()
	r, raw := s.send(t, http.MethodPost, "/v1/acquire", fmt.Sprintf(`{"tenant":%q,"model":%q,"prompt_tokens":%d,"max_tokens":1}`, tenant, model, tokens-1))
	var cr chainReply
	cr.reply = r
	if err := json.Unmarshal(raw, &cr); err != nil {
		t.Fatalf("acquire: %d %q: %v", r.Code, raw, err)
	}
	cr.Code, cr.Header = r.Code, r.Header
	return cr
}

// levels returns GET /v1/tenants/{tenant}?model=model's levels by label.
func (s *server) levels(t testing.TB, tenant, model string) map[string]limitsJSON {
	t.Helper()
	r, raw := s.send(t, http.MethodGet, "/v1/tenants/"+tenant+"?model="+model, "")
	var body struct {
		Levels []levelJSON `json:"levels"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || r.Code != http.StatusOK {
		t.Fatalf("status: %d %q: %v", r.Code, raw, err)
	}
	out := map[string]limitsJSON{}
	for _, l := range body.Levels {
		out[l.Level] = l.Limits
	}
	return out
}

// researchSpec: tenant k under team-research under org-acme, per-model
// limits for gpt-4o at the tenant and the team, the model's pool. Each
// level's limit is set by the test.
func researchSpec() chainSpec {
	tk, team := router.TenantKey("k"), router.GroupKey("team-research")
	return chainSpec{
		limits: map[string]limiter.Limits{},
		parent: map[string]string{tk: "team-research", router.TenantKey("k2"): "team-research", team: "org-acme"},
		models: map[string][]string{tk: {"gpt-4o"}, team: {"gpt-4o"}},
		pools:  map[string]bool{"gpt-4o": true},
	}
}

// TestChainRefusedByEachLevel: each level of the chain, made the only one
// full, refuses with its own name, its reason and its retry-after, and
// every other level is left exactly as it was (the rollback).
func TestChainRefusedByEachLevel(t *testing.T) {
	tk, team, org := router.TenantKey("k"), router.GroupKey("team-research"), router.GroupKey("org-acme")
	for _, tc := range []struct {
		key, label, reason string
		lim                limiter.Limits
	}{
		{tk, "tenant:k", "requests", limiter.Limits{Requests: 1}},
		{router.ModelKey(tk, "gpt-4o"), "tenant:k|model:gpt-4o", "tokens", limiter.Limits{Tokens: 150}},
		{team, "group:team-research", "concurrency", limiter.Limits{Concurrency: 1}},
		{router.ModelKey(team, "gpt-4o"), "group:team-research|model:gpt-4o", "requests", limiter.Limits{Requests: 1}},
		{org, "group:org-acme", "tokens", limiter.Limits{Tokens: 150}},
		{router.PoolKey("gpt-4o"), "pool:gpt-4o", "requests", limiter.Limits{Requests: 1}},
	} {
		t.Run(tc.label, func(t *testing.T) {
			spec := researchSpec()
			for _, k := range []string{tk, router.ModelKey(tk, "gpt-4o"), team, router.ModelKey(team, "gpt-4o"), org, router.PoolKey("gpt-4o")} {
				spec.limits[k] = limiter.Limits{Requests: 100, Tokens: 100_000, Concurrency: 100}
			}
			spec.limits[tc.key] = tc.lim
			s := startChain(t, spec, newFakeClock().Now) // so that the status compared after is the same to the millisecond
			if a := s.chainAcquire(t, "k", "gpt-4o", 100); !a.Allowed || a.RefusedBy != "" {
				t.Fatalf("first acquire: %+v", a)
			}
			before := s.levels(t, "k", "gpt-4o")
			if len(before) != 6 {
				t.Fatalf("levels = %v, want 6", before)
			}
			a := s.chainAcquire(t, "k", "gpt-4o", 100)
			if a.Allowed || a.Code != http.StatusTooManyRequests || a.RefusedBy != tc.label || a.Reason != tc.reason ||
				a.RetryAfterMS <= 0 || a.Header.Get("Retry-After") == "" {
				t.Fatalf("second acquire: %d %+v, want 429 refused_by %q reason %q", a.Code, a, tc.label, tc.reason)
			}
			after := s.levels(t, "k", "gpt-4o")
			for label, l := range before {
				if after[label] != l {
					t.Errorf("%s changed by a refused acquire:\nbefore %+v\nafter  %+v", label, l, after[label])
				}
			}
		})
	}
}

// TestChainCompleteRenewSettleEveryLevel: an admission is charged at
// every level; renew renews every level; complete settles every level
// with the real usage and frees every slot.
func TestChainCompleteRenewSettleEveryLevel(t *testing.T) {
	spec := researchSpec()
	for _, k := range []string{router.TenantKey("k"), router.ModelKey(router.TenantKey("k"), "gpt-4o"), router.GroupKey("team-research"), router.GroupKey("org-acme"), router.PoolKey("gpt-4o")} {
		spec.limits[k] = limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 5}
	}
	s := startChain(t, spec, newFakeClock().Now)
	a := s.chainAcquire(t, "k", "gpt-4o", 1000)
	if !a.Allowed {
		t.Fatalf("acquire: %+v", a)
	}
	for label, l := range s.levels(t, "k", "gpt-4o") {
		if l.Limit() == 0 {
			continue // team-research|model:gpt-4o: unlimited
		}
		if l.Requests.Remaining != 9 || l.Tokens.Remaining != 9000 || l.Concurrency.Remaining != 4 {
			t.Errorf("%s after acquire: %+v", label, l)
		}
	}
	if r := s.do(t, http.MethodPost, "/v1/renew", fmt.Sprintf(`{"tenant":"k","lease":%q}`, a.Lease)); r.Code != 200 || !r.Renewed {
		t.Fatalf("renew: %+v", r)
	}
	if r := s.complete(t, "k", a.Lease, `{"prompt_tokens":300,"completion_tokens":50}`); !r.Settled {
		t.Fatalf("complete: %+v", r)
	}
	for label, l := range s.levels(t, "k", "gpt-4o") {
		if l.Limit() == 0 {
			continue
		}
		if l.Requests.Remaining != 9 || l.Tokens.Remaining != 10_000-350 || l.Concurrency.Remaining != 5 {
			t.Errorf("%s after complete: %+v", label, l)
		}
	}
	if r := s.do(t, http.MethodPost, "/v1/renew", fmt.Sprintf(`{"tenant":"k","lease":%q}`, a.Lease)); r.Code != http.StatusNotFound {
		t.Fatalf("renew after complete: %+v", r)
	}
}

// Limit is the sum of l's limits: 0 when every dimension is unlimited.
func (l limitsJSON) Limit() int64 { return l.Requests.Limit + l.Tokens.Limit + l.Concurrency.Limit }

// TestChainSharedGroup: two tenants under one group share it: the group's
// limit binds both, and a refusal by the group charges neither tenant.
func TestChainSharedGroup(t *testing.T) {
	spec := researchSpec()
	spec.limits[router.GroupKey("team-research")] = limiter.Limits{Requests: 3}
	s := startChain(t, spec, nil)
	got := map[string]int{}
	for i := range 6 {
		tenant := []string{"k", "k2"}[i%2]
		a := s.chainAcquire(t, tenant, "other-model", 1)
		if a.Allowed {
			got[tenant]++
		} else if a.RefusedBy != "group:team-research" {
			t.Fatalf("refused by %q, want the group", a.RefusedBy)
		}
	}
	if got["k"]+got["k2"] != 3 {
		t.Fatalf("admitted %v, want 3 in all", got)
	}
	for _, tenant := range []string{"k", "k2"} {
		if l := s.levels(t, tenant, "")["tenant:"+tenant]; l.Requests.Limit != 0 {
			t.Fatalf("tenant %s limits %+v", tenant, l)
		}
	}
}

// TestChainV2LeaseStillCompletes: a lease written as every lease was
// before chains (version 2: a tenant and its pool) still completes both
// keys, and a chain's lease carries every key.
func TestChainV2LeaseStillCompletes(t *testing.T) {
	spec := chainSpec{limits: map[string]limiter.Limits{
		router.TenantKey("a"): {Concurrency: 1}, router.PoolKey("gpt"): {Concurrency: 1},
	}, pools: map[string]bool{"gpt": true}}
	s := startChain(t, spec, nil)
	a := s.chainAcquire(t, "a", "gpt", 10)
	if !a.Allowed {
		t.Fatal(a)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(a.Lease)
	if raw[0] != leaseV2 {
		t.Fatalf("a tenant+pool lease is written as version %d, want 2", raw[0])
	}
	// The same lease, re-encoded by hand in the old format's layout.
	l, err := s.api.leases.open(a.Lease)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte{2, 0}
	old = binary.AppendUvarint(old, l.Sides()[0].ID)
	old = binary.AppendUvarint(old, l.Sides()[1].ID)
	for _, str := range []string{"a", "gpt", "n1"} {
		old = append(binary.AppendUvarint(old, uint64(len(str))), str...)
	}
	text := base64.RawURLEncoding.EncodeToString(s.api.leases.tag(old, 0, old))
	if r := s.complete(t, "a", text, `{"prompt_tokens":1,"completion_tokens":1}`); !r.Settled {
		t.Fatalf("old lease: %+v", r)
	}
	if b := s.chainAcquire(t, "a", "gpt", 10); !b.Allowed {
		t.Fatalf("after the old lease completed, both slots should be free: %+v", b)
	}
	// A chain's lease (version 3) round-trips every key.
	cl := chainLease()
	got, err := s.api.leases.open(s.api.leases.sign(cl))
	if err != nil || got != cl {
		t.Fatalf("chain lease: %+v %v", got, err)
	}
}

// TestChainWaitHoldsNothing: an acquire with wait_ms whose org is full
// holds nothing at its tenant while it waits, and is admitted once the
// org frees.
func TestChainWaitHoldsNothing(t *testing.T) {
	spec := researchSpec()
	spec.limits[router.TenantKey("k")] = limiter.Limits{Concurrency: 2}
	spec.limits[router.GroupKey("org-acme")] = limiter.Limits{Concurrency: 1}
	s := startChain(t, spec, nil)
	first := s.chainAcquire(t, "k2", "m", 1) // holds the org's only slot
	if !first.Allowed {
		t.Fatal(first)
	}
	done := make(chan chainReply, 1)
	go func() {
		r, raw := s.send(t, http.MethodPost, "/v1/acquire", `{"tenant":"k","model":"m","prompt_tokens":1,"wait_ms":5000}`)
		var cr chainReply
		_ = json.Unmarshal(raw, &cr)
		cr.Code = r.Code
		done <- cr
	}()
	// While it waits at the org, k's tenant level holds nothing of it.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if l := s.levels(t, "k", "")["tenant:k"]; l.Concurrency.Remaining != 2 {
			t.Fatalf("the waiter holds a tenant slot while it waits: %+v", l)
		}
	}
	if r := s.complete(t, "k2", first.Lease, ""); !r.Settled {
		t.Fatal(r)
	}
	select {
	case r := <-done:
		if !r.Allowed {
			t.Fatalf("waiter: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not admitted once the org freed")
	}
}
