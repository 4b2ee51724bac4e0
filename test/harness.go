// Package test holds tokenring's multi-node, multi-process and end-to-end
// tests, and the harness that starts real tokenringd processes for them.
package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is one tokenringd process started by a Cluster.
type Proc struct {
	Name               string
	HTTP, Peer, Gossip string // loopback addresses, unless a ClusterOptions.Place chose others
	// Client, when not nil, is the HTTP client that reaches HTTP (a node
	// in a network namespace is reached only through a dialer that enters
	// it). The harness, the load driver and the admin GETs use it; nil
	// means the default client, which dials from the test's own network.
	Client *http.Client
	// Prefix, when not empty, is the command the binary is started
	// through (e.g. "ip", "netns", "exec", NS); it must exec the binary,
	// so that the process keeps its pid. Such a process also gets SIGKILL
	// when the test process dies (Pdeathsig): nothing else would stop it
	// (strictly, when the OS thread that started it ends, which the Go
	// runtime does only to a thread whose goroutine exits locked to it).
	Prefix []string
	// Args are extra tokenringd flags for this process only, after the
	// cluster's: they win over both (e.g. listen on 0.0.0.0 and
	// -advertise, while HTTP, Peer and Gossip say where it is reached).
	Args   []string
	cmd    *exec.Cmd
	log    *lockedBuffer // the process's stdout and stderr, across restarts
	done   chan struct{} // closed when the process has exited
	starts int           // how many times the process was started
}

// URL is the node's base URL.
func (p *Proc) URL() string { return "http://" + p.HTTP }

// client is the HTTP client that reaches p: Client, or the default one.
func (p *Proc) client() *http.Client {
	if p.Client != nil {
		return p.Client
	}
	return http.DefaultClient
}

// GetJSON GETs path (e.g. "/admin/ring") from p with p's client and
// decodes its JSON body into v; a non-2xx is an error.
func (p *Proc) GetJSON(path string, v any) error {
	return GetJSONWith(p.client(), p.URL()+path, v)
}

// Alive reports whether the process is still running.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Log returns what the process wrote so far.
func (p *Proc) Log() string { return p.log.String() }

// lockedBuffer is an output sink safe to read while it is written: a
// process's output, or the slog handlers of in-process members.
type lockedBuffer struct {
	mu sync.Mutex // guards b
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

// Cluster is a set of real tokenringd processes on loopback ports. Every
// process it starts is stopped by t.Cleanup.
type Cluster struct {
	t      testing.TB
	bin    string
	config string         // path of the YAML config every node reads
	args   []string       // extra tokenringd flags for every node
	opts   ClusterOptions // where nodes listen and how they are started
	// Procs are the processes started so far, in start order. Tests read
	// it from the test goroutine; other goroutines (a load driver) read
	// Nodes, which Start keeps consistent.
	Procs []*Proc
	next  int
	mu    sync.Mutex // guards Procs against concurrent Nodes
}

// Nodes returns a copy of Procs, safe to call from any goroutine. A load
// driver uses it to learn about joiners; it reads only Name, HTTP and Client
// of each Proc, which never change (Restart keeps them).
func (c *Cluster) Nodes() []*Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Proc(nil), c.Procs...)
}

// BuildDaemon compiles cmd/tokenringd into dir and returns the binary's path.
func BuildDaemon(dir string) (string, error) {
	bin := filepath.Join(dir, "tokenringd")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/tokenring/tokenring/cmd/tokenringd")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("build tokenringd: %v\n%s", err, out)
	}
	return bin, nil
}

// NewCluster starts n nodes sharing configYAML, the first one alone and the
// others joining it, and waits until every node sees all n members. Nodes
// run with the shipped defaults, LAN gossip timings included (a crash is
// detected in several seconds); a test whose point is fast crash detection
// passes "-gossip-profile", "local" in args. args are added to every node's
// flags and win over the harness's.
func NewCluster(t testing.TB, bin string, n int, configYAML string, args ...string) *Cluster {
	t.Helper()
	return NewClusterWith(t, bin, n, configYAML, ClusterOptions{}, args...)
}

// ClusterOptions are the settings of NewClusterWith; the zero value is
// NewCluster's: every node on free loopback ports, reached from the test's
// own network.
type ClusterOptions struct {
	// Place, when set, is called for every new Proc (with its Name set)
	// instead of picking free loopback ports: it must set HTTP, Peer and
	// Gossip, and may set Client and Prefix. They stay the same across
	// restarts.
	Place func(p *Proc)
}

// NewClusterWith is NewCluster with opts.
func NewClusterWith(t testing.TB, bin string, n int, configYAML string, opts ClusterOptions, args ...string) *Cluster {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, bin: bin, config: cfg, args: args, opts: opts}
	t.Cleanup(c.stopAll)
	for range n {
		c.Start()
	}
	c.WaitConverged(15 * time.Second)
	return c
}

// handedOut are the ports FreePort returned in this test process: a port
// is free when FreePort checks it, but the kernel may offer it again to the
// next caller before the first one binds it (n3's HTTP and gossip got the
// same port once), so none is handed out twice.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a loopback port free for both TCP and UDP (memberlist
// needs both on its port), never one it returned before.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 200 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		handedOut.Lock()
		fresh := !handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if fresh {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// loopbackPorts gives p free loopback ports for HTTP, peers and gossip.
func (c *Cluster) loopbackPorts(p *Proc) {
	p.HTTP = fmt.Sprintf("127.0.0.1:%d", FreePort(c.t))
	p.Peer = fmt.Sprintf("127.0.0.1:%d", FreePort(c.t))
	p.Gossip = fmt.Sprintf("127.0.0.1:%d", FreePort(c.t))
}

// Start launches one more node, joining the first live one, and waits until
// it is ready.
func (c *Cluster) Start() *Proc {
	c.t.Helper()
	c.next++
	p := &Proc{
		Name: fmt.Sprintf("n%d", c.next),
		log:  &lockedBuffer{},
	}
	if c.opts.Place != nil {
		c.opts.Place(p)
	} else {
		c.loopbackPorts(p)
	}
	c.mu.Lock()
	c.Procs = append(c.Procs, p)
	c.mu.Unlock()
	for attempt := 1; ; attempt++ {
		logged := len(p.Log())
		c.launch(p)
		if !c.awaitReady(p, 15*time.Second) {
			return p
		}
		// A port FreePort found free was taken before the node bound it
		// (another test's process or connection): new ports, once more.
		if c.opts.Place != nil || attempt == 3 || !strings.Contains(p.Log()[logged:], "address already in use") {
			c.t.Fatalf("%s exited during start:\n%s", p.Name, p.Log())
		}
		c.loopbackPorts(p)
		p.starts = 0
	}
}

// launch execs p's process, joining the first other live node.
func (c *Cluster) launch(p *Proc) {
	c.t.Helper()
	args := []string{"-name", p.Name, "-http", p.HTTP, "-peer", p.Peer, "-gossip", p.Gossip,
		"-config", c.config, "-log-level", "info"}
	for _, q := range c.Live() {
		if q != p {
			args = append(args, "-join", q.Gossip)
			break
		}
	}
	args = append(args, c.args...)
	args = append(args, p.Args...)
	var cmd *exec.Cmd
	if len(p.Prefix) > 0 {
		argv := append(append(append([]string(nil), p.Prefix[1:]...), c.bin), args...)
		cmd = exec.Command(p.Prefix[0], argv...)
	} else {
		cmd = exec.Command(c.bin, args...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	if p.starts > 0 {
		fmt.Fprintf(p.log, "\n===== harness: restart #%d of %s at %s =====\n", p.starts, p.Name, time.Now().Format("15:04:05.000"))
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	p.starts++
}

// Restart stops p gracefully (SIGTERM, waiting for it to exit), starts it
// again with the same name and the same HTTP, peer and gossip ports, joining
// another live node, and waits until it is ready. It returns how long the
// stop took (SIGTERM to exit) and how long the start took (exec to ready).
func (c *Cluster) Restart(p *Proc) (stopped, ready time.Duration) {
	c.t.Helper()
	t0 := time.Now()
	c.Stop(p)
	stopped = time.Since(t0)
	t1 := time.Now()
	c.launch(p)
	c.waitReady(p, 30*time.Second)
	return stopped, time.Since(t1)
}

// Live returns the processes still running.
func (c *Cluster) Live() []*Proc {
	var live []*Proc
	for _, p := range c.Procs {
		if p.Alive() {
			live = append(live, p)
		}
	}
	return live
}

func (c *Cluster) waitReady(p *Proc, timeout time.Duration) {
	c.t.Helper()
	if c.awaitReady(p, timeout) {
		c.t.Fatalf("%s exited during start:\n%s", p.Name, p.Log())
	}
}

// awaitReady waits until p answers /readyz with 200 (false) or exits
// (true); it fails the test after timeout.
func (c *Cluster) awaitReady(p *Proc, timeout time.Duration) (exited bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if !p.Alive() {
			return true
		}
		resp, err := p.client().Get(p.URL() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready after %v:\n%s", p.Name, timeout, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RingView is the part of GET /admin/ring the tests read.
type RingView struct {
	Self           string `json:"self"`
	PartitionCount int    `json:"partition_count"`
	Version        string `json:"version"`
	Members        []struct {
		Name       string `json:"name"`
		HTTP       string `json:"http"`
		Partitions int    `json:"partitions"`
	} `json:"members"`
}

// Ring fetches p's view of the ring.
func (c *Cluster) Ring(p *Proc) (RingView, error) {
	var v RingView
	err := p.GetJSON("/admin/ring", &v)
	return v, err
}

// WaitConverged waits until every live node's ring has exactly the live
// members and all agree on the version. It returns how long that took.
func (c *Cluster) WaitConverged(timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		live := c.Live()
		want := map[string]bool{}
		for _, p := range live {
			want[p.Name] = true
		}
		ok, version := true, ""
		for _, p := range live {
			v, err := c.Ring(p)
			if err != nil || len(v.Members) != len(live) || (version != "" && v.Version != version) {
				ok = false
				break
			}
			version = v.Version
			for _, m := range v.Members {
				if !want[m.Name] {
					ok = false
				}
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range c.Procs {
				fmt.Fprintf(&logs, "--- %s\n%s\n", p.Name, tail(p.Log(), 4000))
			}
			c.t.Fatalf("cluster not converged after %v\n%s", timeout, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually waits for an event: it polls cond every 20 ms until it holds
// and returns how long that took, or fails t if it did not hold within
// timeout, saying what it waited for: what is a string, or a func() string
// called then (to tell the state at the deadline). Call it from the test's
// goroutine.
func eventually(t testing.TB, timeout time.Duration, what any, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			if f, ok := what.(func() string); ok {
				what = f()
			}
			t.Fatalf("not within %v: %v", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // the poll's interval
	}
	return time.Since(start)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Stop ends p gracefully (SIGTERM) and waits for it.
func (c *Cluster) Stop(p *Proc) {
	c.t.Helper()
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		c.t.Errorf("%s ignored SIGTERM for 20s:\n%s", p.Name, tail(p.Log(), 4000))
	}
}

// Kill ends p at once (SIGKILL): a crash.
func (c *Cluster) Kill(p *Proc) {
	if p.Alive() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stopAll ends every process when the test is over. It kills (SIGKILL):
// a graceful stop drains for 5 s, which tests of the shutdown itself wait
// for with Stop, and every other test need not.
func (c *Cluster) stopAll() {
	for _, p := range c.Procs {
		c.Kill(p)
	}
	if c.t.Failed() {
		for _, p := range c.Procs {
			c.t.Logf("--- log of %s\n%s", p.Name, tail(p.Log(), 8000))
		}
	}
}

// grepLogs returns up to max log lines, from all processes, that contain
// substr, each prefixed with its process's name.
func (c *Cluster) grepLogs(substr string, max int) string {
	var b strings.Builder
	n := 0
	for _, p := range c.Procs {
		for _, line := range strings.Split(p.Log(), "\n") {
			if strings.Contains(line, substr) && n < max {
				fmt.Fprintf(&b, "  %s: %s\n", p.Name, line)
				n++
			}
		}
	}
	if n == 0 {
		return "  (none logged)\n"
	}
	return b.String()
}

// GetJSON GETs url and decodes its JSON body into v; a non-2xx is an error.
func GetJSON(url string, v any) error {
	return GetJSONWith(http.DefaultClient, url, v)
}

// GetJSONWith is GetJSON with client.
func GetJSONWith(client *http.Client, url string, v any) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

// Post POSTs body as JSON to url and returns the status and decoded answer.
func Post(ctx context.Context, client *http.Client, url, body string) (int, map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("POST %s: %d %q: %w", url, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out, nil
}

// Pause stops p with SIGSTOP: the process keeps its sockets and memory but
// runs nothing (a long GC pause, a frozen VM, a starved neighbour) until
// Resume.
func (c *Cluster) Pause(p *Proc) {
	if p.Alive() {
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues p after Pause (SIGCONT).
func (c *Cluster) Resume(p *Proc) {
	if p.Alive() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}
}
