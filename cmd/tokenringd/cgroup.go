package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tokenring/tokenring/config"
)

// cgroupMemory reads the memory limit of the cgroup this process runs in,
// cgroup v2 (memory.max) or v1 (the memory controller's
// memory.limit_in_bytes). tokenringd uses hostCgroup; tests point it at
// files of their own.
type cgroupMemory struct {
	// FS is where the cgroup filesystem is mounted: /sys/fs/cgroup.
	FS string
	// Self lists this process's cgroups: /proc/self/cgroup. Its paths are
	// looked up under FS first; in a container whose cgroup is the root of
	// its mount (a cgroup namespace, or Docker's v1 bind mount) the file
	// at FS's top is the container's.
	Self string
}

var hostCgroup = cgroupMemory{FS: "/sys/fs/cgroup", Self: "/proc/self/cgroup"}

// unlimited is a v1 limit_in_bytes at or above which there is no limit
// (the kernel writes 2^63 rounded down to a page).
const unlimited = 1 << 62

// limit returns the memory limit in bytes and the file it was read from;
// 0 when there is none ("max", a v1 limit near 2^63, or no cgroup file).
func (c cgroupMemory) limit() (int64, string, error) {
	v2, v1 := "/", "/"
	if b, err := os.ReadFile(c.Self); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			// hierarchy-ID:controller-list:path
			parts := strings.SplitN(sc.Text(), ":", 3)
			if len(parts) != 3 {
				continue
			}
			switch {
			case parts[0] == "0" && parts[1] == "":
				v2 = parts[2]
			case strings.Contains(","+parts[1]+",", ",memory,"):
				v1 = parts[2]
			}
		}
	}
	for _, f := range []string{
		filepath.Join(c.FS, v2, "memory.max"),
		filepath.Join(c.FS, "memory.max"),
		filepath.Join(c.FS, "memory", v1, "memory.limit_in_bytes"),
		filepath.Join(c.FS, "memory", "memory.limit_in_bytes"),
	} {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, f, err
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, f, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, f, fmt.Errorf("%s: want a number of bytes or max, got %q", f, s)
		}
		if n >= unlimited {
			return 0, f, nil
		}
		return n, f, nil
	}
	return 0, "", nil
}

// minFitKeys is the fewest keys fit lowers a default max_keys to: below
// it the limit is too small for the connections alone, and the node is
// refused instead.
const minFitKeys = 1000

// fit returns cfg with a max_keys whose memory bound (with http.max_conns,
// maxConns when the config leaves it 0) fits the cgroup's limit, so that a
// flood of tenants is refused keys instead of OOM-killing the node. A
// max_keys left at its default is lowered to what the limit holds, and
// logged, and an automatic http.max_conns then takes at most half of what
// the limit leaves; a max_keys the config sets is refused when it does not
// fit, naming both numbers. A limit that cannot be read is no limit.
func (c cgroupMemory) fit(cfg config.Config, maxConns int, log *slog.Logger) (config.Config, error) {
	limit, file, err := c.limit()
	if err != nil || limit == 0 {
		return cfg, nil
	}
	if cfg.HTTP.MaxConns > 0 {
		maxConns = cfg.HTTP.MaxConns
	}
	need := config.MemoryBound(cfg.MaxKeys, maxConns)
	if need <= limit {
		return cfg, nil
	}
	room := (limit - config.MemAtRest - config.MemSlack) / 2 // for keys and connections
	if cfg.HTTP.MaxConns == 0 && cfg.MaxKeys == config.DefaultMaxKeys {
		maxConns = int(min(int64(maxConns), room/2/config.MemPerConn)) // the automatic cap takes at most half
	}
	keys := (room - int64(maxConns)*config.MemPerConn) / config.MemPerKey
	if cfg.MaxKeys == config.DefaultMaxKeys && keys >= minFitKeys {
		log.Warn("max_keys (and an automatic http.max_conns) lowered to fit the memory limit (docs/operations.md \"Memory\")",
			"max_keys", keys, "http_max_conns", maxConns, "memory_limit", limit, "file", file)
		cfg.MaxKeys = int(keys)
		if cfg.HTTP.MaxConns == 0 {
			cfg.HTTP.MaxConns = maxConns
		}
		return cfg, nil
	}
	return cfg, fmt.Errorf("max_keys %d with http.max_conns %d needs up to %d bytes (%d MiB, docs/operations.md \"Memory\"), over the memory limit of %d bytes (%d MiB, %s): lower max_keys (or http.max_conns) or raise the limit",
		cfg.MaxKeys, maxConns, need, need>>20, limit, limit>>20, file)
}
