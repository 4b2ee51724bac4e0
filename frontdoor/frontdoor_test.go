package frontdoor

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// door is one node behind its front door, served over HTTP.
type door struct {
	*httptest.Server
	token string // sent as Authorization: Bearer, when set
}

func start(t *testing.T, cfg Config) *door {
	t.Helper()
	lim := func(string) limiter.Limits { return limiter.Limits{Requests: 10} }
	n, err := node.New(node.Config{Name: "n1", LimitsFor: lim})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limits = lim
	d, err := New(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(d)
	t.Cleanup(func() {
		hs.Close()
		d.Close()
		n.Close()
	})
	return &door{Server: hs}
}

// reply is an answer: its status and its "error", if any.
type reply struct {
	Code  int
	Error string `json:"error"`
}

// send makes one request and returns its status and body.
func (d *door) send(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, d.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := d.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// do is send for a JSON answer.
func (d *door) do(t *testing.T, method, path, body string) reply {
	t.Helper()
	code, raw := d.send(t, method, path, body)
	r := reply{Code: code}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s %s: %d %q is not JSON: %v", method, path, code, raw, err)
	}
	return r
}

// TestAdminTokenGuardsAllOfAdmin: every path under /admin, existing or not,
// needs the admin token; /admin/ui also takes it as ?token=.
func TestAdminTokenGuardsAllOfAdmin(t *testing.T) {
	s := start(t, Config{AdminToken: "s3cret-admin"})
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
	if code, body := admin.send(t, "GET", "/admin/debug/pprof/goroutine?debug=1", ""); code != http.StatusOK || !strings.Contains(string(body), "goroutine profile:") {
		t.Errorf("GET /admin/debug/pprof/goroutine with the token: %d %.80q, want the profile", code, body)
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

// With client tokens configured, the decision API needs one, but /healthz
// and /readyz do not.
func TestHealthNeedsNoClientToken(t *testing.T) {
	s := start(t, Config{Clients: map[string][]string{"gw-all": {api.AnyTenant}}})
	if r := s.do(t, "POST", "/v1/acquire", `{"tenant":"bob","prompt_tokens":1}`); r.Code != http.StatusUnauthorized {
		t.Fatalf("acquire without a token: %d, want 401", r.Code)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := s.do(t, "GET", p, ""); r.Code != http.StatusOK {
			t.Errorf("GET %s without a token: %d", p, r.Code)
		}
	}
}

// A path no endpoint serves is a 404 in the decision API's error shape.
func TestUnknownPathIs404(t *testing.T) {
	s := start(t, Config{})
	if r := s.do(t, "GET", "/v1/nothing", ""); r.Code != http.StatusNotFound || r.Error != "no such endpoint: /v1/nothing" {
		t.Fatalf("GET /v1/nothing: %d %q, want 404 with its error text", r.Code, r.Error)
	}
}
