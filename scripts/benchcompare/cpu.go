package main

// Server CPU time, read from /proc.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procRoot is where the kernel's process files are.
const procRoot = "/proc"

// cpuTime returns the CPU time pid has spent so far, in nanoseconds: its
// user and system time from /proc/PID/stat. Those count every thread the
// process ever had; the per-thread schedstat files are finer (ns, not 10 ms
// ticks) but lose a thread's time when it exits, which Go's runtime does
// (a run's CPU then came out negative). Over a 4 s run a tick is 0.25%.
func cpuTime(root string, pid int) (int64, error) {
	raw, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	ticks, err := parseStat(string(raw))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %d: %w", pid, err)
	}
	return ticks * int64(time.Second/userHZ), nil
}

// userHZ is the unit of /proc's tick counts (USER_HZ, 100 on Linux).
const userHZ = 100

// parseStat returns utime + stime, in ticks, of a /proc/PID/stat line:
// "pid (comm) state ppid ..." where they are the 14th and 15th fields and
// comm may hold spaces and parentheses (so fields count from its last ")").
func parseStat(s string) (int64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is the state, field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("stat %q: too short", s)
	}
	var total int64
	for _, v := range f[11:13] { // fields 14 and 15
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("stat %q: %q is not a count of ticks", s, v)
		}
		total += n
	}
	return total, nil
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

// cpuTicks are the machine's CPU time counters of /proc/stat's first
// line, in ticks summed over its CPUs: all of them, and steal (the time
// the hypervisor gave a CPU of this machine to another).
type cpuTicks struct{ total, steal int64 }

// machineTicks reads the "cpu" line of /proc/stat under root: user nice
// system idle iowait irq softirq steal (guest and guest_nice are already
// counted in user and nice).
func machineTicks(root string) (cpuTicks, error) {
	raw, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return cpuTicks{}, fmt.Errorf("cpu times: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("cpu times: first line %q", line)
	}
	var t cpuTicks
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return cpuTicks{}, fmt.Errorf("cpu times: %q is not a count of ticks", v)
		}
		t.total += n
		if i == 7 {
			t.steal = n
		}
	}
	return t, nil
}

// stealShare is the share of the CPUs' time stolen between two readings.
func stealShare(before, after cpuTicks) float64 {
	if after.total <= before.total {
		return 0
	}
	return float64(after.steal-before.steal) / float64(after.total-before.total)
}
