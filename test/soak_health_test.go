package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// The soak's /healthz poller runs in a process of its own, as a load
// balancer does: polled from inside the test process, which generates a
// million requests and 2,600 reconnecting floods on the same two cores,
// a poll measured the test's own scheduler as much as the node (a
// loopback connect alone took 100-200 ms at times).

// soakPollerEnv names the URL a re-executed test binary polls; init runs
// the poller, before TestMain, when it is set.
const soakPollerEnv = "TOKENRING_SOAK_HEALTHZ"

// soakPollerMax bounds the poller's life, should its parent never close
// its stdin.
const soakPollerMax = 2 * time.Minute

func init() {
	if url := os.Getenv(soakPollerEnv); url != "" {
		runHealthPoller(url)
		os.Exit(0)
	}
}

// healthPolls is what the poller saw.
type healthPolls struct {
	Polls, Late, Failed int
	Slowest, SlowestAt  time.Duration // the slowest poll, and when it started
	LateAt              []string      // the first late polls: how long, and when they started
}

// runHealthPoller GETs url+"/healthz" every 50 ms, each on a new
// connection (as a load balancer's health check does), until its stdin
// closes (or soakPollerMax), then writes what it saw to stdout as JSON.
func runHealthPoller(url string) {
	ctx, cancel := context.WithTimeout(context.Background(), soakPollerMax)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var h healthPolls
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t0 := time.Now()
	for ctx.Err() == nil {
		start := time.Now()
		resp, err := client.Get(url + "/healthz")
		took := time.Since(start)
		if ctx.Err() != nil && err != nil {
			break // stopped mid-poll
		}
		h.Polls++
		if err != nil || resp.StatusCode != http.StatusOK {
			h.Failed++
		}
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if took > soakHealthMax {
			if h.Late++; h.Late <= 10 {
				h.LateAt = append(h.LateAt, fmt.Sprintf("%v at %v", took.Round(time.Millisecond), start.Sub(t0).Round(time.Millisecond)))
			}
		}
		if took > h.Slowest {
			h.Slowest, h.SlowestAt = took, start.Sub(t0)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // the poll interval
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(h)
}

// healthPoller is a running poller process.
type healthPoller struct {
	cmd   *exec.Cmd
	stdin io.Closer
	out   chan []byte
}

// startHealthPoller starts the poller for url; stop ends it.
func startHealthPoller(t *testing.T, url string) *healthPoller {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), soakPollerEnv+"="+url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &healthPoller{cmd: cmd, stdin: stdin, out: make(chan []byte, 1)}
	go func() {
		b, _ := io.ReadAll(stdout)
		p.out <- b
	}()
	t.Cleanup(func() { // if the test ended before stop
		_ = stdin.Close()
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

// stop ends the poller and returns what it saw.
func (p *healthPoller) stop(t *testing.T) healthPolls {
	t.Helper()
	_ = p.stdin.Close()
	var b []byte
	select {
	case b = <-p.out:
	case <-time.After(10 * time.Second): // a poll takes at most its 5 s timeout
		_ = p.cmd.Process.Kill()
		b = <-p.out
	}
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("the /healthz poller: %v", err)
	}
	var h healthPolls
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatalf("the /healthz poller's answer %q: %v", b, err)
	}
	return h
}
