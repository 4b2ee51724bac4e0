package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/internal/testcert"
	"github.com/tokenring/tokenring/node"
)

// testCA issues certificates for the TLS tests.
type testCA struct{ *testcert.CA }

func newTestCA(t testing.TB) *testCA { return &testCA{testcert.New(t)} }

// issue returns a PEM certificate and key signed by ca: a server's for
// 127.0.0.1 when server, else a client's named cn.
func (ca *testCA) issue(t testing.TB, serial int64, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.Sign(t, testcert.Leaf(serial, cn, server))
}

// issueClient returns a client certificate and key signed by ca with
// common name cn (none when empty), DNS SANs dns and URI SANs uris.
func (ca *testCA) issueClient(t testing.TB, serial int64, cn string, dns []string, uris ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	return ca.Sign(t, tmpl)
}

// writeFile writes b to path through a temporary file and a rename, as a
// rotation does (never a half-written file).
func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// startTLSNode serves a one-node router over listenHTTP and newServer
// with hc (http.tls set), as tokenringd does; it returns the address.
func startTLSNode(t testing.TB, hc config.HTTP) string {
	t.Helper()
	cfg := config.Default()
	cfg.HTTP = hc
	addr, _ := startNode(t, cfg, slog.New(slog.DiscardHandler))
	return addr
}

// startNode serves a one-node router made by newRouter from cfg (its
// clients: among the rest) over listenHTTP and newServer with cfg.HTTP,
// as run does, with limits no test reaches and log as the server's
// logger; it returns the address and the server.
func startNode(t testing.TB, cfg config.Config, log *slog.Logger) (string, httpServer) {
	t.Helper()
	cfg.Limits.Default = config.Limits{RPM: 1 << 30, TPM: 1 << 40, Concurrency: 1 << 20}
	cfg.Limits.Window, cfg.Limits.LeaseTTL = time.Minute, time.Minute
	cur := newLive(cfg)
	n, err := node.New(node.Config{Name: "n1", LimitsFor: cur.limits})
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRouter(n, cfg, cur, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := listenHTTP("127.0.0.1:0", cfg.HTTP, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(r, decisions{plain: r.ServePlain, quick: r.ServeQuick}, cfg.HTTP, nil, log)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
		r.Close()
		n.Close()
	})
	return ln.Addr().String(), srv
}

// tlsClient trusts ca and presents cert (none when certPEM is nil).
func tlsClient(t testing.TB, ca *testCA, certPEM, keyPEM []byte) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tc := &tls.Config{RootCAs: roots}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: tc}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// acquire makes one decision over c; it returns the status and the
// serial of the server certificate the connection saw.
func acquire(c *http.Client, addr string) (int, int64, error) { return acquireVia(c, "https", addr) }

// acquireVia is acquire over scheme (serial 0 over http).
func acquireVia(c *http.Client, scheme, addr string) (int, int64, error) {
	resp, err := c.Post(scheme+"://"+addr+"/v1/acquire", "application/json", strings.NewReader(`{"tenant":"acme","prompt_tokens":1,"max_tokens":1}`))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	var serial int64
	if resp.TLS != nil {
		serial = resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	return resp.StatusCode, serial, nil
}

// TestTLSEndToEnd: over the real server constructor with http.tls and a
// client CA, a client with a certificate gets decisions; one without is
// refused at the handshake; the server certificate is rotated (its files
// rewritten) while clients keep calling, with no error, and a new
// connection sees the new certificate.
func TestTLSEndToEnd(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile, caFile := ca.serverFiles(t)
	hc := config.Default().HTTP
	hc.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile}
	addr := startTLSNode(t, hc)

	cc, ck := ca.issue(t, 201, "gw-1", false)
	client := tlsClient(t, ca, cc, ck)
	if code, serial, err := acquire(client, addr); err != nil || code != 200 || serial != 101 {
		t.Fatalf("a decision over mutual TLS: %d, serial %d, %v", code, serial, err)
	}
	if _, _, err := acquire(tlsClient(t, ca, nil, nil), addr); err == nil {
		t.Fatal("a client without a certificate was served")
	}

	// Rotation while 4 clients keep calling over their kept-alive
	// connections.
	var calls, failures atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := tlsClient(t, ca, cc, ck)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if code, _, err := acquire(c, addr); err != nil || code != 200 {
					failures.Add(1)
				}
				calls.Add(1)
			}
		}()
	}
	c2, k2 := ca.issue(t, 102, "server", true)
	writeFile(t, keyFile, k2)
	writeFile(t, certFile, c2)
	var serial int64
	deadline := time.Now().Add(10 * time.Second) // the reloader looks once a second; a bound, not a speed
	for serial != 102 && time.Now().Before(deadline) {
		fresh := tlsClient(t, ca, cc, ck) // a new connection each time
		code, s, err := acquire(fresh, addr)
		if err != nil || code != 200 {
			failures.Add(1)
		}
		serial = s
		fresh.CloseIdleConnections()
	}
	close(stop)
	wg.Wait()
	if serial != 102 || failures.Load() != 0 || calls.Load() == 0 {
		t.Fatalf("after rotation: new connections see serial %d (want 102), %d failures in %d calls", serial, failures.Load(), calls.Load())
	}
}

// TestTLSBadFilesRefuseToStart: http.tls files that do not load stop
// listenHTTP with the field named.
func TestTLSBadFilesRefuseToStart(t *testing.T) {
	hc := config.Default().HTTP
	hc.TLS = config.TLS{CertFile: "/nonexistent/tls.crt", KeyFile: "/nonexistent/tls.key"}
	if _, err := listenHTTP("127.0.0.1:0", hc, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "http.tls") {
		t.Fatalf("missing files: %v", err)
	}
}

// serverFiles writes, in a new temporary directory, a server certificate
// (serial 101) and its key issued by ca, and ca's own certificate, and
// returns the three paths.
func (ca *testCA) serverFiles(t *testing.T) (certFile, keyFile, caFile string) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, caFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, 101, "server", true)
	writeFile(t, certFile, c)
	writeFile(t, keyFile, k)
	writeFile(t, caFile, ca.PEM)
	return certFile, keyFile, caFile
}
