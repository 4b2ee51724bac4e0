// Command demo is `make demo`: a scripted walk through tokenring on this
// machine, needing nothing but Go. It starts a fake LLM upstream (fakellm)
// and three tokenringd nodes on free loopback ports (step 0), then prints
// each step with the real HTTP exchanges:
//
//  1. a tenant's requests admitted by its owner, whichever node they reach;
//  2. the next one refused: a 429 with Retry-After, and through the OpenAI
//     proxy with the x-ratelimit-* and RateLimit headers;
//  3. a streamed chat completion through the proxy, settled with the usage
//     the upstream reported (the tenant's tokens before and after);
//  4. the ring and the tenant's owner;
//  5. a fourth node joining: the tenant's partition moves to it, and its
//     counts with it;
//  6. every process it started stopped (SIGTERM, SIGKILL after 10 s).
//
// It checks what each step claims and exits 1 with the reason if a check
// fails. Every process it starts is in a process group of its own and dies
// with it (Pdeathsig, on Linux).
//
//	demo [-bin DIR] [-timeout 60s]
//
// -bin is where tokenringd and fakellm are (make demo passes bin/); without
// it the demo builds them into a temporary directory with the go command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		os.Exit(1)
	}
}

// demo is one run: its processes and what the steps learnt.
type demo struct {
	ctx      context.Context
	out      io.Writer
	bin, dir string // where the binaries are; a temporary directory
	cfg      string // the nodes' config file, in dir
	t0       time.Time

	fake  *proc
	nodes []*proc // n1, n2, n3, then n4
	procs []*proc // everything started, fakellm first

	// hot is the tenant the demo rate-limits, chosen so that its partition
	// moves to n4 when n4 joins; from is its owner before. other is the
	// tenant of the streamed completion.
	hot, from, other string
	step             int
}

// run is the demo: args are its flags; it narrates on out and reports
// usage errors on errOut.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(errOut)
	bin := fs.String("bin", "", "`dir` holding tokenringd and fakellm (empty: build them with go build)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up (exit 1) if the steps take longer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	ctx, cancel := context.WithTimeoutCause(ctx, *timeout, fmt.Errorf("the demo took longer than -timeout %v", *timeout))
	defer cancel()
	dir, err := os.MkdirTemp("", "tokenring-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d := &demo{ctx: ctx, out: out, bin: *bin, dir: dir, t0: time.Now(), step: -1} // the start is step 0
	if d.bin == "" {
		d.say("building tokenringd and fakellm (go build) …")
		if err := buildBinaries(ctx, dir); err != nil {
			return err
		}
		d.bin = dir
	}
	err = d.steps()
	if err != nil {
		d.say("\n!! %v\n!! stopping everything the demo started", err)
	}
	if len(d.procs) > 0 { // the last step, whatever happened before
		if serr := d.stop(); err == nil {
			err = serr
		}
	}
	if err != nil {
		return fmt.Errorf("%w\n%s", err, logTails(d.procs))
	}
	d.say("\ndemo done in %.1fs", time.Since(d.t0).Seconds())
	return nil
}

// steps runs the steps in order, all but the stop.
func (d *demo) steps() error {
	for _, s := range []func() error{d.start, d.admits, d.refusal, d.streamed, d.ring, d.join} {
		if err := s(); err != nil {
			return err
		}
		if err := context.Cause(d.ctx); err != nil {
			return err
		}
	}
	return nil
}

// say prints one line of the narration.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, format+"\n", args...)
}

// title starts the next step.
func (d *demo) title(format string, args ...any) {
	d.step++
	d.say("\n== %d. %s", d.step, fmt.Sprintf(format, args...))
}

// check returns an error saying what the demo claimed and what it got when
// ok is false.
func check(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return errors.New("check failed: " + fmt.Sprintf(format, args...))
}

// binary returns the path of the binary name.
func (d *demo) binary(name string) string { return filepath.Join(d.bin, name) }

// config is the nodes' YAML config: the hot tenant's low limits, the
// proxy's API keys and the fake upstream. drain: 0s so that a SIGTERM
// hands on at once (production keeps the default 5 s for load balancers).
func (d *demo) config() string {
	return strings.Join([]string{
		"limits:",
		"  default: {rpm: 60, tpm: 100000, concurrency: 10}",
		"  tenants:",
		"    " + d.hot + ": {rpm: 3, tpm: 10000, concurrency: 10}",
		"keys:",
		"  sk-" + d.hot + ": " + d.hot,
		"  sk-" + d.other + ": " + d.other,
		"upstream:",
		"  base_url: http://" + d.fake.http + "/v1",
		"drain: 0s",
		"",
	}, "\n")
}
