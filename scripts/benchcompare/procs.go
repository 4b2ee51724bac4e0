package main

// The servers the comparison starts: redis-server, fakellm and tokenringd
// on free loopback ports, and how they are stopped.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tokenring/tokenring/internal/loopback"
)

// stopGrace is how long a server gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// server is one process the comparison started. Its output goes to a log
// file the comparison unlinked at once, read back for an error report.
type server struct {
	name string
	addr string // the loopback host:port its clients use
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, once done is closed
}

// pid is the server's process id.
func (s *server) pid() int { return s.cmd.Process.Pid }

// alive reports whether the server is still running.
func (s *server) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// output is the last n bytes the server wrote.
func (s *server) output(n int64) string {
	fi, err := s.log.Stat()
	if err != nil {
		return ""
	}
	off := max(0, fi.Size()-n)
	b := make([]byte, fi.Size()-off)
	k, _ := s.log.ReadAt(b, off)
	return string(b[:k])
}

// startServer execs bin with args. It runs in a process group of its own
// (a Ctrl-C reaches the comparison, which stops it) and is killed if the
// comparison dies (Pdeathsig). Linux sends that signal when the thread that
// started the child ends, and Go ends a thread whose goroutine exits locked
// to it (golang/go#27505): the child is started and waited for on a
// goroutine locked to its thread, so that thread ends with the child.
func startServer(name, addr, bin string, args ...string) (*server, error) {
	return startServerEnv(name, addr, nil, bin, args...)
}

// startServerEnv is startServer with env added to this process's
// environment (later entries win).
func startServerEnv(name, addr string, env []string, bin string, args ...string) (*server, error) {
	log, err := os.CreateTemp("", "benchcompare-*.log")
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = os.Remove(log.Name())
	s := &server{name: name, addr: addr, log: log, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if env != nil {
		s.cmd.Env = append(os.Environ(), env...)
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends when the child has
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	if err := <-started; err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return s, nil
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for the exit.
func (s *server) stop() {
	if s.alive() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
	case <-time.After(stopGrace):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.log.Close()
}

// servers are the processes of one stage, stopped newest first.
type servers []*server

func (ss servers) stop() {
	for i := len(ss) - 1; i >= 0; i-- {
		ss[i].stop()
	}
}

// explain returns err (nil stays nil) with, for each server that has
// exited, how it exited and the end of its output: why a run failed.
func (ss servers) explain(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range ss {
		if !s.alive() {
			err = fmt.Errorf("%w\n%s exited (%v); its last output:\n%s", err, s.name, s.err, s.output(4096))
		}
	}
	return err
}

func (ss servers) pids() []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = s.pid()
	}
	return out
}

// freeAddr returns a loopback address free for TCP and UDP.
func freeAddr() (string, error) { return loopback.FreeAddr() }

// waitFor calls ok every 20 ms until it is true; it fails when s exits,
// ctx ends or timeout passes first.
func waitFor(ctx context.Context, s *server, timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		switch {
		case !s.alive():
			return fmt.Errorf("%s exited (%v):\n%s", s.name, s.err, s.output(2000))
		case time.Now().After(deadline):
			return fmt.Errorf("%s not ready after %v:\n%s", s.name, timeout, s.output(2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", s.name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// startRedis starts redis-server without persistence and waits for PING.
func startRedis(ctx context.Context, bin string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	s, err := startServer("redis-server", addr, bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no")
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, s, 10*time.Second, func() bool { return redisPing(addr) == nil })
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// redisPing sends an inline PING and expects +PONG.
func redisPing(addr string) error { return redisInline(addr, "PING", "+PONG") }

// redisInline sends one inline command to the redis-server at addr and
// expects the reply line want.
func redisInline(addr, command, want string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, command+"\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("redis %s: %w", command, err)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("redis %s: %q, want %q", command, got, want)
	}
	return nil
}

// startFakeLLM starts fakellm on a free port and waits for the line that
// says where it serves.
func startFakeLLM(ctx context.Context, bin string) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s, err := startServer("fakellm", addr, filepath.Join(bin, "fakellm"), "-addr", addr)
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, s, 10*time.Second, func() bool { return strings.Contains(s.output(4096), "fakellm: serving") })
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// listenBefore parses upstream, a base URL, and listens on a loopback
// port for a proxy in front of it.
func listenBefore(upstream string) (*url.URL, net.Listener, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	return u, ln, nil
}

// referenceProxy serves Go's standard reverse proxy (net/http/httputil: no
// limiting, no counting) in front of upstream, a base URL, on a loopback
// port of this process: what a proxy written in Go adds on this machine
// before it does anything. stop closes it.
func referenceProxy(upstream string) (addr string, stop func(), err error) {
	u, ln, err := listenBefore(upstream)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: httputil.NewSingleHostReverseProxy(u), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return ln.Addr().String(), func() {
		_ = srv.Close()
		<-done
	}, nil
}

// relay serves a TCP relay in front of upstream, a base URL's host, on a
// loopback port of this process: each connection's bytes copied to a
// connection of its own to upstream and back (a goroutine each way; on
// Linux, io.Copy splices), no HTTP parsed. What a second hop costs on this
// machine before any proxy reads a byte: the floor of an added latency.
// stop closes it and its connections.
func relay(upstream string) (addr string, stop func(), err error) {
	u, ln, err := listenBefore(upstream)
	if err != nil {
		return "", nil, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(up)
			wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
			wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
		}
	})
	return ln.Addr().String(), func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}, nil
}

// startCluster starts n tokenringd nodes with the config file cfg, each
// after the first joining the first's gossip address, and waits until
// each is ready and every node's ring has all n members.
func startCluster(ctx context.Context, bin, cfg string, n int) (servers, error) {
	var ss servers
	join := ""
	for i := range n {
		s, gossip, err := startMember(ctx, bin, cfg, fmt.Sprintf("bc%d", i+1), join)
		if err != nil {
			ss.stop()
			return nil, err
		}
		ss = append(ss, s)
		if join == "" {
			join = gossip
		}
	}
	for _, s := range ss {
		full := func() bool { return ringSize("http://"+s.addr) == n }
		if err := waitFor(ctx, s, 20*time.Second, full); err != nil {
			ss.stop()
			return nil, fmt.Errorf("%s's ring never had %d members: %w", s.name, n, err)
		}
	}
	return ss, nil
}

// startMember starts node name on free loopback ports, joining join (none:
// the first), and waits until it is ready; it returns the node and its
// gossip address. A port found free can be taken before the node binds
// it (another process's outgoing connection, say): a node that exits on
// "address already in use" is started again on other ports, up to twice.
// extra are added to its flags.
func startMember(ctx context.Context, bin, cfg, name, join string, extra ...string) (*server, string, error) {
	var addrs [3]string // HTTP, peer, gossip
	for try := 0; ; try++ {
		for j := range addrs {
			a, err := freeAddr()
			if err != nil {
				return nil, "", err
			}
			addrs[j] = a
		}
		args := []string{"-name", name, "-http", addrs[0], "-peer", addrs[1], "-gossip", addrs[2], "-config", cfg, "-log-level", "warn"}
		if join != "" {
			args = append(args, "-join", join)
		}
		args = append(args, extra...)
		s, err := startServer("tokenringd "+name, addrs[0], filepath.Join(bin, "tokenringd"), args...)
		if err != nil {
			return nil, "", err
		}
		err = waitFor(ctx, s, 20*time.Second, func() bool { return httpOK("http://" + s.addr + "/readyz") })
		if err == nil {
			return s, addrs[2], nil
		}
		s.stop()
		if try == 2 || !strings.Contains(err.Error(), "address already in use") {
			return nil, "", err
		}
	}
}

// httpOK reports whether GET url answers 200.
func httpOK(url string) bool {
	resp, err := probeClient().Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// probeClient is for readiness checks: short, and no connection kept.
func probeClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// ringSize is the number of members a node's /admin/ring lists (0 when it
// does not answer).
func ringSize(base string) int {
	resp, err := probeClient().Get(base + "/admin/ring")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var ring struct {
		Members []struct{ Name string } `json:"members"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ring) != nil {
		return 0
	}
	return len(ring.Members)
}
