package test

// A config change reaches every node of a running cluster without a
// restart: the file rewritten the way a Kubernetes ConfigMap update
// rewrites it (a new file renamed over the old), a broken file, and a
// change only SIGHUP can see, under traffic through every node.
// cmd/tokenringd/reload.go.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reloadConfig is the cluster's config with tenant acme at rpm.
func reloadConfig(rpm int) string {
	return fmt.Sprintf(`
limits:
  default: {rpm: 1000000, tpm: 1000000000, concurrency: 1000000}
  window: 600s
  tenants:
    acme: {rpm: %3d}
`, rpm)
}

// replaceFile writes text to a new file beside path and renames it over
// path, as a ConfigMap update swaps its files.
func replaceFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".next")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reloads is node p's tokenring_config_reloads_total{result=...}.
func reloads(t *testing.T, p *Proc, result string) float64 {
	t.Helper()
	return metric(t, p, `tokenring_config_reloads_total{result="`+result+`"}`)
}

// waitReloads waits until every node counted want reloads of result, and
// returns how long the slowest took from since.
func waitReloads(t *testing.T, c *Cluster, result string, want float64, since time.Time) time.Duration {
	t.Helper()
	var slowest time.Duration
	for _, p := range c.Live() {
		eventually(t, 10*time.Second, fmt.Sprintf("%s counts %v reloads %s", p.Name, want, result), func() bool {
			return reloads(t, p, result) == want
		})
		slowest = max(slowest, time.Since(since))
	}
	return slowest
}

// acmeAdmitted drives tenant acme through every node until n acquires
// were answered or refused, and returns how many were admitted.
func acmeAdmitted(t *testing.T, c *Cluster, n int) int {
	t.Helper()
	res := StartLoad(LoadConfig{Clients: 4, Tenants: []string{"acme"}, Targets: c.Nodes,
		MaxRequests: n, MaxDuration: time.Minute}).Wait()
	tl := res.Tenants["acme"]
	if tl.Errors != 0 || tl.Fallbacks != 0 {
		t.Fatalf("acme: %v, want answers from its owner only\n%s", *tl, res.Summary())
	}
	return tl.Allowed
}

// acmeLimit is acme's request limit as every node reports it.
func acmeLimit(t *testing.T, c *Cluster) []int64 {
	t.Helper()
	var out []int64
	for _, p := range c.Live() {
		var st tenantStatus
		if err := GetJSON(p.URL()+"/v1/tenants/acme", &st); err != nil {
			t.Fatal(err)
		}
		out = append(out, st.Limits.Requests.Limit)
	}
	return out
}

func TestConfigReloadUnderTraffic(t *testing.T) {
	needFull(t)
	c := NewCluster(t, daemon, 3, reloadConfig(100))
	others := StartLoad(LoadConfig{Clients: 8, Tenants: tenantNames("bg", 10), Targets: c.Nodes,
		MaxRequests: 2_000_000, MaxDuration: 2 * time.Minute})
	defer others.Stop()
	if got := acmeAdmitted(t, c, 40); got != 40 {
		t.Fatalf("acme under rpm 100: %d of 40 admitted", got)
	}

	// Lowered from 100 to 50, the ConfigMap way: 40 counted, 10 more.
	changed := time.Now()
	replaceFile(t, c.config, reloadConfig(50))
	took := waitReloads(t, c, "applied", 1, changed)
	t.Logf("rpm 100 → 50: applied on every node %v after the file was replaced", took.Round(time.Millisecond))
	if got := acmeLimit(t, c); !slices.Equal(got, []int64{50, 50, 50}) {
		t.Fatalf("acme's limit through each node after the reload: %v, want 50 everywhere", got)
	}
	if got := acmeAdmitted(t, c, 100); got != 10 {
		t.Fatalf("acme lowered to rpm 50 with 40 counted: %d admitted, want exactly 10", got)
	}

	// A change the file's stat cannot see (same inode, size and time):
	// only SIGHUP reads it. 50 → 70: 20 more.
	fi, err := os.Stat(c.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.config, []byte(reloadConfig(70)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(c.config, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	hup := time.Now()
	for _, p := range c.Live() {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	took = waitReloads(t, c, "applied", 2, hup)
	t.Logf("rpm 50 → 70 by SIGHUP: applied on every node %v after the signals", took.Round(time.Millisecond))
	for _, p := range c.Live() {
		if !strings.Contains(p.Log(), `msg="config reloaded"`) || !strings.Contains(p.Log(), "by=SIGHUP") {
			t.Errorf("%s's log has no reload by SIGHUP", p.Name)
		}
	}
	if got := acmeAdmitted(t, c, 100); got != 20 {
		t.Fatalf("acme raised to rpm 70 with 50 counted: %d admitted, want exactly 20", got)
	}

	// A broken file keeps the limits in force.
	broken := time.Now()
	replaceFile(t, c.config, strings.Replace(reloadConfig(70), "rpm:  70", "rmp: 10", 1))
	waitReloads(t, c, "refused", 1, broken)
	if got := acmeLimit(t, c); !slices.Equal(got, []int64{70, 70, 70}) {
		t.Fatalf("acme's limit after a broken file: %v, want 70 everywhere", got)
	}
	if got := acmeAdmitted(t, c, 50); got != 0 {
		t.Fatalf("acme at 70 of 70 after a broken file: %d admitted, want 0", got)
	}

	// Every member publishes the same limits version, and sees the others'.
	var hashes []string
	for _, p := range c.Live() {
		var v struct {
			Members []struct {
				Name       string `json:"name"`
				LimitsHash string `json:"limits_hash"`
			} `json:"members"`
		}
		eventually(t, 10*time.Second, p.Name+"'s ring shows one limits hash", func() bool {
			if err := p.GetJSON("/admin/ring", &v); err != nil || len(v.Members) != 3 {
				return false
			}
			for _, m := range v.Members {
				if m.LimitsHash == "" || m.LimitsHash != v.Members[0].LimitsHash {
					return false
				}
			}
			return true
		})
		hashes = append(hashes, v.Members[0].LimitsHash)
		if n := metric(t, p, "tokenring_limits_mismatch_members"); n != 0 {
			t.Errorf("%s counts %v members with other limits", p.Name, n)
		}
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Errorf("the members' rings show different limits hashes: %v", hashes)
	}

	res := others.Stop()
	if res.Errors != 0 {
		t.Errorf("the other tenants' clients saw %d errors across the reloads: %v", res.Errors, res.FirstErrors)
	}
	allowed := 0
	for _, tl := range res.Tenants {
		allowed += tl.Allowed
	}
	if allowed == 0 {
		t.Errorf("the other tenants' clients were admitted nothing: the reloads ran without traffic")
	}
}
