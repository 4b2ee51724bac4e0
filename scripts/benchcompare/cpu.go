package main

// Server CPU time, read from /proc.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procRoot is where the kernel's process files are.
const procRoot = "/proc"

// cpuTime returns the CPU time pid has spent so far, in nanoseconds: the
// sum over its threads of the first field of /proc/PID/task/TID/schedstat
// (time on a CPU, ns). The process's own /proc/PID/schedstat counts its main
// thread only, and /proc/PID/stat's utime+stime are in clock ticks (10 ms).
// A thread that exited between two reads takes its time with it: the Go
// runtime and redis-server keep theirs for the life of the process.
func cpuTime(root string, pid int) (int64, error) {
	dir := filepath.Join(root, strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	var total int64
	for _, t := range tasks {
		raw, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			if os.IsNotExist(err) { // the thread has just exited
				continue
			}
			return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
		}
		ns, err := parseSchedstat(string(raw))
		if err != nil {
			return 0, fmt.Errorf("cpu time of %d, thread %s: %w", pid, t.Name(), err)
		}
		total += ns
	}
	return total, nil
}

// parseSchedstat returns the first field of a schedstat line ("on-CPU ns,
// run-queue wait ns, time slices").
func parseSchedstat(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("schedstat %q: empty", s)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("schedstat %q: not a count of nanoseconds", s)
	}
	return ns, nil
}

// cpuSum is the CPU time of every pid, summed, in nanoseconds.
func cpuSum(pids []int) (int64, error) {
	var total int64
	for _, pid := range pids {
		ns, err := cpuTime(procRoot, pid)
		if err != nil {
			return 0, err
		}
		total += ns
	}
	return total, nil
}

// loadAverage is the 1-minute load average of /proc/loadavg under root.
func loadAverage(root string) (float64, error) {
	raw, err := os.ReadFile(filepath.Join(root, "loadavg"))
	if err != nil {
		return 0, fmt.Errorf("load average: %w", err)
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0, fmt.Errorf("load average: %q", raw)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("load average: %q", raw)
	}
	return v, nil
}
