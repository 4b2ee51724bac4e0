package test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// multiHostConfig: every tenant mh-00..mh-29 is bound by 50 requests a
// minute; "roll" is effectively unlimited, for the load of the rolling
// restart. A short drain: HAProxy checks /readyz every 100 ms.
func multiHostConfig() string {
	var b strings.Builder
	b.WriteString("limits:\n  default: {rpm: 50, tpm: 100000000, concurrency: 100000}\n  tenants:\n")
	b.WriteString("    roll: {rpm: 10000000, tpm: 1000000000, concurrency: 100000}\n")
	b.WriteString("  window: 120s\n  lease_ttl: 120s\ndrain: 2s\n")
	return b.String()
}

// startLabHAProxy runs HAProxy in TCP mode inside the namespace of host, on
// host.IP:8080, round robin over procs (by their HTTP address) with GET
// /readyz health checks, and returns a Proc the test reaches it by and its
// stats socket (a file: reached from any namespace). It is stopped by
// t.Cleanup.
func startLabHAProxy(t *testing.T, host *labNode, procs []*Proc) (*Proc, haproxyStats) {
	t.Helper()
	bin := needCommand(t, "haproxy")
	dir := t.TempDir()
	stats := haproxyStats(filepath.Join(dir, "stats.sock"))
	var servers strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&servers, "    server %s %s check\n", p.Name, p.HTTP)
	}
	addr := host.IP + ":8080"
	cfg := fmt.Sprintf(`global
    maxconn 4096
    stats socket %s mode 600 level user
defaults
    mode tcp
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout check 500ms
    retries 3
    option redispatch
frontend tokenring
    bind %s
    default_backend nodes
backend nodes
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 100 fall 1 rise 2
%s`, stats, addr, servers.String())
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", host.NS, bin, "-db", "-f", path)
	cmd.SysProcAttr = dieWithTest()
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("haproxy output:\n%s", out.String())
		}
	})
	dial := nsDialer(host.NS)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("haproxy exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy not listening on %s in %s: %v\n%s", addr, host.NS, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &Proc{Name: "haproxy", HTTP: addr, Client: nsClient(host.NS)}, stats
}

// labMetric sums the samples of a Prometheus metric on p's /metrics,
// fetched with p's client.
func labMetric(p *Proc, name string) (float64, error) {
	resp, err := p.client().Get(p.URL() + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// checkAdvertised fails unless every node's /admin/ring lists the same
// members and version, each member advertising its namespace address (the
// one -advertise gave) with the shared ports, never an unspecified address.
func checkAdvertised(t *testing.T, c *Cluster, lab *netLab) {
	t.Helper()
	type member struct {
		Name string `json:"name"`
		HTTP string `json:"http"`
		Peer string `json:"peer"`
	}
	type ring struct {
		Version string   `json:"version"`
		Members []member `json:"members"`
	}
	var first string
	for _, p := range c.Live() {
		var r ring
		if err := p.GetJSON("/admin/ring", &r); err != nil {
			t.Fatalf("%s: /admin/ring: %v", p.Name, err)
		}
		if len(r.Members) != len(c.Live()) {
			t.Fatalf("%s sees %d members, want %d: %+v", p.Name, len(r.Members), len(c.Live()), r.Members)
		}
		for _, m := range r.Members {
			ip := lab.node(m.Name).IP
			if m.HTTP != ip+":8095" || m.Peer != ip+":7996" {
				t.Errorf("%s sees %s advertising http %s peer %s, want %s:8095 and %s:7996", p.Name, m.Name, m.HTTP, m.Peer, ip, ip)
			}
			for _, a := range []string{m.HTTP, m.Peer} {
				host, _, _ := net.SplitHostPort(a)
				if addr := net.ParseIP(host); addr == nil || addr.IsUnspecified() || addr.IsLoopback() {
					t.Errorf("%s sees %s advertising %s", p.Name, m.Name, a)
				}
			}
		}
		line := fmt.Sprintf("%s %+v", r.Version, r.Members)
		if first == "" {
			first = line
			t.Logf("ring (as %s sees it): %s", p.Name, line)
		} else if line != first {
			t.Errorf("%s's ring differs:\n  %s\nwant\n  %s", p.Name, line, first)
		}
	}
}

// Three "hosts" (network namespaces on one bridge), each node bound to
// 0.0.0.0 on the same three ports as the others and advertising its own
// address with -advertise, joined by address, behind HAProxy (in a fourth
// namespace) with /readyz checks: exact limits through the load balancer,
// one ring everywhere with the advertised addresses, and a rolling restart
// no client notices.
func TestMultiHostBehindHAProxy(t *testing.T) {
	needFull(t)
	needCommand(t, "haproxy")
	begin := time.Now()
	lab := newNetLab(t, "n1", "n2", "n3")
	lbHost := lab.AddHost("lb", 100)
	t.Log(lab.Describe())
	c := NewClusterWith(t, daemon, 3, multiHostConfig(), ClusterOptions{Place: lab.PlaceAllInterfaces}, steady...)
	checkAdvertised(t, c, lab)
	lb, stats := startLabHAProxy(t, lbHost, c.Procs)
	// HAProxy's rise 2: every node is in the rotation after two checks.
	stats.waitAllUp(t, c.Procs, 10*time.Second)
	// Warm-up, not counted: every node opens its peer connections (a node
	// starved of CPU by the race detector right after its start would
	// otherwise be probed as down by a peer's first forward).
	for i := range 30 {
		_, _, _ = Post(context.Background(), lb.Client, lb.URL()+"/v1/acquire",
			fmt.Sprintf(`{"tenant":"warm-%d","prompt_tokens":1,"max_tokens":1}`, i))
	}

	// Exact limits: 30 tenants × 70 acquires, from 32 clients through
	// HAProxy, round robin over the tenants: exactly 50 allowed each.
	const tenants, per, limit = 30, 70, 50
	decisionsBefore := map[string]float64{}
	for _, p := range c.Procs {
		v, err := labMetric(p, "tokenring_decisions_total")
		if err != nil {
			t.Fatal(err)
		}
		decisionsBefore[p.Name] = v
	}
	var (
		mu      sync.Mutex
		allowed = map[string]int{}
		refused = map[string]int{}
		next    atomic.Int64
	)
	halt := startWorkers(t, 32, func(w int, stop <-chan struct{}) {
		for {
			i := int(next.Add(1)) - 1
			if i >= tenants*per {
				return
			}
			tenant := fmt.Sprintf("mh-%02d", i%tenants)
			code, out, err := Post(context.Background(), lb.Client, lb.URL()+"/v1/acquire",
				fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tenant))
			mu.Lock()
			switch {
			case err != nil:
				t.Errorf("acquire %d (%s): %v", i, tenant, err)
			case code == http.StatusOK && out["allowed"] == true:
				allowed[tenant]++
			case code == http.StatusTooManyRequests && out["reason"] == "requests":
				refused[tenant]++
			default:
				t.Errorf("acquire %d (%s): %d %v", i, tenant, code, out)
			}
			if out["fallback"] == true {
				t.Errorf("acquire %d (%s) fell back with every owner up: %v", i, tenant, out)
			}
			mu.Unlock()
		}
	})
	halt()
	for i := range tenants {
		tenant := fmt.Sprintf("mh-%02d", i)
		if allowed[tenant] != limit || refused[tenant] != per-limit {
			t.Errorf("%s through HAProxy: %d allowed, %d refused; want exactly %d and %d", tenant, allowed[tenant], refused[tenant], limit, per-limit)
		}
	}
	t.Logf("%d acquires through HAProxy for %d tenants: exactly %d allowed each", tenants*per, tenants, limit)
	for _, p := range c.Procs {
		v, err := labMetric(p, "tokenring_decisions_total")
		if err != nil {
			t.Fatal(err)
		}
		if v == decisionsBefore[p.Name] {
			t.Errorf("%s decided nothing: HAProxy did not spread the connections", p.Name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Rolling restart under load: SIGTERM each node in turn, start it
	// again on the same ports, wait until it is ready and the ring has
	// converged. No client sees an error.
	var ok, clientErrs atomic.Int64
	var firstErr atomic.Value
	stopLoad := startWorkers(t, 16, func(w int, stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			code, out, err := Post(ctx, lb.Client, lb.URL()+"/v1/acquire", `{"tenant":"roll","prompt_tokens":1,"max_tokens":1}`)
			cancel()
			if err != nil || code != http.StatusOK || out["allowed"] != true {
				clientErrs.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("code %d %v err %v", code, out, err))
				continue
			}
			ok.Add(1)
		}
	})
	eventually(t, 10*time.Second, "the clients' first 100 answers through HAProxy", func() bool { return ok.Load() >= 100 })
	for _, p := range append([]*Proc(nil), c.Procs...) {
		stopped, ready := c.Restart(p)
		converged := c.WaitConverged(30 * time.Second)
		up := stats.waitAllUp(t, c.Procs, 10*time.Second) // rise 2: back in HAProxy's rotation
		t.Logf("restarted %s: exited %v after SIGTERM, ready %v after exec, ring converged %v later, back in HAProxy's rotation %v after that",
			p.Name, stopped, ready, converged, up)
	}
	stopLoad()
	t.Logf("rolling restart: %d acquires answered, %d client errors", ok.Load(), clientErrs.Load())
	if n := clientErrs.Load(); n > 0 {
		t.Errorf("%d client errors during the rolling restart; first: %v", n, firstErr.Load())
	}
	if ok.Load() == 0 {
		t.Error("no acquire answered during the rolling restart")
	}
	checkAdvertised(t, c, lab)
	t.Logf("test took %v", time.Since(begin))
}
