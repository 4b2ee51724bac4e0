package api

import (
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

// startSetters is a node whose file limits are rpm 1000 for every key,
// with the client tokens tok-gw (may send limits) and tok-app (may not),
// or an open API when open.
func startSetters(t *testing.T, open bool) *server {
	t.Helper()
	file := func(string) limiter.Limits { return limiter.Limits{Requests: 1000, Window: time.Minute} }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c := Config{}
	if !open {
		c.Clients = map[string][]string{"tok-gw": {"*"}, "tok-app": {"*"}}
		c.LimitSetters = map[string]bool{"tok-gw": true}
	}
	r := newAPI(t, n, router.Config{Limits: file}, c)
	hs := httptest.NewServer(r)
	t.Cleanup(hs.Close)
	return &server{Server: hs, node: n, api: r}
}

// sentAcquire sends an acquire of tenant with sent, the JSON of its
// "limits" and "parents" fields (without braces), as token.
func (s *server) sentAcquire(t *testing.T, token, tenant, sent string) chainReply {
	t.Helper()
	s.token = token
	r, raw := s.send(t, http.MethodPost, "/v1/acquire", fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1%s}`, tenant, sent))
	var cr chainReply
	if err := json.Unmarshal(raw, &cr); err != nil {
		t.Fatalf("acquire: %d %q: %v", r.Code, raw, err)
	}
	cr.Code = r.Code
	return cr
}

// A gateway that keeps its keys in its own database sends their limits:
// only a client allowed to may, they replace the file's at the owner, a
// chain the request names is charged all or nothing, and a lowered limit
// refuses until the window drains.
func TestSentLimits(t *testing.T) {
	s := startSetters(t, false)
	sent := `,"limits":{"rpm":3},"parents":[{"name":"team","limits":{"rpm":5}}]`
	if a := s.sentAcquire(t, "tok-app", "k", sent); a.Code != http.StatusForbidden {
		t.Fatalf("limits from a client without may_set_limits: %d %+v, want 403", a.Code, a)
	}
	if got := s.levels(t, "k", ""); got["tenant:k"].Requests.Remaining != 1000 {
		t.Fatalf("a refused sender's acquire counted: %+v", got)
	}
	for i := range 3 {
		if a := s.sentAcquire(t, "tok-gw", "k", sent); !a.Allowed {
			t.Fatalf("acquire %d under the sent rpm 3: %+v", i, a)
		}
	}
	if a := s.sentAcquire(t, "tok-gw", "k", sent); a.Code != http.StatusTooManyRequests || a.RefusedBy != "tenant:k" {
		t.Fatalf("a 4th acquire under the sent rpm 3: %d refused_by %q, want 429 by tenant:k", a.Code, a.RefusedBy)
	}
	// k2 shares team (rpm 5, 3 used): 2 more, then the team refuses, and
	// k2 is charged nothing for the refusal.
	sent2 := `,"limits":{"rpm":10},"parents":[{"name":"team","limits":{"rpm":5}}]`
	for i := range 2 {
		if a := s.sentAcquire(t, "tok-gw", "k2", sent2); !a.Allowed {
			t.Fatalf("k2's acquire %d: %+v", i, a)
		}
	}
	if a := s.sentAcquire(t, "tok-gw", "k2", sent2); a.Code != http.StatusTooManyRequests || a.RefusedBy != "group:team" {
		t.Fatalf("k2 with team at 5 of 5: %d refused_by %q, want 429 by group:team", a.Code, a.RefusedBy)
	}
	s.token = "tok-gw"
	lv := s.levels(t, "k2", "")
	if l := lv["tenant:k2"].Requests; l.Limit != 10 || l.Remaining != 8 {
		t.Fatalf("k2 after a refusal by its team: %+v, want 8 of 10 left (nothing charged for the refusal)", l)
	}
	// Lowered below what is counted: refused until the window drains; an
	// acquire without limits keeps the sent ones (not the file's 1000).
	if a := s.sentAcquire(t, "tok-gw", "k2", `,"limits":{"rpm":1}`); a.Allowed {
		t.Fatalf("k2 lowered to rpm 1 with 2 counted: admitted")
	}
	if a := s.sentAcquire(t, "tok-gw", "k2", ``); a.Allowed || a.RefusedBy != "tenant:k2" {
		t.Fatalf("k2 without limits after rpm 1 was sent: %+v, want refused by tenant:k2", a)
	}
	for _, bad := range []string{
		`,"limits":{"rpm":-1}`,
		`,"parents":[{"name":"a"},{"name":"b"},{"name":"c"},{"name":"d"}]`,
		`,"parents":[{"name":"a"},{"name":"a"}]`,
		`,"parents":[{"name":""}]`,
	} {
		if a := s.sentAcquire(t, "tok-gw", "k3", bad); a.Code != http.StatusBadRequest {
			t.Errorf("acquire with %s: %d, want 400", bad, a.Code)
		}
	}
	s.token = "tok-gw"
	if got := s.levels(t, "k3", ""); got["tenant:k3"].Requests.Remaining != 1000 {
		t.Errorf("bad acquires counted: %+v", got)
	}
}

// An open API (no clients: configured) takes sent limits from anyone.
func TestSentLimitsOnAnOpenAPI(t *testing.T) {
	s := startSetters(t, true)
	for i := range 2 {
		if a := s.sentAcquire(t, "", "k", `,"limits":{"rpm":2}`); !a.Allowed {
			t.Fatalf("acquire %d: %+v", i, a)
		}
	}
	if a := s.sentAcquire(t, "", "k", `,"limits":{"rpm":2}`); a.Allowed {
		t.Fatal("a 3rd acquire under a sent rpm 2 was admitted")
	}
}
