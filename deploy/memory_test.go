package deploy

import (
	"testing"

	"github.com/tokenring/tokenring/config"
)

// TestKubernetesMemorySizing: the ConfigMap's max_keys and http.max_conns
// fit the container's memory limit by the formula of docs/operations.md (the defaults,
// a million keys and up to 16,384 connections, need about 4.9 GiB: a pod
// under a 512 MiB limit would be OOM-killed by a flood of tenants).
// http.max_conns must be set: its default follows the open-file limit,
// which a container runtime sets to a million or more.
func TestKubernetesMemorySizing(t *testing.T) {
	d := loadDeployment(t)
	cfg := loadConfig(t, "configmap.yaml "+d.cmKey, d.configText(t), d.env(t, "statefulset.yaml", nil))
	limit := bytesOf(t, d.c.Resources.Limits["memory"])
	if cfg.HTTP.MaxConns <= 0 {
		t.Fatalf("configmap.yaml: http.max_conns not set: its default (3/4 of the open-file limit, up to 16,384) is %d MiB of connections alone", 2*16384*config.MemPerConn>>20)
	}
	need := config.MemoryBound(cfg.MaxKeys, cfg.HTTP.MaxConns)
	t.Logf("max_keys %d, http.max_conns %d: %d MiB by the formula of docs/operations.md, limit %d MiB", cfg.MaxKeys, cfg.HTTP.MaxConns, need>>20, limit>>20)
	if need > limit {
		t.Errorf("configmap.yaml: max_keys %d and http.max_conns %d need %d MiB by the formula of docs/operations.md, over the memory limit of %d MiB",
			cfg.MaxKeys, cfg.HTTP.MaxConns, need>>20, limit>>20)
	}
	if need < limit*3/4 {
		t.Errorf("configmap.yaml: max_keys %d and http.max_conns %d need only %d MiB of the %d MiB limit: size them to it", cfg.MaxKeys, cfg.HTTP.MaxConns, need>>20, limit>>20)
	}
}
