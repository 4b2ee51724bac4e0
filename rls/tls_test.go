package rls

import (
	"crypto/tls"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/internal/testcert"
)

// testCA issues the TLS tests' certificates.
type testCA struct{ *testcert.CA }

func newCA(t *testing.T) *testCA { return &testCA{testcert.New(t)} }

// issue returns a certificate signed by ca: a server's for 127.0.0.1, or
// a client's named cn.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, server bool) tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(ca.Sign(t, testcert.Leaf(serial, cn, server)))
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestTLS: over TLS, a client that trusts the server's CA is answered; one
// that does not fails its handshake (UNAVAILABLE), and nothing is charged.
func TestTLS(t *testing.T) {
	ca := newCA(t)
	server := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, 2, "server", true)}, MinVersion: tls.VersionTLS12}
	req := request("mongo_cps", 0, desc("database", "users"))

	h := start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: newCA(t).Pool}})
	if _, err := h.call(t, "", req); status.Code(err) != codes.Unavailable {
		t.Errorf("a client that does not trust the server: %v, want Unavailable", err)
	}
	if n := h.node.Keys(); n != 0 {
		t.Errorf("%d keys charged by a failed handshake", n)
	}

	h = start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.Pool}})
	if resp := h.must(t, req); resp.GetOverallCode() != pb.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 499 {
		t.Errorf("over TLS: %v", resp)
	}
}

// TestMutualTLS: with a client CA, a client without a certificate fails
// its handshake; one with a certificate the CA issued is answered, and a
// certificate naming a clients: entry authenticates without a token, as
// on -http.
func TestMutualTLS(t *testing.T) {
	ca := newCA(t)
	server := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, 2, "server", true)}, MinVersion: tls.VersionTLS12,
		ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	clients := api.NewClients(map[string][]string{"gw": {"*"}}, map[string]api.CertClient{"envoy-1": {Name: "envoy", Tenants: []string{"*"}}}, nil)
	req := request("mongo_cps", 0, desc("database", "users"))

	h := start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.Pool}, clients: clients})
	if _, err := h.call(t, "gw", req); status.Code(err) != codes.Unavailable {
		t.Errorf("no client certificate: %v, want Unavailable", err)
	}

	other := ca.issue(t, 3, "someone-else", false)
	h = start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{other}}, clients: clients})
	if _, err := h.call(t, "", req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a certificate naming no client, no token: %v, want Unauthenticated", err)
	}
	if _, err := h.call(t, "gw", req); err != nil {
		t.Errorf("a certificate naming no client, with a token: %v", err)
	}

	envoy := ca.issue(t, 4, "envoy-1", false)
	h = start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{envoy}}, clients: clients})
	if resp := h.must(t, req); resp.GetOverallCode() != pb.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 499 {
		t.Errorf("the client certificate of envoy: %v", resp)
	}
}
