// Command benchcompare is `make bench-compare`: it starts its own
// redis-server, tokenringd nodes, fakellm and envoyproxy/ratelimit on free
// loopback ports, and the Go floor in its own process (floor.go), drives
// each with the same load generator (`tokenring load`, one process a run),
// reads the servers' CPU time from /proc over each timed run, stops
// everything it started, and prints the comparison as markdown tables.
//
//	go run ./scripts/benchcompare [-bin bin] [-workers 32] [-d 4s] [-repeat 1] [-max-steal 0] [-rls-only]
//
// The binaries come from `make build` (bin/tokenringd, bin/tokenring,
// bin/fakellm) and, envoyproxy/ratelimit's, from `make bin/envoy-ratelimit`
// (scripts/rlsref); redis-server from the PATH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchcompare:", err)
		}
		os.Exit(1)
	}
}

// options are the command line.
type options struct {
	bin         string        // directory of tokenringd, tokenring and fakellm
	redisServer string        // the redis-server binary
	ratelimit   string        // envoyproxy/ratelimit's server binary (rls.go)
	rlsOnly     bool          // run the Envoy rate limit service stage alone
	workers     int           // load generator workers of each run
	duration    time.Duration // of each run
	repeat      int           // runs of each measurement, in rounds (rounds.go)
	// maxSteal is the share of the CPUs' time a run may lose to the
	// hypervisor before it is made again (steady); 0: any.
	maxSteal float64
	reruns   *reruns   // what maxSteal did
	stderr   io.Writer // progress
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{stderr: stderr, reruns: &reruns{}}
	var maxSteal float64
	fs := flag.NewFlagSet("benchcompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin", "`dir` of tokenringd, tokenring and fakellm (make build)")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server `binary`")
	fs.StringVar(&o.ratelimit, "ratelimit", "", "envoyproxy/ratelimit's server `binary` (default: envoy-ratelimit in -bin; make bin/envoy-ratelimit builds it)")
	fs.BoolVar(&o.rlsOnly, "rls-only", false, "run only Envoy's rate limit service comparison (envoyproxy/ratelimit and tokenring over gRPC)")
	fs.IntVar(&o.workers, "workers", 32, "load generator `workers` of each run (the proxy runs: 1; one row: 16)")
	fs.DurationVar(&o.duration, "d", 4*time.Second, "`duration` of each run")
	fs.IntVar(&o.repeat, "repeat", 1, "`runs` of each measurement: each figure is their median, and a ratio or difference of measurements made in turn the median of each round's own (3: steadier numbers on a shared machine, 3× as long)")
	fs.Float64Var(&maxSteal, "max-steal", 0, fmt.Sprintf("`percent` of the CPUs' time a run may lose to the hypervisor (steal, /proc/stat): a run that lost more is made again, up to %d times, and the least robbed kept (0: any; on a shared VM, 5 measures the software rather than the neighbours)", stealRetries))
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.workers < 1 || o.workers > 10_000:
		return o, errors.New("-workers must be between 1 and 10000")
	case o.duration < 100*time.Millisecond:
		return o, errors.New("-d must be at least 100ms")
	case o.repeat < 1 || o.repeat > 9:
		return o, errors.New("-repeat must be between 1 and 9")
	case !(maxSteal >= 0 && maxSteal < 100):
		return o, errors.New("-max-steal must be at least 0 and under 100")
	}
	o.maxSteal = maxSteal / 100
	for _, name := range []string{"tokenringd", "tokenring", "fakellm"} {
		if _, err := os.Stat(filepath.Join(o.bin, name)); err != nil {
			return o, fmt.Errorf("%s: %w (run make build)", name, err)
		}
	}
	if o.ratelimit == "" {
		o.ratelimit = filepath.Join(o.bin, "envoy-ratelimit")
	}
	if _, err := os.Stat(o.ratelimit); err != nil {
		return o, fmt.Errorf("envoyproxy/ratelimit: %w (make bin/envoy-ratelimit builds it)", err)
	}
	bin, err := exec.LookPath(o.redisServer)
	if err != nil {
		return o, fmt.Errorf("redis-server: %w", err)
	}
	o.redisServer = bin
	return o, nil
}

// run starts each stage's servers, measures, stops them (also when ctx
// ends or a run fails), and prints the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "benchcompare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r := &report{workers: o.workers, seconds: o.duration.Seconds(), repeat: o.repeat, cpus: runtime.NumCPU(), rlsOnly: o.rlsOnly}
	if r.loadBefore, err = loadAverage(procRoot); err != nil {
		return err
	}
	ticksBefore, err := machineTicks(procRoot)
	if err != nil {
		return err
	}
	if err := o.stages(ctx, dir, r); err != nil {
		return err
	}
	if r.loadAfter, err = loadAverage(procRoot); err != nil {
		return err
	}
	ticksAfter, err := machineTicks(procRoot)
	if err != nil {
		return err
	}
	r.steal = stealShare(ticksBefore, ticksAfter)
	r.maxSteal, r.reruns = o.maxSteal, *o.reruns
	r.write(stdout)
	return nil
}

// stages runs the stages: all of them, or -rls-only's.
func (o options) stages(ctx context.Context, dir string, r *report) error {
	if !o.rlsOnly {
		if err := o.redisStage(ctx, r); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		if err := o.singleStage(ctx, dir, r); err != nil {
			return fmt.Errorf("one node: %w", err)
		}
		if err := o.clusterStage(ctx, dir, r); err != nil {
			return fmt.Errorf("three nodes: %w", err)
		}
	}
	if err := o.rlsStage(ctx, dir, r); err != nil {
		return fmt.Errorf("Envoy rate limit service: %w", err)
	}
	return nil
}
