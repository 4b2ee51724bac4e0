package rls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tokenring/tokenring/api"
)

// testCA issues the TLS tests' certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate signed by ca: a server's for 127.0.0.1, or
// a client's named cn.
func (ca *testCA) issue(t *testing.T, serial int64, cn string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if server {
		tmpl.IPAddresses, tmpl.ExtKeyUsage = []net.IP{net.IPv4(127, 0, 0, 1)}, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLS: over TLS, a client that trusts the server's CA is answered; one
// that does not fails its handshake (UNAVAILABLE), and nothing is charged.
func TestTLS(t *testing.T) {
	ca := newCA(t)
	server := &tls.Config{Certificates: []tls.Certificate{ca.issue(t, 2, "server", true)}, MinVersion: tls.VersionTLS12}
	req := request("mongo_cps", 0, desc("database", "users"))

	h := start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: newCA(t).pool}})
	if _, err := h.call(t, "", req); status.Code(err) != codes.Unavailable {
		t.Errorf("a client that does not trust the server: %v, want Unavailable", err)
	}
	if n := h.node.Keys(); n != 0 {
		t.Errorf("%d keys charged by a failed handshake", n)
	}

	h = start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.pool}})
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
		ClientCAs: ca.pool, ClientAuth: tls.RequireAndVerifyClientCert}
	clients := api.NewClients(map[string][]string{"gw": {"*"}}, map[string]api.CertClient{"envoy-1": {Name: "envoy", Tenants: []string{"*"}}}, nil)
	req := request("mongo_cps", 0, desc("database", "users"))

	h := start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.pool}, clients: clients})
	if _, err := h.call(t, "gw", req); status.Code(err) != codes.Unavailable {
		t.Errorf("no client certificate: %v, want Unavailable", err)
	}

	other := ca.issue(t, 3, "someone-else", false)
	h = start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{other}}, clients: clients})
	if _, err := h.call(t, "", req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a certificate naming no client, no token: %v, want Unauthenticated", err)
	}
	if _, err := h.call(t, "gw", req); err != nil {
		t.Errorf("a certificate naming no client, with a token: %v", err)
	}

	envoy := ca.issue(t, 4, "envoy-1", false)
	h = start(t, setup{serverTLS: server, clientTLS: &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{envoy}}, clients: clients})
	if resp := h.must(t, req); resp.GetOverallCode() != pb.RateLimitResponse_OK || resp.GetStatuses()[0].GetLimitRemaining() != 499 {
		t.Errorf("the client certificate of envoy: %v", resp)
	}
}
