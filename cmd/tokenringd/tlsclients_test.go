package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tokenring/tokenring/config"
)

// callAs acquires one decision for tenant over c, with token as the
// bearer token when not empty; it returns the status and the body.
func callAs(t *testing.T, c *http.Client, addr, tenant, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", "https://"+addr+"/v1/acquire", strings.NewReader(`{"tenant":"`+tenant+`","prompt_tokens":1,"max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("acquire for %s: %v", tenant, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// TestTLSClientCertsEndToEnd: a config (parsed from YAML, certificates
// made here) whose clients: name certificates by URI SAN, DNS SAN and
// common name, served by the real server constructor over mutual TLS: a
// client whose certificate names an entry is allowed exactly its tenants
// (200 for its tenant, 403 for another); a certificate naming no entry is
// a 401; a cert entry's name or certificate identity sent as a bearer
// token is a 401; a token with a certificate naming an entry is a 401;
// a token with a certificate naming none acts as the token.
func TestTLSClientCertsEndToEnd(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile, caFile := ca.serverFiles(t)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
http:
  tls: {cert_file: %s, key_file: %s, client_ca_file: %s}
clients:
  tok-acme: {tenants: [acme]}
  gw-1: {cert: "spiffe://acme/gw-1", tenants: [acme]}
  gw-2: {cert: gw-2.acme.test, tenants: [beta]}
  gw-3: {cert: gw-3, tenants: [gamma]}
`, certFile, keyFile, caFile)), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startNode(t, cfg, slog.New(slog.DiscardHandler))
	client := func(serial int64, cn string, dns []string, uris ...string) *http.Client {
		c, k := ca.issueClient(t, serial, cn, dns, uris...)
		return tlsClient(t, ca, c, k)
	}
	byURI := client(201, "not-an-entry", nil, "spiffe://acme/gw-1")
	byDNS := client(202, "", []string{"other.acme.test", "gw-2.acme.test"})
	byCN := client(203, "gw-3", nil)
	stranger := client(204, "gw-9", []string{"gw-9.acme.test"}, "spiffe://acme/gw-9")
	for _, tc := range []struct {
		name          string
		c             *http.Client
		tenant, token string
		code          int
	}{
		{"URI SAN, its tenant", byURI, "acme", "", 200},
		{"URI SAN, another tenant", byURI, "beta", "", 403},
		{"DNS SAN, its tenant", byDNS, "beta", "", 200},
		{"DNS SAN, another tenant", byDNS, "acme", "", 403},
		{"CN, its tenant", byCN, "gamma", "", 200},
		{"CN, another tenant", byCN, "beta", "", 403},
		{"a certificate naming no entry", stranger, "acme", "", 401},
		{"an entry's name as a token", stranger, "acme", "gw-1", 401},
		{"an entry's cert as a token", stranger, "acme", "spiffe://acme/gw-1", 401},
		{"an entry's cert as a token with its certificate", byURI, "acme", "spiffe://acme/gw-1", 401},
		{"a token with a certificate naming an entry", byURI, "acme", "tok-acme", 401},
		{"a token with a certificate naming none", stranger, "acme", "tok-acme", 200},
		{"that token, another tenant", stranger, "beta", "tok-acme", 403},
	} {
		if code, body := callAs(t, tc.c, addr, tc.tenant, tc.token); code != tc.code {
			t.Errorf("%s: %d %s, want %d", tc.name, code, body, tc.code)
		}
	}
}

// withNoFileLimit runs f with the soft open-file limit at limit, restored
// after (a new http server reads it when it is made).
func withNoFileLimit(t *testing.T, limit uint64, f func()) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip(err)
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err != nil || uint64(len(fds)) > limit/2 {
		t.Skipf("%d descriptors open (%v): too many to lower the limit to %d for a moment", len(fds), err, limit)
	}
	low := rl
	low.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
	}()
	f()
}

// TestHTTPReserveRefusalsExported: both servers of -http (the fast path's
// and TLS's), made while the open-file limit leaves every descriptor
// within the 64 of the reserve, close a new connection at once, count it
// in tokenring_http_conns_reserve_refused_total and warn on the logger
// newServer was given.
func TestHTTPReserveRefusalsExported(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	sc, sk := ca.issue(t, 101, "server", true)
	writeFile(t, certFile, sc)
	writeFile(t, keyFile, sk)
	for _, tlsOn := range []bool{false, true} {
		cfg := config.Default()
		if tlsOn {
			cfg.HTTP.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile}
		}
		var logs lockedBuffer
		var addr string
		var srv httpServer
		withNoFileLimit(t, 67, func() { // the reserve starts at descriptor 3
			addr, srv = startNode(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		n, err := c.Read(make([]byte, 512))
		c.Close()
		if n != 0 || err == nil || os.IsTimeout(err) {
			t.Errorf("tls %v: a connection within the reserve read %d bytes, %v; want closed at once", tlsOn, n, err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(serverCollectors(srv)...)
		if got := metricValue(t, reg, "tokenring_http_conns_reserve_refused_total"); got != 1 {
			t.Errorf("tls %v: tokenring_http_conns_reserve_refused_total = %v, want 1", tlsOn, got)
		}
		// The warning follows the close: wait for it.
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "descriptor reserve") && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if !strings.Contains(logs.String(), "descriptor reserve") {
			t.Errorf("tls %v: no warning on the server's logger: %q", tlsOn, logs.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger's writes while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// metricValue is the value of the counter or gauge name in reg (-1 when
// absent).
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return -1
}
