package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/ring"
	"github.com/tokenring/tokenring/router"
)

// uiLimits are every key's limits in the status page's tests.
func uiLimits(string) limiter.Limits {
	return limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 100}
}

// uiMember is one member of a hand-built cluster: a node, its router (the
// tests acquire through it) and its HTTP server (the operator's
// endpoints).
type uiMember struct {
	node   *node.Node
	router *router.Router
	srv    *httptest.Server
}

// startUICluster starts one member per name, all with admin token (empty:
// none) and one ring whose members advertise their HTTP servers; extra
// members are added to the ring as they are given (no node behind them).
func startUICluster(t *testing.T, token string, names []string, extra ...ring.Member) (map[string]*uiMember, *ring.Ring) {
	t.Helper()
	ms := map[string]*uiMember{}
	var members []ring.Member
	for _, name := range names {
		n, err := node.New(node.Config{Name: name, LimitsFor: uiLimits, ReplicationInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		r, err := router.New(n, router.Config{Limits: uiLimits})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		srv := httptest.NewUnstartedServer(serve(n, r, Config{Token: token, Levels: r.Levels, Group: r.GroupLevel, Activity: r.Activity()}))
		srv.Start()
		t.Cleanup(srv.Close)
		ms[name] = &uiMember{node: n, router: r, srv: srv}
		members = append(members, ring.Member{Name: name, Peer: n.PeerAddr(), HTTP: srv.Listener.Addr().String()})
	}
	rg, err := ring.New(ring.Config{}, append(members, extra...))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		m.node.SetRing(rg)
	}
	return ms, rg
}

// tenantOwnedBy is a tenant whose key the member called owner owns in rg.
func tenantOwnedBy(t *testing.T, rg *ring.Ring, owner string) string {
	t.Helper()
	for i := range 10_000 {
		tenant := fmt.Sprint("tenant-", i)
		if m, _ := rg.Owner(router.TenantKey(tenant)); m.Name == owner {
			return tenant
		}
	}
	t.Fatalf("no tenant owned by %s", owner)
	return ""
}

// getRaw GETs url with the Authorization header auth (none if empty).
func getRaw(t *testing.T, url, auth string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// With admin_token set, /admin/ui, /admin/stats and /admin/cluster answer
// 401 without it, with a wrong one, or (the JSON endpoints) with it in the
// query; with it they answer. Only the page takes ?token=.
func TestAdminUIGuard(t *testing.T) {
	ms, _ := startUICluster(t, "s3cret", []string{"n1"})
	base := ms["n1"].srv.URL
	cases := []struct {
		path, auth string
		want       int
	}{
		{"/admin/ui", "", 401},
		{"/admin/ui", "Bearer wrong", 401},
		{"/admin/ui", "s3cret", 401},
		{"/admin/ui?token=wrong", "", 401},
		{"/admin/ui?token=s3cre", "", 401},
		{"/admin/ui", "Bearer s3cret", 200},
		{"/admin/ui?token=s3cret", "", 200},
		{"/admin/stats", "", 401},
		{"/admin/stats", "Bearer wrong", 401},
		{"/admin/stats?token=s3cret", "", 401},
		{"/admin/stats", "Bearer s3cret", 200},
		{"/admin/cluster", "", 401},
		{"/admin/cluster?token=s3cret", "", 401},
		{"/admin/cluster", "Bearer s3cret", 200},
	}
	for _, p := range []string{"/admin/tenant?tenant=acme", "/admin/tenants?sort=used", "/admin/refusals?tenant=acme", "/admin/history?key=t:acme"} {
		cases = append(cases, struct {
			path, auth string
			want       int
		}{p, "", 401}, struct {
			path, auth string
			want       int
		}{p + "&token=s3cret", "", 401}, struct {
			path, auth string
			want       int
		}{p, "Bearer s3cret", 200})
	}
	for _, tc := range cases {
		resp, body := getRaw(t, base+tc.path, tc.auth)
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s (Authorization %q): %d %s, want %d", tc.path, tc.auth, resp.StatusCode, body, tc.want)
		}
		if tc.want == 401 && !strings.Contains(string(body), "admin_token") {
			t.Errorf("GET %s: 401 without saying why: %s", tc.path, body)
		}
	}
	// Not GET: 405, after the guard.
	req, _ := http.NewRequest(http.MethodPost, base+"/admin/ui?token=s3cret", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /admin/ui: %d, want 405", resp.StatusCode)
	}
}

// Without admin_token the endpoints are open, like every /admin endpoint.
func TestAdminUIOpenWithoutToken(t *testing.T) {
	ms, _ := startUICluster(t, "", []string{"n1"})
	for _, path := range []string{"/admin/ui", "/admin/stats", "/admin/cluster"} {
		if resp, body := getRaw(t, ms["n1"].srv.URL+path, ""); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// The page is one HTML document whose inline script and style are the only
// ones its Content-Security-Policy allows.
func TestAdminUIPage(t *testing.T) {
	ms, _ := startUICluster(t, "", []string{"n1"})
	resp, body := getRaw(t, ms["n1"].srv.URL+"/admin/ui", "")
	h := resp.Header
	if ct := h.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	if h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("headers %v", h)
	}
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "connect-src 'self'", "script-src 'sha256-", "style-src 'sha256-"} {
		if !strings.Contains(csp, want) {
			t.Fatalf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	page := string(body)
	for _, tag := range []string{"script", "style"} {
		if n := strings.Count(page, "<"+tag); n != 1 || !strings.Contains(page, "<"+tag+">") {
			t.Fatalf("%d <%s> elements, want exactly one, without attributes (its CSP hash covers one)", n, tag)
		}
	}
	if strings.Contains(page, " style=") || strings.Contains(page, "innerHTML") {
		t.Fatal("inline style attributes are refused by the CSP; innerHTML would render tenant names as markup")
	}
	for _, want := range []string{"<!doctype html>", `<svg id="ring"`, "/admin/cluster", "Authorization"} {
		if !strings.Contains(page, want) {
			t.Fatalf("page lacks %q", want)
		}
	}
	if resp, _ := getRaw(t, ms["n1"].srv.URL+"/admin/ui/", ""); resp.StatusCode != 404 {
		t.Fatalf("GET /admin/ui/: %d, want 404", resp.StatusCode)
	}
}

// statsReply decodes /admin/stats.
func statsReply(t *testing.T, url, auth string) statsJSON {
	t.Helper()
	resp, body := getRaw(t, url, auth)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("GET %s: Content-Type %q", url, ct)
	}
	var s statsJSON
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// acquireN makes n acquires for tenant (100 prompt + 50 completion
// tokens) through m's router and returns how many were admitted.
func acquireN(t *testing.T, m *uiMember, tenant string, n int) int {
	t.Helper()
	got := 0
	for range n {
		v, err := m.router.Admit(context.Background(), router.Admission{Tenant: tenant, Req: limiter.Request{PromptTokens: 100, MaxTokens: 50}})
		if err != nil {
			t.Fatal(err)
		}
		if v.Allowed {
			got++
		}
	}
	return got
}

// After known admissions, /admin/stats has exact counters and lists the
// tenants its node owns, nearest their limits first, with what they have
// left; /admin/cluster has every member's, and the ring.
func TestAdminStatsExact(t *testing.T) {
	ms, rg := startUICluster(t, "s3cret", []string{"n1", "n2"})
	const auth = "Bearer s3cret"
	a, b := tenantOwnedBy(t, rg, "n1"), tenantOwnedBy(t, rg, "n2")
	before := time.Now().UnixMilli()
	if got := acquireN(t, ms["n1"], a, 12); got != 10 { // local: 10 admitted, 2 refused
		t.Fatalf("%d of %s admitted, want 10", got, a)
	}
	if got := acquireN(t, ms["n1"], b, 4); got != 4 { // forwarded to n2
		t.Fatalf("%d of %s admitted, want 4", got, b)
	}
	if got := acquireN(t, ms["n2"], b, 1); got != 1 { // local at n2
		t.Fatalf("%d of %s admitted, want 1", got, b)
	}

	// Nodes without gossip hold their mandate; no registry: no counters.
	alone := healthJSON{Ready: true, Mandated: true}
	s1 := statsReply(t, ms["n1"].srv.URL+"/admin/stats", auth)
	if s1.NowMS < before || s1.NowMS > time.Now().UnixMilli() {
		t.Fatalf("now_ms %d not between %d and now", s1.NowMS, before)
	}
	tenantA := tenantJSON{Tenant: a, Owner: "n1", Used: 1, Limits: limitsJSON{
		Requests: dimJSON{Limit: 10, Remaining: 0}, Tokens: dimJSON{Limit: 10_000, Remaining: 8_500}, Concurrency: dimJSON{Limit: 100, Remaining: 90}}}
	tenantB := tenantJSON{Tenant: b, Owner: "n2", Used: 0.5, Limits: limitsJSON{
		Requests: dimJSON{Limit: 10, Remaining: 5}, Tokens: dimJSON{Limit: 10_000, Remaining: 9_250}, Concurrency: dimJSON{Limit: 100, Remaining: 95}}}
	want1 := statsJSON{Node: "n1", NowMS: s1.NowMS, Decisions: countsJSON{Allowed: 14, Refused: 2},
		Calls: callsJSON{Local: 12, Forwarded: 4}, Keys: 1, Tenants: []tenantJSON{tenantA}, Health: alone}
	checkStats(t, s1, want1)

	s2 := statsReply(t, ms["n2"].srv.URL+"/admin/stats", auth)
	want2 := statsJSON{Node: "n2", NowMS: s2.NowMS, Decisions: countsJSON{Allowed: 1},
		Calls: callsJSON{Local: 1}, Keys: 1, Tenants: []tenantJSON{tenantB}, Health: alone}
	checkStats(t, s2, want2)

	if s := statsReply(t, ms["n1"].srv.URL+"/admin/stats?n=0", auth); len(s.Tenants) != 0 {
		t.Fatalf("n=0 listed %v", s.Tenants)
	}
	for _, bad := range []string{"-1", "1001", "x"} {
		if resp, body := getRaw(t, ms["n1"].srv.URL+"/admin/stats?n="+bad, auth); resp.StatusCode != 400 {
			t.Fatalf("n=%s: %d %s, want 400", bad, resp.StatusCode, body)
		}
	}

	// /admin/cluster through n1: n2's stats asked with n1's admin token.
	c := clusterReply(t, ms["n1"].srv.URL+"/admin/cluster", auth)
	if c.Self != "n1" || c.Version != rg.Version() || c.PartitionCount != 271 || len(c.Owners) != 271 || len(c.Members) != 2 {
		t.Fatalf("cluster %+v", c)
	}
	for p, o := range c.Owners {
		if m, _ := rg.PartitionOwner(p); o < 0 || c.Members[o].Name != m.Name {
			t.Fatalf("partition %d: owner index %d, want %s", p, o, m.Name)
		}
	}
	counts := rg.Partitions()
	for i, m := range c.Members {
		if m.Partitions != counts[m.Name] || m.HTTP != ms[m.Name].srv.Listener.Addr().String() || m.Stats == nil || m.Error != "" {
			t.Fatalf("member %d: %+v", i, m)
		}
	}
	want1.NowMS = c.Members[0].Stats.NowMS
	checkStats(t, *c.Members[0].Stats, want1)
	want2.NowMS = c.Members[1].Stats.NowMS
	checkStats(t, *c.Members[1].Stats, want2)
	if !reflect.DeepEqual(c.Tenants, []tenantJSON{tenantA, tenantB}) {
		t.Fatalf("cluster tenants %+v, want %s then %s", c.Tenants, a, b)
	}
	if c := clusterReply(t, ms["n2"].srv.URL+"/admin/cluster?n=1", auth); !reflect.DeepEqual(c.Tenants, []tenantJSON{tenantA}) {
		t.Fatalf("cluster tenants with n=1 %+v, want %s only", c.Tenants, a)
	}
}

// checkStats compares two statsJSON, ignoring the tenants' reset times;
// want's nil series, pools and pool tenants are empty.
func checkStats(t *testing.T, got, want statsJSON) {
	t.Helper()
	if want.Series == nil {
		want.Series = []pointJSON{}
	}
	if want.Pools == nil {
		want.Pools = []poolJSON{}
	}
	if want.PoolTenants == nil {
		want.PoolTenants = map[string][]router.PoolTenant{}
	}
	for i := range got.Tenants {
		l := &got.Tenants[i].Limits
		l.Requests.ResetMS, l.Tokens.ResetMS, l.Concurrency.ResetMS = 0, 0, 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stats\n got %+v\nwant %+v", got, want)
	}
}

func clusterReply(t *testing.T, url, auth string) clusterJSON {
	t.Helper()
	resp, body := getRaw(t, url, auth)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	var c clusterJSON
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	for i := range c.Tenants {
		l := &c.Tenants[i].Limits
		l.Requests.ResetMS, l.Tokens.ResetMS, l.Concurrency.ResetMS = 0, 0, 0
	}
	return c
}

// A member that does not answer, or refuses the token, is listed with why,
// and the others still are.
func TestAdminClusterMemberErrors(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there any more: connection refused
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"admin endpoints need Authorization: Bearer <admin_token>"}`, http.StatusUnauthorized)
	}))
	defer other.Close()
	ms, _ := startUICluster(t, "s3cret", []string{"n1"},
		ring.Member{Name: "n2", HTTP: deadAddr}, ring.Member{Name: "n3", HTTP: other.Listener.Addr().String()}, ring.Member{Name: "n4"})
	c := clusterReply(t, ms["n1"].srv.URL+"/admin/cluster", "Bearer s3cret")
	if len(c.Members) != 4 || c.Members[0].Stats == nil {
		t.Fatalf("members %+v", c.Members)
	}
	for _, tc := range []struct {
		i    int
		want string
	}{{1, "connection refused"}, {2, "401"}, {3, "no HTTP address"}} {
		m := c.Members[tc.i]
		if m.Stats != nil || !strings.Contains(m.Error, tc.want) {
			t.Errorf("member %s: stats %v error %q, want an error with %q", m.Name, m.Stats, m.Error, tc.want)
		}
	}
}
