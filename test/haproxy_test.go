package test

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needCommand returns the path of a command the test needs: missing, the
// test is skipped with the reason locally and fails in CI (CI=true).
func needCommand(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required in CI (.ci/run installs it): %v", name, err)
	}
	t.Skipf("skipping: %s not installed (%v); CI installs it", name, err)
	return ""
}

// startHAProxy puts HAProxy in TCP mode, round-robin, in front of procs on a
// free loopback port and returns its base URL. It is stopped by t.Cleanup.
func startHAProxy(t *testing.T, procs []*Proc) string {
	t.Helper()
	url, _ := startHAProxyWith(t, procs, haproxyOptions{})
	return url
}

// haproxyOptions are the settings of startHAProxyWith; the zero value is
// startHAProxy's plain round robin without health checks.
type haproxyOptions struct {
	// CheckReadyz health-checks every node with GET /readyz every
	// CheckInterval (default 100 ms): one failed check takes a node out of
	// the rotation (fall 1) and two passed ones put it back (rise 2), the
	// way a rolling restart behind a load balancer is meant to run. A
	// connection that cannot be opened to a node is retried on another
	// (retries 3, option redispatch). Connections already open stay where
	// they are: in TCP mode HAProxy does not see requests.
	CheckReadyz   bool
	CheckInterval time.Duration
}

// startHAProxyWith is startHAProxy with options; it also returns HAProxy's
// stats socket, which tells when a node is back in the rotation.
func startHAProxyWith(t *testing.T, procs []*Proc, o haproxyOptions) (string, haproxyStats) {
	t.Helper()
	bin := needCommand(t, "haproxy")
	port := FreePort(t)
	dir := t.TempDir()
	stats := haproxyStats(filepath.Join(dir, "stats.sock"))
	var servers, backend, defaults strings.Builder
	check := ""
	if o.CheckReadyz {
		if o.CheckInterval <= 0 {
			o.CheckInterval = 100 * time.Millisecond
		}
		check = " check"
		defaults.WriteString("    timeout check 500ms\n    retries 3\n    option redispatch\n")
		fmt.Fprintf(&backend, "    option httpchk GET /readyz\n    http-check expect status 200\n    default-server inter %d fall 1 rise 2\n",
			o.CheckInterval.Milliseconds())
	}
	for _, p := range procs {
		fmt.Fprintf(&servers, "    server %s %s%s\n", p.Name, p.HTTP, check)
	}
	cfg := fmt.Sprintf(`global
    maxconn 4096
    stats socket %s mode 600 level user
defaults
    mode tcp
    timeout connect 2s
    timeout client 30s
    timeout server 30s
%sfrontend tokenring
    bind 127.0.0.1:%d
    default_backend nodes
backend nodes
    balance roundrobin
%s%s`, stats, defaults.String(), port, backend.String(), servers.String())
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startServer(t, addr, bin, "-db", "-f", path)
	return "http://" + addr, stats
}

// haproxyStats is the path of an HAProxy's stats socket (its global
// "stats socket" line).
type haproxyStats string

// servers returns HAProxy's state of every server of its backend "nodes",
// by name: the status column of "show stat" (UP, DOWN, "DOWN 1/2" while
// rising, "UP 1/3" while falling, "no check").
func (s haproxyStats) servers() (map[string]string, error) {
	c, err := net.DialTimeout("unix", string(s), time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	col := slices.Index(strings.Split(strings.TrimPrefix(lines[0], "# "), ","), "status")
	if col < 0 {
		return nil, fmt.Errorf("show stat: no status column in %q", lines[0])
	}
	out := map[string]string{}
	for _, line := range lines[1:] {
		f := strings.Split(line, ",")
		if len(f) > col && f[0] == "nodes" && f[1] != "BACKEND" {
			out[f[1]] = f[col]
		}
	}
	return out, nil
}

// waitAllUp waits until HAProxy counts every one of procs UP: in its
// rotation (with rise 2, two checks passed since a node came back).
func (s haproxyStats) waitAllUp(t *testing.T, procs []*Proc, timeout time.Duration) time.Duration {
	t.Helper()
	var last map[string]string
	var err error
	what := func() string { return fmt.Sprintf("HAProxy counts every node UP (last: %v, %v)", last, err) }
	return eventually(t, timeout, what, func() bool {
		if last, err = s.servers(); err != nil {
			return false
		}
		for _, p := range procs {
			if last[p.Name] != "UP" {
				return false
			}
		}
		return true
	})
}

// startServer runs a helper server (haproxy, redis-server) until the test
// ends and waits until it accepts connections on addr. Its output is
// printed if the test fails. The server also gets SIGKILL if the test
// process dies (a -timeout panic, a kill), when no cleanup runs.
func startServer(t *testing.T, addr, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = dieWithTest()
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	name := filepath.Base(bin)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("%s exited:\n%s", name, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not listening on %s:\n%s", name, addr, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dieWithTest is the SysProcAttr of every helper process a test starts
// (haproxy, redis-server, node): SIGKILL when the test process dies, so
// that a test binary killed by -timeout leaves no orphan holding a port.
// Strictly, Pdeathsig fires when the OS thread that started the child
// exits, which the Go runtime does only to a thread whose goroutine exits
// locked to it (none here). The tokenringd processes get the same from the
// harness when they are started through a Prefix.
func dieWithTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// Behind a plain L4 load balancer, every connection lands on any node, and
// the cluster still admits exactly the limit.
func TestHAProxyInFrontOfThreeNodes(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, clusterConfig, steady...)
	lb := startHAProxy(t, c.Procs)
	lbProc := &Proc{Name: "haproxy", HTTP: strings.TrimPrefix(lb, "http://")}
	allowed, reasons := roundRobin(t, []*Proc{lbProc}, 900, func(int) string {
		return `{"tenant":"rpm300","prompt_tokens":1,"max_tokens":1}`
	})
	if allowed != 300 || reasons["requests"] != 600 {
		t.Fatalf("through HAProxy: allowed %d refused %v, want exactly 300 and 600", allowed, reasons)
	}
	// The connections really were spread: every node decided or forwarded.
	for _, p := range c.Procs {
		if got := metric(t, p, "tokenring_decisions_total"); got == 0 {
			t.Errorf("%s answered no acquire: HAProxy did not spread the connections", p.Name)
		}
	}
}
