package api

import (
	"crypto/tls"
	"errors"
)

// Clients is the decision API's client check (the config's "clients:",
// clientTokens) for a front end of its own: the gRPC rate limit service
// (package rls) takes the same tokens and certificates. The zero value,
// and one made with no clients, is an open service: anyone may call and
// send limits. Safe for concurrent use; immutable.
type Clients struct{ c *clientTokens }

// NewClients returns the check of tokens (token -> tenants), certs
// (identity -> client) and setters (the tokens that may send limits), as
// Config.Clients, ClientCerts and LimitSetters are.
func NewClients(tokens map[string][]string, certs map[string]CertClient, setters map[string]bool) Clients {
	return Clients{newClientTokens(tokens, certs, setters)}
}

// Caller is a client Authenticate knew.
type Caller struct{ set tenantSet }

// MaySetLimits reports whether the caller may send limits with its
// requests (clients: may_set_limits; anyone, on an open service).
func (c Caller) MaySetLimits() bool { return c.set.setLimits }

// Allows reports whether the caller may act for tenant.
func (c Caller) Allows(tenant string) bool { return c.set.allows(tenant) }

// Authenticate returns the caller of a request given its Authorization
// value ("Bearer <token>"; "" for none) and its TLS connection's state
// (nil when not TLS), by the decision API's rules (clientTokens.of); an
// error, whose text says what to send, for a caller it does not know.
func (c Clients) Authenticate(authorization string, cs *tls.ConnectionState) (Caller, error) {
	if c.c == nil {
		return Caller{openAPI()}, nil
	}
	set, err := c.c.of(authorization, cs)
	if err != nil {
		return Caller{}, errors.New(err.msg)
	}
	return Caller{set}, nil
}
