package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tokenring/tokenring/config"
)

// fakeCgroup writes files (path under the cgroup filesystem: content) and
// self (/proc/self/cgroup) into a temporary directory.
func fakeCgroup(t *testing.T, self string, files map[string]string) cgroupMemory {
	t.Helper()
	dir := t.TempDir()
	c := cgroupMemory{FS: filepath.Join(dir, "cgroup"), Self: filepath.Join(dir, "self")}
	if err := os.WriteFile(c.Self, []byte(self), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		p := filepath.Join(c.FS, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		self  string
		files map[string]string
		want  int64
	}{
		{"v2 in a namespace", "0::/\n", map[string]string{"memory.max": "536870912\n"}, 512 << 20},
		{"v2 max", "0::/\n", map[string]string{"memory.max": "max\n"}, 0},
		{"v2 nested", "0::/kubepods/pod1/c1\n", map[string]string{"memory.max": "max\n", "kubepods/pod1/c1/memory.max": "1073741824\n"}, 1 << 30},
		{"v2 path not mounted: the top", "0::/host/path\n", map[string]string{"memory.max": "268435456\n"}, 256 << 20},
		{"v1", "4:memory:/docker/abc\n0::/\n", map[string]string{"memory/docker/abc/memory.limit_in_bytes": "536870912\n"}, 512 << 20},
		{"v1 shared controllers", "5:cpu,memory:/x\n", map[string]string{"memory/x/memory.limit_in_bytes": "134217728\n"}, 128 << 20},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0},
		{"none", "", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, file, err := fakeCgroup(t, tc.self, tc.files).limit()
			if err != nil || got != tc.want {
				t.Errorf("limit() = %d (%s), %v; want %d", got, file, err, tc.want)
			}
		})
	}
	if _, _, err := fakeCgroup(t, "0::/\n", map[string]string{"memory.max": "lots\n"}).limit(); err == nil {
		t.Error("a memory.max of lots: no error")
	}
}

// The daemon's start check: a max_keys the config sets whose bound
// exceeds the limit is refused, naming max_keys, the bound and the limit;
// one left at its default is lowered to what the limit holds; one that
// fits, or no limit, passes. The shipped Kubernetes sizing (75,000 keys,
// 2,048 connections under 512 MiB) fits.
func TestCgroupMemoryCheck(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	c512 := fakeCgroup(t, "0::/\n", map[string]string{"memory.max": strconv.Itoa(512 << 20)})
	cfg := config.Default()
	cfg.HTTP.MaxConns = 2048
	cfg.MaxKeys = 75_000
	if got, err := c512.fit(cfg, 16384, log); err != nil || got.MaxKeys != 75_000 {
		t.Errorf("75,000 keys, 2,048 connections under 512 MiB: max_keys %d, %v", got.MaxKeys, err)
	}
	cfg.MaxKeys = 900_000
	_, err := c512.fit(cfg, 16384, log)
	need := config.MemoryBound(900_000, 2048)
	if err == nil {
		t.Fatal("900,000 keys set under 512 MiB: no error")
	}
	for _, s := range []string{"max_keys 900000", strconv.FormatInt(need, 10), strconv.Itoa(512 << 20), "memory.max"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
	// The default max_keys is lowered to the most keys whose bound fits.
	cfg.MaxKeys = config.DefaultMaxKeys
	got, err := c512.fit(cfg, 16384, log)
	if err != nil || config.MemoryBound(got.MaxKeys, 2048) > 512<<20 || config.MemoryBound(got.MaxKeys+1, 2048) <= 512<<20 {
		t.Errorf("the default max_keys under 512 MiB: lowered to %d (%v), want the most that fits", got.MaxKeys, err)
	}
	// With the automatic connection cap too (16,384 connections alone
	// would need 768 MiB), the cap takes half of what is left, the keys
	// the other half: the defaults start under 512 MiB.
	cfg.HTTP.MaxConns = 0
	if got, err := c512.fit(cfg, 16384, log); err != nil || got.HTTP.MaxConns == 0 || got.HTTP.MaxConns >= 16384 ||
		config.MemoryBound(got.MaxKeys, got.HTTP.MaxConns) > 512<<20 || got.MaxKeys < 50_000 {
		t.Errorf("the defaults under 512 MiB: max_keys %d, http.max_conns %d (%v), want both lowered to fit", got.MaxKeys, got.HTTP.MaxConns, err)
	}
	cfg.MaxKeys = 75_000 // set: the automatic cap counts whole, and does not fit
	if _, err := c512.fit(cfg, 16384, log); err == nil || !strings.Contains(err.Error(), "http.max_conns 16384") {
		t.Errorf("75,000 keys set, 16,384 automatic connections under 512 MiB: %v", err)
	}
	cfg.MaxKeys = config.DefaultMaxKeys
	if got, err := fakeCgroup(t, "0::/\n", map[string]string{"memory.max": "max"}).fit(cfg, 16384, log); err != nil || got.MaxKeys != config.DefaultMaxKeys {
		t.Errorf("no limit: max_keys %d, %v", got.MaxKeys, err)
	}
}
