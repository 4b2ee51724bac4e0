package main

// The processes the demo starts: building the binaries, picking free
// loopback ports, starting, waiting for readiness and stopping.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tokenring/tokenring/internal/loopback"
)

// stopGrace is how long a process gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// proc is one process the demo started.
type proc struct {
	name               string
	http, peer, gossip string // a node's loopback addresses; http is fakellm's too
	cmd                *exec.Cmd
	out                *os.File      // stdout and stderr (unlinked; see output)
	done               chan struct{} // closed when the process has exited
	exitErr            error         // cmd.Wait's result, once done is closed
}

// url is the base URL of the process's HTTP listener.
func (p *proc) url() string { return "http://" + p.http }

// alive reports whether the process is still running.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// output is what the process wrote to stdout and stderr so far. The child
// writes straight into a file the demo unlinked as soon as it was made, so
// nothing is left behind however the demo ends.
func (p *proc) output() string {
	fi, err := p.out.Stat()
	if err != nil {
		return ""
	}
	b := make([]byte, fi.Size())
	n, _ := p.out.ReadAt(b, 0)
	return string(b[:n])
}

// buildBinaries compiles tokenringd and fakellm into dir with the go
// command (the demo runs inside the module, so the packages resolve).
func buildBinaries(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator),
		"github.com/tokenring/tokenring/cmd/tokenringd", "github.com/tokenring/tokenring/cmd/fakellm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build tokenringd and fakellm: %v\n%s", err, out)
	}
	return nil
}

// freeAddr returns a loopback address free for TCP and UDP.
func freeAddr() (string, error) { return loopback.FreeAddr() }

// start execs bin with args as the process named name. Its output goes to
// the process's buffer; it is in a process group of its own (a Ctrl-C on
// the terminal reaches the demo, which stops it) and dies with the demo
// (Pdeathsig, on Linux).
func start(name, bin string, args ...string) (*proc, error) {
	out, err := os.CreateTemp("", "tokenring-demo-*.log")
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = os.Remove(out.Name())
	p := &proc{name: name, out: out, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// servingRE is fakellm's first line: where it serves.
var servingRE = regexp.MustCompile(`fakellm: serving http://(\S+)/v1`)

// startFake starts fakellm on a free port and waits for the line that
// says where it serves.
func startFake(ctx context.Context, bin string, args ...string) (*proc, error) {
	p, err := start("fakellm", bin, append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	if err != nil {
		return nil, err
	}
	err = poll(ctx, 10*time.Second, p, func() bool {
		m := servingRE.FindStringSubmatch(p.output())
		if m != nil {
			p.http = m[1]
		}
		return m != nil
	})
	return p, err
}

// startNode starts tokenringd as the node name with config cfg, joining
// the gossip address join when it is not empty. It does not wait.
func startNode(bin, name, cfg, join string) (*proc, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	args := []string{"-name", name, "-http", addrs[0], "-peer", addrs[1], "-gossip", addrs[2], "-config", cfg}
	if join != "" {
		args = append(args, "-join", join)
	}
	p, err := start(name, bin, args...)
	if err != nil {
		return nil, err
	}
	p.http, p.peer, p.gossip = addrs[0], addrs[1], addrs[2]
	return p, nil
}

// waitReady waits until p's /readyz answers 200.
func waitReady(ctx context.Context, p *proc) error {
	return poll(ctx, 20*time.Second, p, func() bool {
		resp, err := http.Get(p.url() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// poll calls ok every 20 ms until it is true. It fails if p exits, ctx
// ends or timeout passes first.
func poll(ctx context.Context, timeout time.Duration, p *proc, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		switch {
		case !p.alive():
			return fmt.Errorf("%s exited (%v):\n%s", p.name, p.exitErr, tail(p.output(), 2000))
		case time.Now().After(deadline):
			return fmt.Errorf("%s not ready after %v:\n%s", p.name, timeout, tail(p.output(), 2000))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", p.name, context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// stopped is how one process ended.
type stopped struct {
	name   string
	took   time.Duration
	killed bool  // it needed SIGKILL
	err    error // its exit status when not 0 (after SIGTERM, tokenringd and fakellm exit 0)
}

// stopAll stops every process, newest first, one at a time: SIGTERM,
// then SIGKILL if it has not exited after stopGrace. One at a time because
// a tokenringd that gets SIGTERM hands its partitions on to the members
// that stay; nodes all leaving at once would offer them to each other and
// wait out their drain's timeouts. It reports how each ended.
func stopAll(procs []*proc) []stopped {
	var res []stopped
	for _, p := range slices.Backward(procs) {
		res = append(res, stopOne(p))
	}
	return res
}

// stopOne stops p: SIGTERM, then SIGKILL after stopGrace.
func stopOne(p *proc) stopped {
	t0 := time.Now()
	s := stopped{name: p.name}
	if p.alive() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		s.killed = true
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	s.took, s.err = time.Since(t0), p.exitErr
	return s
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// logTails is the end of every process's output, for a failure report.
func logTails(procs []*proc) string {
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", p.name, p.url(), tail(p.output(), 3000))
	}
	return b.String()
}

// writeConfig writes the nodes' YAML config into dir and returns its path.
func writeConfig(dir, yaml string) (string, error) {
	path := filepath.Join(dir, "tokenring.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o600)
}
