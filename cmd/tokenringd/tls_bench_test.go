package main

import (
	"path/filepath"
	"testing"

	"github.com/tokenring/tokenring/config"
)

// BenchmarkDecisionPlainVsTLS: one sequential decision (POST /v1/acquire)
// over a kept-alive connection, through the real server constructor, over
// plain HTTP (the fast path) and over TLS (net/http), in the same run.
func BenchmarkDecisionPlainVsTLS(b *testing.B) {
	ca := newTestCA(b)
	dir := b.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(b, 7, "server", true)
	writeFile(b, certFile, c)
	writeFile(b, keyFile, k)
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			hc := config.Default().HTTP
			scheme := "http"
			if mode == "tls" {
				hc.TLS = config.TLS{CertFile: certFile, KeyFile: keyFile}
				scheme = "https"
			}
			addr := startTLSNode(b, hc)
			client := tlsClient(b, ca, nil, nil)
			if _, _, err := acquireVia(client, scheme, addr); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if code, _, err := acquireVia(client, scheme, addr); err != nil || code != 200 {
					b.Fatalf("%d %v", code, err)
				}
			}
		})
	}
}
