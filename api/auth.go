package api

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"strings"
)

// clientTokens are the decision API's clients (the config's "clients:"):
// each known by one credential, a token or a TLS client certificate, and
// what it may act for. With none configured the API is open, as on a
// loopback-only node; with any, POST /v1/acquire, /v1/complete, /v1/renew,
// /v1/batch and GET /v1/tenants/{tenant} need a known client (of): a
// missing or unknown credential is a 401, a tenant outside the client's
// list a 403 (in a batch: in that call's slot), and neither changes
// anything.
//
// Tokens are looked up by their SHA-256, so the time a lookup takes tells an
// attacker nothing about how close a guess came to a real token. A
// certificate client is in byCert only: its name and its certificate's
// identity are never tokens.
type clientTokens struct {
	byHash map[[sha256.Size]byte]tenantSet
	byCert map[string]certClient // by the identity the certificate carries
}

// CertClient is a client known by its TLS client certificate
// (Config.ClientCerts): the name of its clients: entry, for messages, and
// the tenants it may act for (AnyTenant for all).
type CertClient struct {
	Name    string
	Tenants []string
	// MaySetLimits lets the client send limits with its acquires.
	MaySetLimits bool
}

// certClient is a CertClient as looked up.
type certClient struct {
	name    string
	tenants tenantSet
}

// tenantSet is the tenants one client may act for.
type tenantSet struct {
	all   bool // "*"
	names map[string]bool
	// setLimits: the client may send limits with its acquires
	// (Config.LimitSetters, CertClient.MaySetLimits; an open API).
	setLimits bool
}

// openAPI is what any caller may do when no clients are configured.
func openAPI() tenantSet { return tenantSet{all: true, setLimits: true} }

// AnyTenant in a client's tenant list allows every tenant.
const AnyTenant = "*"

// newClientTokens returns the clients of tokens (token -> tenants) and
// certs (identity -> client), the tokens in setters being allowed to send
// limits; nil, an open API, when there are none.
func newClientTokens(tokens map[string][]string, certs map[string]CertClient, setters map[string]bool) *clientTokens {
	if len(tokens) == 0 && len(certs) == 0 {
		return nil
	}
	c := &clientTokens{byHash: make(map[[sha256.Size]byte]tenantSet, len(tokens)), byCert: make(map[string]certClient, len(certs))}
	for tok, tenants := range tokens {
		set := newTenantSet(tenants)
		set.setLimits = setters[tok]
		c.byHash[sha256.Sum256([]byte(tok))] = set
	}
	for id, cc := range certs {
		set := newTenantSet(cc.Tenants)
		set.setLimits = cc.MaySetLimits
		c.byCert[id] = certClient{name: cc.Name, tenants: set}
	}
	return c
}

func newTenantSet(tenants []string) tenantSet {
	set := tenantSet{names: map[string]bool{}}
	for _, t := range tenants {
		if t == AnyTenant {
			set.all = true
		}
		set.names[t] = true
	}
	return set
}

// authError is a refused credential: its status (401 or 403) and message.
type authError struct {
	code int
	msg  string
}

// bearerOf returns the token of an Authorization header's value a.
func bearerOf(a string) (string, bool) {
	if len(a) <= len("bearer ") || !strings.EqualFold(a[:len("bearer ")], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(a[len("bearer "):]), true
}

// client returns the tenants req's client may act for; nil c allows all.
func (c *clientTokens) client(req *http.Request) (tenantSet, *authError) {
	if c == nil {
		return openAPI(), nil
	}
	return c.of(req.Header.Get("Authorization"), req.TLS)
}

// of returns the tenants the caller may act for (c not nil), given its
// Authorization header's value and its TLS connection's state cs (nil
// when not TLS, as on the fast path, which never serves TLS):
//   - a bearer token decides alone: it must be a token client's (never a
//     certificate client's name or identity), else a 401. A request that
//     also presents a certificate naming a client is refused (401): an
//     entry has one credential, so the two name different clients, and a
//     request acts for one.
//   - without a token, a verified certificate (cs.VerifiedChains: the
//     client CA checked it) naming exactly one certificate client acts as
//     that client; naming none, or several, is a 401.
func (c *clientTokens) of(authorization string, cs *tls.ConnectionState) (tenantSet, *authError) {
	cc, named, certErr := c.certClient(cs)
	if tok, ok := bearerOf(authorization); ok {
		set, known := c.byHash[sha256.Sum256([]byte(tok))]
		switch {
		case !known:
			return tenantSet{}, &authError{http.StatusUnauthorized, "unknown client token"}
		case named || certErr != nil:
			return tenantSet{}, &authError{http.StatusUnauthorized, "this request sends a client token and a client certificate named in clients:, which name different clients: send one"}
		}
		return set, nil
	}
	switch {
	case certErr != nil:
		return tenantSet{}, certErr
	case named:
		return cc.tenants, nil
	case verifiedLeaf(cs) != nil && len(c.byCert) > 0:
		return tenantSet{}, &authError{http.StatusUnauthorized, "this client certificate names no clients: entry (its subject common name, DNS SANs and URI SANs are matched exactly), and no client token was sent"}
	case len(c.byCert) > 0:
		return tenantSet{}, &authError{http.StatusUnauthorized, "this node needs a client token or certificate: send Authorization: Bearer <token>, or over TLS a client certificate named in clients:"}
	}
	return tenantSet{}, &authError{http.StatusUnauthorized, "this node needs a client token: send Authorization: Bearer <token>"}
}

// certClient returns the certificate client that the verified leaf of cs
// names by its subject common name, a DNS SAN or a URI SAN (exactly).
// named is false for no TLS, no verified chain or no such client; err is
// the 401 for a certificate naming two clients.
func (c *clientTokens) certClient(cs *tls.ConnectionState) (cc certClient, named bool, err *authError) {
	leaf := verifiedLeaf(cs)
	if leaf == nil || len(c.byCert) == 0 {
		return certClient{}, false, nil
	}
	ids := make([]string, 0, 1+len(leaf.DNSNames)+len(leaf.URIs))
	if leaf.Subject.CommonName != "" {
		ids = append(ids, leaf.Subject.CommonName)
	}
	ids = append(ids, leaf.DNSNames...)
	for _, u := range leaf.URIs {
		ids = append(ids, u.String())
	}
	for _, id := range ids {
		e, ok := c.byCert[id]
		if !ok || named && e.name == cc.name {
			continue
		}
		if named {
			return certClient{}, false, &authError{http.StatusUnauthorized,
				"this client certificate names two clients: entries, " + quote(cc.name) + " and " + quote(e.name) + ": a certificate may name one"}
		}
		cc, named = e, true
	}
	return cc, named, nil
}

// verifiedLeaf is the client certificate of cs that the client CA
// verified; nil when there is none (no TLS, no client CA). Every verified
// chain starts with the same leaf.
func verifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// callerTenants returns the tenants req's client (its token or, over TLS,
// its certificate) may act for, or the 401 to answer.
func (s *Server) callerTenants(req *http.Request) (tenantSet, *apiAnswer) {
	return s.clients.Load().answer(req.Header.Get("Authorization"), req.TLS)
}

// tenantsOf returns the tenants the client token in an Authorization
// header's value may act for, or the 401 to answer: the fast path's
// callers, never over TLS.
func (s *Server) tenantsOf(authorization string) (tenantSet, *apiAnswer) {
	return s.clients.Load().answer(authorization, nil)
}

// answer is of as an apiAnswer (nil c allows all).
func (c *clientTokens) answer(authorization string, cs *tls.ConnectionState) (tenantSet, *apiAnswer) {
	if c == nil {
		return openAPI(), nil
	}
	set, err := c.of(authorization, cs)
	if err != nil {
		a := errorAnswer(err.code, err.msg)
		a.wwwAuth = err.code == http.StatusUnauthorized
		return set, &a
	}
	return set, nil
}

// allows reports whether the set holds tenant.
func (s tenantSet) allows(tenant string) bool { return s.all || s.names[tenant] }

// authorize checks that req's client may act for tenant, writing the 401
// or 403 and returning false when not.
func (s *Server) authorize(w http.ResponseWriter, req *http.Request, tenant string) bool {
	set, err := s.clients.Load().client(req)
	if err == nil && !set.allows(tenant) {
		err = &authError{http.StatusForbidden, "this client may not act for tenant " + quote(tenant)}
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

// authenticated wraps h so that, when clients are configured, a request
// from no known client is refused with a 401 before its body is
// read; the per-tenant check (authorize) follows once the tenant is known.
func (s *Server) authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if _, err := s.clients.Load().client(req); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tokenring"`)
			writeError(w, err.code, err.msg)
			return
		}
		h(w, req)
	}
}

func quote(s string) string { return `"` + s + `"` }
