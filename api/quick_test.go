package api

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
)

// picky is a node that decides at once only the keys in now.
type picky struct {
	*node.Node
	now   map[string]bool
	calls atomic.Int64 // Do calls
}

func (p *picky) Immediate(key string) bool { return p.now[key] }

func (p *picky) Do(ctx context.Context, c node.Call) (node.Answer, error) {
	p.calls.Add(1)
	return p.Node.Do(ctx, c)
}

// TestServeQuickDeclinesWhatWouldWait: ServeQuick takes a call only when
// every key it touches is decided at once (the tenant, the pool, a
// lease's sides, each call of a batch); any other it declines having
// called nothing; and a cluster that cannot tell gets every call declined.
func TestServeQuickDeclinesWhatWouldWait(t *testing.T) {
	s := setup{
		tenants: map[string]limiter.Limits{"": {Requests: 5, Tokens: 1000, Concurrency: 5, Window: time.Minute, LeaseTTL: time.Minute}},
		pools:   map[string]limiter.Limits{"pooled": {Requests: 100, Tokens: 100_000, Concurrency: 100, Window: time.Minute}},
		now:     newFakeClock().Now,
		secrets: [][]byte{[]byte("a cluster secret of 32 bytes....")},
	}
	nd, err := node.New(node.Config{Name: "n1", LimitsFor: s.limits, Now: s.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	p := &picky{Node: nd, now: map[string]bool{router.TenantKey("here"): true, router.TenantKey("here2"): true}}
	r := newAPI(t, p, router.Config{Limits: s.limits, Now: s.now,
		PoolFor: func(model string) (string, bool) { _, ok := s.pools[model]; return model, ok }},
		Config{Now: s.now, ClusterSecrets: s.secrets})
	acq := func(tenant, model string) string {
		return fmt.Sprintf(`{"tenant":%q,"model":%q,"prompt_tokens":1,"max_tokens":1}`, tenant, model)
	}
	quick := func(path, body string) (answer, bool) {
		return via(r.ServeQuick, plainStep{path: path}, body)
	}
	a, taken := quick("/v1/acquire", acq("here", ""))
	if !taken || a.status != 200 {
		t.Fatalf("an acquire of a key decided at once: taken %v, %d", taken, a.status)
	}
	lease := leaseInAnswer.FindStringSubmatch(a.body)[1]
	before := p.calls.Load()
	for _, c := range []struct{ path, body string }{
		{"/v1/acquire", acq("there", "")},
		{"/v1/acquire", acq("here", "pooled")}, // the pool's key is not
		{"/v1/batch", `{"calls":[{"op":"acquire",` + acq("here", "")[1:] + `,{"op":"acquire",` + acq("there", "")[1:] + `]}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
	} {
		if _, taken := quick(c.path, c.body); taken {
			t.Fatalf("%s %s: taken", c.path, c.body)
		}
	}
	if n := p.calls.Load() - before; n != 0 {
		t.Fatalf("declined calls made %d calls to the cluster, want 0", n)
	}
	if a, taken := quick("/v1/batch", `{"calls":[{"op":"acquire",`+acq("here", "")[1:]+`,{"op":"acquire",`+acq("here2", "")[1:]+`]}`); !taken || strings.Count(a.body, `"status":200`) != 2 {
		t.Fatalf("a batch of keys decided at once: taken %v, %s", taken, a.body)
	}
	if _, taken := quick("/v1/complete", fmt.Sprintf(`{"tenant":"here","lease":%q}`, lease)); !taken {
		t.Fatal("a complete of a lease decided at once: declined")
	}
	delete(p.now, router.TenantKey("here"))
	a, _ = via(r.ServePlain, plainStep{path: "/v1/acquire"}, acq("here", ""))
	lease = leaseInAnswer.FindStringSubmatch(a.body)[1]
	before = p.calls.Load()
	if _, taken := quick("/v1/renew", fmt.Sprintf(`{"tenant":"here","lease":%q}`, lease)); taken {
		t.Fatal("a renew of a lease whose key is not decided at once: taken")
	}
	if n := p.calls.Load() - before; n != 0 {
		t.Fatalf("a declined renew made %d calls", n)
	}
	// "here" was admitted once alone and once in a batch by ServeQuick,
	// once by ServePlain: this fourth admission leaves 1 of 5; the
	// declined calls counted nothing.
	if a, _ := via(r.ServePlain, plainStep{path: "/v1/acquire"}, acq("here", "")); !strings.Contains(a.body, `"requests":{"limit":5,"remaining":1,`) {
		t.Fatalf("the 4th admission of 5: %s", a.body)
	}

	blind := newAPI(t, struct{ router.Cluster }{nd}, router.Config{Limits: s.limits, Now: s.now}, Config{Now: s.now, ClusterSecrets: s.secrets}) // no Immediate
	if _, taken := via(blind.ServeQuick, plainStep{path: "/v1/acquire"}, acq("here", "")); taken {
		t.Fatal("a cluster without Immediate: taken")
	}
}
