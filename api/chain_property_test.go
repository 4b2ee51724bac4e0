package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// The chain property test drives one node's router with random chains
// (one to four levels, per-model limits at random levels, pools) and
// random acquires, completes, releases and renewals, on a clock that does
// not move (so that nothing leaves a window), against a model that knows
// only what each key admitted: after every step, every level's counters
// as GET /v1/tenants/{t}?model= shows them equal the model's sums of the
// admissions charged through that level and not given back; every
// acquire is admitted exactly when the model has room at every level,
// and a refusal names the first level (in chainOrder) the model says is
// full, with a reason that level really lacks.

// pkey is one key in the model: its label, its limits, what it holds.
type pkey struct {
	label         string
	lim           limiter.Limits
	req, tok, con int64
}

// padm is one admission in the model.
type padm struct {
	tenant, lease string
	keys          []string
	charge        int64
	open          bool
}

type chainModel struct {
	spec chainSpec
	keys map[string]*pkey
	adms []*padm
}

// chainKeys is the model's own account of the keys an acquire charges,
// in chainOrder, built from the spec without the router's code.
func (m *chainModel) chainKeys(tenant, model string) []string {
	var out []string
	level, label := router.TenantKey(tenant), "tenant:"+tenant
	for {
		out = append(out, level)
		m.label(level, label)
		for _, e := range m.spec.models[level] {
			if model != "" && e == model {
				k := level + "\x1fm:" + e
				out = append(out, k)
				m.label(k, label+"|model:"+e)
			}
		}
		g, ok := m.spec.parent[level]
		if !ok {
			break
		}
		level, label = "g:"+g, "group:"+g
	}
	if model != "" && m.spec.pools[model] {
		out = append(out, "p:"+model)
		m.label("p:"+model, "pool:"+model)
	}
	return out
}

func (m *chainModel) label(key, label string) {
	if k := m.keys[key]; k != nil && k.label != "" && k.label != label {
		panic(fmt.Sprintf("key %q labelled %q and %q", key, k.label, label))
	}
	if m.keys[key] == nil {
		m.keys[key] = &pkey{lim: m.spec.limits[key]}
	}
	m.keys[key].label = label
}

// refuser returns the first key of keys without room for one request of
// tok tokens, and the reason, as limiter.Budget.Acquire gives it.
func (m *chainModel) refuser(keys []string, tok int64) (string, string) {
	for _, key := range keys {
		k := m.keys[key]
		switch {
		case tok > k.lim.Tokens:
			return key, "tokens"
		case k.req+1 > k.lim.Requests:
			return key, "requests"
		case k.tok+tok > k.lim.Tokens:
			return key, "tokens"
		case k.con+1 > k.lim.Concurrency:
			return key, "concurrency"
		}
	}
	return "", ""
}

// drawSpec draws a chain: groups g0 → g1 → … (0 to 3), tenant a under
// g0, tenant b under a random one of them (or alone), per-model entries
// for m0, m1, m2 at random levels, m0 and m1 maybe pools; every key
// limited in every dimension.
func drawSpec(t *rapid.T) chainSpec {
	spec := chainSpec{limits: map[string]limiter.Limits{}, parent: map[string]string{}, models: map[string][]string{}, pools: map[string]bool{}}
	n := rapid.IntRange(0, router.MaxGroups).Draw(t, "groups")
	levels := []string{router.TenantKey("a"), router.TenantKey("b")}
	for i := range n {
		g := fmt.Sprintf("g%d", i)
		if i == 0 {
			spec.parent[router.TenantKey("a")] = g
		} else {
			spec.parent[router.GroupKey(fmt.Sprintf("g%d", i-1))] = g
		}
		levels = append(levels, router.GroupKey(g))
	}
	if n > 0 {
		if j := rapid.IntRange(-1, n-1).Draw(t, "b's parent"); j >= 0 {
			spec.parent[router.TenantKey("b")] = fmt.Sprintf("g%d", j)
		}
	}
	lim := func(name string) limiter.Limits {
		return limiter.Limits{Requests: rapid.Int64Range(1, 8).Draw(t, name+".rpm"), Tokens: rapid.Int64Range(5, 80).Draw(t, name+".tpm"),
			Concurrency: rapid.Int64Range(1, 5).Draw(t, name+".concurrency")}
	}
	for _, l := range levels {
		spec.limits[l] = lim(l)
		for _, model := range []string{"m0", "m1", "m2"} {
			if rapid.Bool().Draw(t, l+" has "+model) {
				spec.models[l] = append(spec.models[l], model)
				spec.limits[router.ModelKey(l, model)] = lim(router.ModelKey(l, model))
			}
		}
	}
	for _, model := range []string{"m0", "m1"} {
		if rapid.Bool().Draw(t, model+" is a pool") {
			spec.pools[model] = true
			spec.limits[router.PoolKey(model)] = lim(router.PoolKey(model))
		}
	}
	return spec
}

// call serves one request through r's handler.
func call(r *testAPI, method, path, body string) (int, []byte) {
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

func TestChainProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := drawSpec(t)
		clock := newFakeClock()
		n, err := node.New(node.Config{Name: "n1", LimitsFor: spec.limitsOf, Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		rt, err := router.New(n, router.Config{Limits: spec.limitsOf, Chain: spec.chain, Now: clock.Now,
			PoolFor: func(model string) (string, bool) { return model, spec.pools[model] }})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		r := apiOf(rt, Config{Now: clock.Now})
		m := &chainModel{spec: spec, keys: map[string]*pkey{}}
		tenants, models := []string{"a", "b"}, []string{"", "m0", "m1", "m2"}
		pickOpen := func(t *rapid.T) *padm {
			if len(m.adms) == 0 {
				t.Skip("no admission yet")
			}
			return rapid.SampledFrom(m.adms).Draw(t, "admission")
		}
		t.Repeat(map[string]func(*rapid.T){
			"acquire": func(t *rapid.T) {
				tenant, model := rapid.SampledFrom(tenants).Draw(t, "tenant"), rapid.SampledFrom(models).Draw(t, "model")
				prompt := rapid.Int64Range(0, 30).Draw(t, "prompt")
				keys := m.chainKeys(tenant, model)
				wantBy, wantReason := m.refuser(keys, prompt+1)
				code, raw := call(r, http.MethodPost, "/v1/acquire", fmt.Sprintf(`{"tenant":%q,"model":%q,"prompt_tokens":%d,"max_tokens":1}`, tenant, model, prompt))
				var a struct {
					Allowed                bool
					Lease, Reason, Refused string
					RefusedBy              string `json:"refused_by"`
					Reserved               int64  `json:"reserved_tokens"`
				}
				if err := json.Unmarshal(raw, &a); err != nil {
					t.Fatalf("%d %s", code, raw)
				}
				if wantBy != "" {
					if code != http.StatusTooManyRequests || a.RefusedBy != m.keys[wantBy].label || a.Reason != wantReason {
						t.Fatalf("acquire %s %s (%d tokens): %d %s; want refused_by %q reason %q", tenant, model, prompt+1, code, raw, m.keys[wantBy].label, wantReason)
					}
					return
				}
				if code != http.StatusOK || !a.Allowed || a.Reserved != prompt+1 {
					t.Fatalf("acquire %s %s (%d tokens): %d %s; want admitted", tenant, model, prompt+1, code, raw)
				}
				for _, key := range keys {
					k := m.keys[key]
					k.req, k.tok, k.con = k.req+1, k.tok+prompt+1, k.con+1
				}
				m.adms = append(m.adms, &padm{tenant: tenant, lease: a.Lease, keys: keys, charge: prompt + 1, open: true})
			},
			"complete": func(t *rapid.T) {
				a := pickOpen(t)
				p := rapid.Int64Range(0, a.charge-1).Draw(t, "usage.prompt")
				c := rapid.Int64Range(1, a.charge-p).Draw(t, "usage.completion")
				code, raw := call(r, http.MethodPost, "/v1/complete", fmt.Sprintf(`{"tenant":%q,"lease":%q,"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, a.tenant, a.lease, p, c))
				if code != http.StatusOK || strings.Contains(string(raw), `"settled":true`) != a.open {
					t.Fatalf("complete (open %v): %d %s", a.open, code, raw)
				}
				if a.open {
					for _, key := range a.keys {
						k := m.keys[key]
						k.tok, k.con = k.tok-a.charge+p+c, k.con-1
					}
					a.open, a.charge = false, p+c
				}
			},
			"release": func(t *rapid.T) {
				a := pickOpen(t)
				code, raw := call(r, http.MethodPost, "/v1/complete", fmt.Sprintf(`{"tenant":%q,"lease":%q}`, a.tenant, a.lease))
				if code != http.StatusOK || strings.Contains(string(raw), `"settled":true`) != a.open {
					t.Fatalf("release (open %v): %d %s", a.open, code, raw)
				}
				if a.open {
					for _, key := range a.keys {
						m.keys[key].con--
					}
					a.open = false
				}
			},
			"renew": func(t *rapid.T) {
				a := pickOpen(t)
				code, raw := call(r, http.MethodPost, "/v1/renew", fmt.Sprintf(`{"tenant":%q,"lease":%q}`, a.tenant, a.lease))
				if want := map[bool]int{true: http.StatusOK, false: http.StatusNotFound}[a.open]; code != want {
					t.Fatalf("renew (open %v): %d %s", a.open, code, raw)
				}
			},
			"": func(t *rapid.T) { m.check(t, r, tenants, models) },
		})
	})
}

// check compares every level of every (tenant, model) with the model.
func (m *chainModel) check(t *rapid.T, r *testAPI, tenants, models []string) {
	for _, tenant := range tenants {
		for _, model := range models {
			keys := m.chainKeys(tenant, model)
			code, raw := call(r, http.MethodGet, "/v1/tenants/"+tenant+"?model="+model, "")
			var body struct{ Levels []levelJSON }
			if err := json.Unmarshal(raw, &body); err != nil || code != http.StatusOK {
				t.Fatalf("status: %d %s", code, raw)
			}
			if len(body.Levels) != len(keys) {
				t.Fatalf("%s %s: %d levels %s, the model has %d", tenant, model, len(body.Levels), raw, len(keys))
			}
			for i, key := range keys {
				k, got := m.keys[key], body.Levels[i]
				if got.Level != k.label {
					t.Fatalf("%s %s level %d is %q, the model's %q", tenant, model, i, got.Level, k.label)
				}
				l := got.Limits
				if used := [3]int64{l.Requests.Limit - l.Requests.Remaining, l.Tokens.Limit - l.Tokens.Remaining,
					l.Concurrency.Limit - l.Concurrency.Remaining}; used != [3]int64{k.req, k.tok, k.con} {
					t.Fatalf("%s: used (requests, tokens, slots) %v, the model's %v", k.label, used, [3]int64{k.req, k.tok, k.con})
				}
			}
		}
	}
}
