package gossip

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// serveDNS answers every question about name with an A record for each of
// ips, over TCP on a loopback port (memberlist resolves a join name over
// TCP first), and returns a resolv.conf pointing at it.
func serveDNS(t *testing.T, name string, ips ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := dns.NewServeMux()
	mux.HandleFunc(dns.Fqdn(name), func(w dns.ResponseWriter, q *dns.Msg) {
		r := new(dns.Msg)
		r.SetReply(q)
		for _, ip := range ips {
			r.Answer = append(r.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
				A:   net.ParseIP(ip),
			})
		}
		_ = w.WriteMsg(r)
	})
	srv := &dns.Server{Listener: ln, Handler: mux}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte("nameserver "+ln.Addr().String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// freePort is a loopback port free for TCP and UDP.
func freePort(t *testing.T) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		ln.Close()
		if err == nil {
			pc.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// A join name with several addresses (a Kubernetes headless Service) is
// resolved at every attempt and each address tried: with no member
// listening at first, and then only the last address answering, the node
// retries and joins.
func TestJoinNameWithSeveralAddresses(t *testing.T) {
	const name = "seeds.tokenring.test"
	resolv := serveDNS(t, name, "127.0.0.2", "127.0.0.3", "127.0.0.1")
	seedPort := freePort(t)

	joined := make(chan *Cluster, 1)
	errc := make(chan error, 1)
	cfg := localConfig(t, "joiner", net.JoinHostPort(name, strconv.Itoa(seedPort)))
	cfg.dnsConfigPath = resolv
	cfg.JoinRetries = 50 // 10 s
	begin := time.Now()
	go func() {
		c, err := Start(cfg)
		if err != nil {
			errc <- err
			return
		}
		joined <- c
	}()

	time.Sleep(time.Second) // a few attempts fail: nobody answers yet
	seedCfg := localConfig(t, "seed")
	seedCfg.BindPort = seedPort
	seed := start(t, seedCfg)

	select {
	case c := <-joined:
		t.Cleanup(func() { _ = c.Shutdown() })
		t.Logf("joined %s after %v", name, time.Since(begin))
		waitFor(t, 5*time.Second, "both members everywhere", func() bool {
			return allSee([]*Cluster{seed, c}, "joiner", "seed")
		})
	case err := <-errc:
		t.Fatalf("join %s: %v", name, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Start did not return")
	}
}
