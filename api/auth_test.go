package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/internal/http1"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/router"
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
}

// certRouter is a router with one token client (tok-1: acme) and three
// certificate clients: gw-1 by a URI SAN (acme), gw-2 by a DNS SAN (beta),
// gw-3 by a subject common name (gamma).
func certRouter(t *testing.T) *testAPI {
	t.Helper()
	lim := func(string) limiter.Limits {
		return limiter.Limits{Requests: 100, Tokens: 1 << 20, Concurrency: 100, Window: time.Minute, LeaseTTL: time.Minute}
	}
	n, err := node.New(node.Config{Name: "n1", LimitsFor: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return newAPI(t, n, router.Config{Limits: lim}, Config{
		Clients: map[string][]string{"tok-1": {"acme"}},
		ClientCerts: map[string]CertClient{
			"spiffe://acme/gw-1": {Name: "gw-1", Tenants: []string{"acme"}},
			"gw-2.acme.test":     {Name: "gw-2", Tenants: []string{"beta"}},
			"gw-3":               {Name: "gw-3", Tenants: []string{"gamma"}},
		}})
}

// leaf is a client certificate with common name cn, DNS SANs dns and URI
// SANs uris (no signature: the router reads a chain the TLS layer verified).
func leaf(t *testing.T, cn string, dns []string, uris ...string) *x509.Certificate {
	t.Helper()
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, DNSNames: dns}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		c.URIs = append(c.URIs, u)
	}
	return c
}

// verified is the TLS state of a connection whose client CA verified c.
func verified(c *x509.Certificate) *tls.ConnectionState {
	return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
}

// TestClientCerts: over TLS, a request without a token acts as the
// certificate client its verified certificate names (by URI SAN, DNS SAN
// or common name, exactly), allowed exactly that client's tenants on every
// decision endpoint; a certificate naming no client, an unverified one,
// one naming two clients, a certificate client's name or identity sent as
// a token, and a token sent with a certificate that names a client are
// 401s. A token with a certificate naming no client acts as the token.
func TestClientCerts(t *testing.T) {
	r := certRouter(t)
	gw1 := verified(leaf(t, "something-else", nil, "spiffe://acme/gw-1"))
	gw2 := verified(leaf(t, "", []string{"other.test", "gw-2.acme.test"}))
	gw3 := verified(leaf(t, "gw-3", nil))
	stranger := verified(leaf(t, "gw-9", []string{"gw-9.acme.test"}, "spiffe://acme/gw-9"))
	acquire := func(tenant string) string { return `{"tenant":"` + tenant + `","prompt_tokens":1}` }
	for _, tc := range []struct {
		name, method, path, body, token string
		cs                              *tls.ConnectionState
		code                            int
	}{
		{"URI SAN, its tenant", "POST", "/v1/acquire", acquire("acme"), "", gw1, 200},
		{"URI SAN, another tenant", "POST", "/v1/acquire", acquire("beta"), "", gw1, 403},
		{"DNS SAN, its tenant", "POST", "/v1/acquire", acquire("beta"), "", gw2, 200},
		{"DNS SAN, another tenant", "POST", "/v1/acquire", acquire("acme"), "", gw2, 403},
		{"CN, its tenant", "POST", "/v1/acquire", acquire("gamma"), "", gw3, 200},
		{"CN, another tenant", "POST", "/v1/acquire", acquire("acme"), "", gw3, 403},
		{"CN, its usage", "GET", "/v1/tenants/gamma", "", "", gw3, 200},
		{"CN, another's usage", "GET", "/v1/tenants/acme", "", "", gw3, 403},
		{"batch, its tenant", "POST", "/v1/batch", `{"calls":[{"op":"acquire","tenant":"acme","prompt_tokens":1}]}`, "", gw1, 200},
		{"a certificate naming no client", "POST", "/v1/acquire", acquire("acme"), "", stranger, 401},
		{"a certificate naming no client, usage", "GET", "/v1/tenants/acme", "", "", stranger, 401},
		{"an unverified certificate", "POST", "/v1/acquire", acquire("acme"), "",
			&tls.ConnectionState{PeerCertificates: gw1.PeerCertificates}, 401},
		{"a certificate naming two clients", "POST", "/v1/acquire", acquire("acme"), "", verified(leaf(t, "gw-3", nil, "spiffe://acme/gw-1")), 401},
		{"no TLS, no token", "POST", "/v1/acquire", acquire("acme"), "", nil, 401},
		{"a client's name as a token", "POST", "/v1/acquire", acquire("acme"), "gw-1", nil, 401},
		{"a client's URI as a token", "POST", "/v1/acquire", acquire("acme"), "spiffe://acme/gw-1", nil, 401},
		{"a client's name as a token with its certificate", "POST", "/v1/acquire", acquire("acme"), "gw-1", gw1, 401},
		{"a token with a certificate naming a client", "POST", "/v1/acquire", acquire("acme"), "tok-1", gw1, 401},
		{"a token with a certificate naming none", "POST", "/v1/acquire", acquire("acme"), "tok-1", stranger, 200},
		{"a token without TLS", "POST", "/v1/acquire", acquire("acme"), "tok-1", nil, 200},
	} {
		req := httptest.NewRequest(tc.method, "https://node"+tc.path, strings.NewReader(tc.body))
		req.TLS = tc.cs
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, strings.TrimSpace(w.Body.String()), tc.code)
		}
		if tc.code == 200 && tc.path == "/v1/batch" && !strings.Contains(w.Body.String(), `"allowed":true`) {
			t.Errorf("%s: %s", tc.name, w.Body.String())
		}
	}
	// The fast path (never TLS) takes no certificate client's name or
	// identity as a token either.
	for _, tok := range []string{"gw-1", "spiffe://acme/gw-1", "gw-3"} {
		body := acquire("acme")
		req := http1.Request{Path: []byte("/v1/acquire"), Authorization: []byte("Bearer " + tok), Body: []byte(body), ContentLength: int64(len(body))}
		var resp http1.Response
		if !r.ServePlain(context.Background(), &req, &resp) || resp.Status != http.StatusUnauthorized {
			t.Errorf("fast path, token %q: %d, want 401", tok, resp.Status)
		}
	}
}
