package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
)

// -h, for the command and for each subcommand, prints the usage once and
// exits 0 without a "help requested" error.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"load", "-h"}, {"load", "--help"}, {"ring", "-h"}, {"owner", "-h"}} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), args, &out, &errOut)
		code := exitCode(err, &errOut)
		all := out.String() + errOut.String()
		if code != 0 {
			t.Errorf("%v: exit %d, want 0:\n%s", args, code, all)
		}
		if n := strings.Count(strings.ToLower(all), "usage"); n != 1 {
			t.Errorf("%v: %q %d times, want once:\n%s", args, "usage", n, all)
		}
		if strings.Contains(all, "help requested") {
			t.Errorf("%v: prints %q:\n%s", args, "help requested", all)
		}
	}
}

// No arguments, or an unknown command: the usage once, exit 2.
func TestNoCommandPrintsUsageOnce(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}} {
		var out, errOut bytes.Buffer
		code := exitCode(run(context.Background(), args, &out, &errOut), &errOut)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if n := strings.Count(errOut.String(), "usage:"); n != 1 || out.Len() != 0 {
			t.Errorf("%v: %q %d times on stderr (stdout %q), want once:\n%s", args, "usage:", n, out.String(), errOut.String())
		}
	}
	var errOut bytes.Buffer
	if code := exitCode(run(context.Background(), []string{"load", "-nope"}, io.Discard, &errOut), &errOut); code != 2 || !strings.Contains(errOut.String(), "-nope") {
		t.Errorf("load -nope: exit %d, printed %q; want 2 naming the flag", code, errOut.String())
	}
}

// load's default targets are the nodes `make cluster` starts, and -h says
// so and how to point it at `make run` and at a cluster on other ports.
func TestLoadDefaultsToMakeCluster(t *testing.T) {
	c, err := parseLoad(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"http://127.0.0.1:8081", "http://127.0.0.1:8082", "http://127.0.0.1:8083"}
	if !slices.Equal(c.targets, want) {
		t.Fatalf("default targets %v, want make cluster's %v", c.targets, want)
	}
	var help bytes.Buffer
	parseLoad([]string{"-h"}, &help)
	for _, s := range []string{"make cluster", "-targets http://127.0.0.1:8080", "CLUSTER_HTTP=9081", "-targets\nhttp://127.0.0.1:9081,http://127.0.0.1:9082,http://127.0.0.1:9083"} {
		if !strings.Contains(help.String(), s) {
			t.Errorf("load -h does not mention %q:\n%s", s, help.String())
		}
	}
}
