package test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fdLimitPrefix is a Proc.Prefix that starts tokenringd with an open-file
// limit of n (soft and hard), as `ulimit -n n` would; sh execs it, so the
// node keeps its pid.
func fdLimitPrefix(n int) []string {
	return []string{"sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$@"`, n), "sh"}
}

// raiseFDLimit lifts this test process's soft open-file limit to its hard
// one, and skips t when that is under need: the floods hold their
// connections' descriptors here as well as at the node.
func raiseFDLimit(t *testing.T, need uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
	}
	if rl.Cur < need {
		t.Skipf("open-file limit %d, need %d", rl.Cur, need)
	}
}

// idleFlood opens n TCP connections to addr that never send a byte and
// returns them (each dial bounded by a second; those that fail are not
// counted). The caller closes them.
func idleFlood(addr string, n int) []net.Conn {
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return conns
}

// pollNode asks p's /healthz and /v1/acquire, each on a new connection
// (as a load balancer and a new gateway connection do: each needs a
// descriptor at the node), every 50 ms until stop is closed, and returns
// how many polls it made and how many failed (an error or a status other
// than 200).
func pollNode(p *Proc, stop <-chan struct{}) (polls, failed int, firstErr string) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, ask := range []func() (int, error){
			func() (int, error) {
				resp, err := client.Get(p.URL() + "/healthz")
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			},
			func() (int, error) {
				code, _, err := Post(context.Background(), client, p.URL()+"/v1/acquire", `{"tenant":"flooded","prompt_tokens":1}`)
				return code, err
			},
		} {
			polls++
			if code, err := ask(); err != nil || code != http.StatusOK {
				failed++
				if firstErr == "" {
					firstErr = fmt.Sprintf("%d %v", code, err)
				}
			}
		}
		select {
		case <-stop:
			return polls, failed, firstErr
		case <-tick.C:
		}
	}
}

// TestGossipFloodUnderFDLimit: the critical finding. A node under
// `ulimit -n 1024` gets 1,200 idle TCP connections to its gossip port
// (memberlist alone held each for 10 s: the node ran out of descriptors
// and exited on the next HTTP accept). With the gossip budget it stays
// up, answers every /healthz and /v1/acquire polled during the flood, and
// counts the connections it refused.
func TestGossipFloodUnderFDLimit(t *testing.T) {
	needFull(t)
	raiseFDLimit(t, 2048)
	c := NewClusterWith(t, daemon, 1, `
cluster_secret: "`+testSecret+`"
limits:
  default: {rpm: 1000000, tpm: 1000000000, concurrency: 1000}
`, ClusterOptions{Place: func(p *Proc) {
		p.HTTP = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Peer = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Gossip = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
		p.Prefix = fdLimitPrefix(1024)
	}})
	p := c.Nodes()[0]
	stop := make(chan struct{})
	type result struct {
		polls, failed int
		first         string
	}
	done := make(chan result, 1)
	go func() {
		polls, failed, first := pollNode(p, stop)
		done <- result{polls, failed, first}
	}()
	conns := idleFlood(p.Gossip, 1200)
	t.Logf("%d idle connections open to -gossip", len(conns))
	// Hold them through two of the node's 1 s inbound deadlines, then once
	// more as many.
	time.Sleep(2500 * time.Millisecond) // the flood's duration, not a wait for an event
	conns = append(conns, idleFlood(p.Gossip, 1200-len(conns)+200)...)
	time.Sleep(1500 * time.Millisecond) // the second flood's duration, as the first's
	close(stop)
	r := <-done
	for _, c := range conns {
		c.Close()
	}
	if !p.Alive() {
		t.Fatalf("the node exited under the flood:\n%s", tail(p.Log(), 20))
	}
	if r.polls < 20 || r.failed != 0 {
		t.Fatalf("%d of %d polls of /healthz and /v1/acquire failed during the flood (first: %s), want 0 of at least 20\n%s",
			r.failed, r.polls, r.first, tail(p.Log(), 20))
	}
	if got := metric(t, p, "tokenring_gossip_conns_rejected_total"); got <= 0 {
		t.Fatalf("tokenring_gossip_conns_rejected_total = %v, want > 0", got)
	}
	t.Logf("%d polls, 0 failed; %v gossip connections rejected", r.polls, metric(t, p, "tokenring_gossip_conns_rejected_total"))
}
