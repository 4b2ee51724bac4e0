package router

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// TestClientTokens: with clients configured, the decision API needs a known
// token (401) allowed the tenant (403); a refused call changes nothing.
func TestClientTokens(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	s := start(t, setup{
		tenants: map[string]limiter.Limits{"": {Requests: 10}},
		clients: map[string][]string{"gw-all": {AnyTenant}, "gw-eve": {"eve", "eve2"}},
		now:     func() time.Time { return t0 },
	})
	gw, eve, anon, wrong := *s, *s, *s, *s
	gw.token, eve.token, wrong.token = "gw-all", "gw-eve", "gw-al"
	bob := gw.acquire(t, `{"tenant":"bob","prompt_tokens":1}`)
	if bob.Code != http.StatusOK || !bob.Allowed {
		t.Fatalf("gw-all acquiring for bob: %+v", bob)
	}
	before := gw.status(t, "bob").Limits
	acquireBob := `{"tenant":"bob","prompt_tokens":1}`
	completeBob := fmt.Sprintf(`{"tenant":"bob","lease":%q}`, bob.Lease)
	cases := []struct {
		name   string
		as     *server
		method string
		path   string
		body   string
		code   int
	}{
		{"no token acquires", &anon, "POST", "/v1/acquire", acquireBob, 401},
		{"no token completes", &anon, "POST", "/v1/complete", completeBob, 401},
		{"no token renews", &anon, "POST", "/v1/renew", completeBob, 401},
		{"no token reads usage", &anon, "GET", "/v1/tenants/bob", "", 401},
		{"unknown token acquires", &wrong, "POST", "/v1/acquire", acquireBob, 401},
		{"eve's token acquires for bob", &eve, "POST", "/v1/acquire", acquireBob, 403},
		{"eve's token completes bob's lease", &eve, "POST", "/v1/complete", completeBob, 403},
		{"eve's token renews bob's lease", &eve, "POST", "/v1/renew", completeBob, 403},
		{"eve's token reads bob's usage", &eve, "GET", "/v1/tenants/bob", "", 403},
	}
	for _, c := range cases {
		if r := c.as.do(t, c.method, c.path, c.body); r.Code != c.code || r.Error == "" || r.Allowed || r.Settled {
			t.Errorf("%s: %d %+v, want %d with an error", c.name, r.Code, r, c.code)
		}
	}
	if after := gw.status(t, "bob").Limits; after != before {
		t.Fatalf("refused calls changed bob's state:\nbefore %+v\nafter  %+v", before, after)
	}
	if r := eve.acquire(t, `{"tenant":"eve2","prompt_tokens":1}`); !r.Allowed {
		t.Fatalf("eve's token acquiring for eve2 (in its list): %+v", r)
	}
	if r := gw.complete(t, "bob", bob.Lease, ""); !r.Settled {
		t.Fatalf("gw-all completing bob's lease: %+v", r)
	}
	// /healthz, /readyz and /metrics need no token.
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := anon.do(t, "GET", p, ""); r.Code != http.StatusOK {
			t.Errorf("GET %s without a token: %d", p, r.Code)
		}
	}
}

// TestAdminTokenGuardsAllOfAdmin: every path under /admin, existing or not,
// needs the admin token; /admin/ui also takes it as ?token=.
func TestAdminTokenGuardsAllOfAdmin(t *testing.T) {
	s := start(t, setup{admin: "s3cret-admin"})
	admin := *s
	admin.token = "s3cret-admin"
	for _, p := range []string{"/admin/ring", "/admin/owner?tenant=a", "/admin/stats", "/admin/cluster", "/admin/ui", "/admin/nothing", "/admin",
		"/admin/debug/pprof/", "/admin/debug/pprof/heap", "/admin/debug/pprof/cmdline"} {
		resp, err := http.Get(s.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", p, resp.StatusCode)
		}
		req, _ := http.NewRequest("GET", s.URL+p, nil)
		req.Header.Set("Authorization", "Bearer s3cret-admin-")
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", p, resp.StatusCode)
		}
	}
	if r := admin.do(t, "GET", "/admin/stats", ""); r.Code != http.StatusOK {
		t.Errorf("GET /admin/stats with the token: %d %s", r.Code, r.Error)
	}
	if r, body := admin.send(t, "GET", "/admin/debug/pprof/goroutine?debug=1", ""); r.Code != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Errorf("GET /admin/debug/pprof/goroutine with the token: %d %.80q, want the profile", r.Code, body)
	}
	if r := admin.do(t, "GET", "/admin/nothing", ""); r.Code != http.StatusNotFound {
		t.Errorf("GET /admin/nothing with the token: %d, want 404", r.Code)
	}
	resp, err := http.Get(s.URL + "/admin/ui?token=s3cret-admin")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /admin/ui?token=: %d", resp.StatusCode)
	}
	resp, err = http.Get(s.URL + "/admin/ring?token=s3cret-admin")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /admin/ring?token=: %d, want 401 (only /admin/ui takes the query)", resp.StatusCode)
	}
}

func TestSameToken(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"x", "x", true}, {"x", "y", false}, {"", "x", false}, {"abc", "abcd", false}, {"", "", true}} {
		if got := sameToken(c.a, c.b); got != c.want {
			t.Errorf("sameToken(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
