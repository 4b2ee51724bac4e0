package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// clientTokens are the decision API's client tokens (the config's
// "clients:"): what each token may act for. With none configured the API is
// open, as on a loopback-only node; with any, POST /v1/acquire, /v1/complete,
// /v1/renew, /v1/batch and GET /v1/tenants/{tenant} need "Authorization:
// Bearer <token>": a missing or unknown token is a 401, a tenant outside the
// token's list a 403 (in a batch: in that call's slot), and neither changes
// anything.
//
// Tokens are looked up by their SHA-256, so the time a lookup takes tells an
// attacker nothing about how close a guess came to a real token.
type clientTokens struct {
	byHash map[[sha256.Size]byte]tenantSet
}

// tenantSet is the tenants one token may act for.
type tenantSet struct {
	all   bool // "*"
	names map[string]bool
}

// AnyTenant in a client's tenant list allows every tenant.
const AnyTenant = "*"

func newClientTokens(clients map[string][]string) *clientTokens {
	if len(clients) == 0 {
		return nil
	}
	c := &clientTokens{byHash: make(map[[sha256.Size]byte]tenantSet, len(clients))}
	for tok, tenants := range clients {
		set := tenantSet{names: map[string]bool{}}
		for _, t := range tenants {
			if t == AnyTenant {
				set.all = true
			}
			set.names[t] = true
		}
		c.byHash[sha256.Sum256([]byte(tok))] = set
	}
	return c
}

// authError is a refused credential: its status (401 or 403) and message.
type authError struct {
	code int
	msg  string
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(h http.Header) (string, bool) { return bearerOf(h.Get("Authorization")) }

// bearerOf returns the token of an Authorization header's value a.
func bearerOf(a string) (string, bool) {
	if len(a) <= len("bearer ") || !strings.EqualFold(a[:len("bearer ")], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(a[len("bearer "):]), true
}

// client returns the tenants req's token may act for; nil c allows all.
func (c *clientTokens) client(req *http.Request) (tenantSet, *authError) {
	if c == nil {
		return tenantSet{all: true}, nil
	}
	return c.of(req.Header.Get("Authorization"))
}

// of returns the tenants the token of the Authorization header's value
// authorization may act for (c not nil).
func (c *clientTokens) of(authorization string) (tenantSet, *authError) {
	tok, ok := bearerOf(authorization)
	if !ok {
		return tenantSet{}, &authError{http.StatusUnauthorized, "this node needs a client token: send Authorization: Bearer <token>"}
	}
	set, ok := c.byHash[sha256.Sum256([]byte(tok))]
	if !ok {
		return tenantSet{}, &authError{http.StatusUnauthorized, "unknown client token"}
	}
	return set, nil
}

// allows reports whether the set holds tenant.
func (s tenantSet) allows(tenant string) bool { return s.all || s.names[tenant] }

// authorize checks that req's token may act for tenant, writing the 401 or
// 403 and returning false when not.
func (r *Router) authorize(w http.ResponseWriter, req *http.Request, tenant string) bool {
	set, err := r.clients.client(req)
	if err == nil && !set.allows(tenant) {
		err = &authError{http.StatusForbidden, "this client token may not act for tenant " + quote(tenant)}
	}
	if err != nil {
		if err.code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenring"`)
		}
		writeError(w, err.code, err.msg)
		return false
	}
	return true
}

// authenticated wraps h so that, when client tokens are configured, a
// request without a known token is refused with a 401 before its body is
// read; the per-tenant check (authorize) follows once the tenant is known.
func (r *Router) authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if _, err := r.clients.client(req); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenring"`)
			writeError(w, err.code, err.msg)
			return
		}
		h(w, req)
	}
}

func quote(s string) string { return `"` + s + `"` }

// adminGuard refuses every /admin/ path without the admin token (when one is
// configured), whether or not the path exists: new admin endpoints are
// guarded without having to remember it. /admin/ui also takes the token as
// ?token=, since a browser cannot send the header on navigation. /metrics,
// /healthz and /readyz stay open: they hold no tenant's data.
func (r *Router) adminGuard(next http.Handler) http.Handler {
	tok := r.cfg.AdminToken
	if tok == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasPrefix(req.URL.Path, "/admin") {
			next.ServeHTTP(w, req)
			return
		}
		got, _ := bearer(req.Header)
		ok := sameToken(got, tok)
		if req.URL.Path == "/admin/ui" {
			ok = ok || sameToken(req.URL.Query().Get("token"), tok)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenring admin"`)
			writeError(w, http.StatusUnauthorized, "admin endpoints need Authorization: Bearer <admin_token>; in a browser open /admin/ui?token=<admin_token>")
			return
		}
		next.ServeHTTP(w, req)
	})
}

// sameToken compares two tokens in constant time: their SHA-256s, so that
// not even the length of the wanted token shows in the timing.
func sameToken(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
