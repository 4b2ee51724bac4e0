package gossip

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// idleConns opens n TCP connections to addr that never send a byte, closed
// at the end of the test.
func idleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return conns
}

// TestInboundStreamBudget: of 10 silent connections to a node allowing 4
// inbound streams, exactly 6 are refused and counted in
// tokenring_gossip_conns_rejected_total; the 4 admitted are closed by the
// node once InboundStreamTimeout passes (memberlist alone would keep them
// for its TCPTimeout of 30 s here); then a member joins through the freed
// slots.
func TestInboundStreamBudget(t *testing.T) {
	cfg := localConfig(t, "n1")
	cfg.MaxInboundStreams = 4
	cfg.InboundStreamTimeout = 300 * time.Millisecond
	cfg.TCPTimeout = 30 * time.Second
	n1 := start(t, cfg)
	conns := idleConns(t, n1.Local().Addr, 10)
	waitFor(t, 5*time.Second, "6 streams refused", func() bool { return n1.transport.Rejected() >= 6 })
	closedBy := time.Now().Add(10 * time.Second) // well before TCPTimeout
	for i, c := range conns {
		_ = c.SetReadDeadline(closedBy)
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("connection %d: read %v, want it closed by the node", i, err)
		}
	}
	if got := rejectedMetric(t, n1); got != 6 {
		t.Fatalf("tokenring_gossip_conns_rejected_total = %v, want 6 (10 connections, 4 admitted)", got)
	}
	n2 := start(t, localConfig(t, "n2", n1.Local().Addr))
	cs := []*Cluster{n1, n2}
	waitFor(t, 10*time.Second, "2 members everywhere", func() bool { return allSee(cs, "n1", "n2") })
}

// rejectedMetric is c's tokenring_gossip_conns_rejected_total as
// Prometheus gathers it.
func rejectedMetric(t *testing.T, c *Cluster) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tokenring_gossip_conns_rejected_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("tokenring_gossip_conns_rejected_total not exported")
	return 0
}

func isReset(err error) bool {
	var se *os.SyscallError
	return errors.As(err, &se)
}

func TestValidateInboundBudget(t *testing.T) {
	cfg := localConfig(t, "n1")
	cfg.MaxInboundStreams = -1
	cfg.InboundStreamTimeout = -time.Second
	err := cfg.Validate()
	if err == nil {
		t.Fatal("negative budget accepted")
	}
	for _, want := range []string{"max inbound streams -1 is negative", "inbound stream timeout -1s is negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to say %q", err, want)
		}
	}
}
