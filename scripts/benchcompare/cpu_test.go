package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The test's own CPU time grows while this goroutine spins,
// and agrees with getrusage's user+system time of the process (within 10%
// and 20 ms: the two are read a moment apart, and threads that exited keep
// their time in getrusage only).
func TestCPUTimeOfSelf(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuTime(procRoot, pid)
	if err != nil {
		t.Fatal(err)
	}
	if before < 0 {
		t.Fatalf("cpu time %d ns, want ≥ 0", before)
	}
	spin(200 * time.Millisecond) // on a busy machine, less CPU than that
	after, err := cpuTime(procRoot, pid)
	if err != nil {
		t.Fatal(err)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	rusage := ru.Utime.Nano() + ru.Stime.Nano()
	if after <= before {
		t.Fatalf("cpu time went from %d to %d ns while spinning", before, after)
	}
	if diff := max(rusage-after, after-rusage); diff > rusage/10+int64(20*time.Millisecond) {
		t.Fatalf("cpu time %d ns, getrusage %d ns", after, rusage)
	}
	again, err := cpuSum([]int{pid, pid})
	if err != nil || again < 2*after {
		t.Fatalf("twice self: %d ns (%v), want ≥ %d", again, err, 2*after)
	}
}

// spin keeps a CPU busy for d of wall time.
func spin(d time.Duration) {
	x := 0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 10_000 {
			x += i
		}
	}
	_ = x
}

// cpuTime reads utime + stime from the stat file, whatever the command's
// name holds, and says which process it could not read.
func TestCPUTimeReadsStat(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	line := "7 (a (b) c) S 1 7 7 0 -1 4194560 100 0 0 0 150 250 0 0 20 0 9 0 123 456 78\n"
	if err := os.WriteFile(filepath.Join(root, "7", "stat"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	if ns, err := cpuTime(root, 7); err != nil || ns != 400*int64(10*time.Millisecond) {
		t.Fatalf("cpuTime = %d, %v; want 4 s", ns, err)
	}
	if _, err := cpuTime(root, 9); err == nil {
		t.Fatal("no such process: no error")
	}
	for _, bad := range []string{"", "7 (x) S 1 2", "7 (x) S 1 7 7 0 -1 4194560 100 0 0 0 -5 250 0"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}
