package test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// startRedis runs a real redis-server on a free loopback port and returns
// its URL; it is stopped by t.Cleanup. Missing, the test is skipped locally
// and fails in CI.
func startRedis(t *testing.T) string {
	t.Helper()
	bin := needCommand(t, "redis-server")
	port := FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	startServer(t, addr, bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no")
	return "redis://" + addr + "/0"
}

// Two of five nodes die at once (SIGKILL), so some keys lose both their
// owner and their backup: those come back from the Redis checkpoint, the
// others from replicas, and every tenant's count stays exact. (Five, so
// that the three survivors are a majority of the membership: two of three
// would be a minority, which owns nothing; see TestSplit* in node.)
func TestCrashOfOwnerAndBackupRestoresFromRedis(t *testing.T) {
	needFull(t)
	url := startRedis(t)
	const cfg = `
limits:
  default: {rpm: 10, tpm: 100000000, concurrency: 100000}
`
	c := NewCluster(t, daemon, 5, cfg, "-redis", url)
	const tenants = 90
	client := newClient()
	defer client.CloseIdleConnections()
	count := func(procs []*Proc, per int) map[string]int {
		allowed := map[string]int{}
		for i := range tenants {
			tn := fmt.Sprintf("r-%d", i)
			for j := range per {
				code, out, err := Post(t.Context(), client, procs[(i+j)%len(procs)].URL()+"/v1/acquire",
					fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tn))
				if err != nil || (code != 200 && code != 429) || out["fallback"] == true {
					t.Fatalf("acquire %s: %d %v %v", tn, code, out, err)
				}
				if out["allowed"] == true {
					allowed[tn]++
				}
			}
		}
		return allowed
	}
	for tn, n := range count(c.Procs, 6) {
		if n != 6 {
			t.Fatalf("%s: %d of the first 6", tn, n)
		}
	}
	waitReplicated(t, c.Procs) // replicas and checkpoints hold every admission
	victims, survivors := c.Procs[:2], c.Procs[2:]
	owned := 0
	for i := range tenants {
		if o := ownerOf(t, survivors[0], fmt.Sprintf("r-%d", i)); o == victims[0].Name || o == victims[1].Name {
			owned++ // owned by a node about to die
		}
	}
	for _, p := range victims {
		c.Kill(p)
	}
	c.WaitConverged(30 * time.Second)
	after := count(survivors, 10)
	for i := range tenants {
		if tn := fmt.Sprintf("r-%d", i); after[tn] != 4 {
			t.Errorf("%s: %d of 10 admitted after the crash, want exactly 4", tn, after[tn])
		}
	}
	var fromRedis, fromReplica float64
	for _, p := range survivors {
		fromRedis += metric(t, p, "tokenring_restored_from_checkpoint_total")
		fromReplica += metric(t, p, "tokenring_restored_from_replica_total")
	}
	t.Logf("%d tenants lost their owner: %v restored from Redis, %v from replicas", owned, fromRedis, fromReplica)
	if fromRedis == 0 || fromRedis+fromReplica != float64(owned) {
		t.Fatalf("restored %v from Redis and %v from replicas, want %d in all with some from Redis", fromRedis, fromReplica, owned)
	}
}

// Every node of the cluster is killed (SIGKILL) and started again with the
// same names and ports: every tenant's count comes back from the Redis
// checkpoint, as the last round left it, and no tenant goes over its limit.
// The restarted nodes read the checkpoint when they start, so keys come
// back with their partitions, not on a Redis read when first asked for.
func TestWholeClusterRestartFromRedis(t *testing.T) {
	needFull(t)
	url := startRedis(t)
	// rpm 100 over a 10-minute window, so that nothing slides out of the
	// window while the cluster restarts.
	const cfg = `
limits:
  window: 10m
  default: {rpm: 100, tpm: 100000000, concurrency: 100000}
`
	c := NewCluster(t, daemon, 3, cfg, "-redis", url)
	const tenants, limit, used = 30, 100, 60
	client := newClient()
	defer client.CloseIdleConnections()
	count := func(procs []*Proc, per int) map[string]int {
		allowed := map[string]int{}
		for i := range tenants {
			tn := fmt.Sprintf("w-%d", i)
			for j := range per {
				p := procs[(i+j)%len(procs)]
				code, out, err := Post(t.Context(), client, p.URL()+"/v1/acquire",
					fmt.Sprintf(`{"tenant":%q,"prompt_tokens":1,"max_tokens":1}`, tn))
				if err != nil || (code != 200 && code != 429) || out["fallback"] == true {
					t.Fatalf("acquire %s via %s: %d %v %v", tn, p.Name, code, out, err)
				}
				if out["allowed"] == true {
					allowed[tn]++
				}
			}
		}
		return allowed
	}
	for tn, n := range count(c.Procs, used) {
		if n != used {
			t.Fatalf("%s: %d of the first %d admitted", tn, n, used)
		}
	}
	waitReplicated(t, c.Procs) // the checkpoint holds every admission
	for _, p := range c.Procs {
		c.Kill(p)
	}
	start := time.Now()
	for _, p := range c.Procs {
		c.Restart(p) // same name and ports; the first starts alone, the others join it
	}
	took := c.WaitConverged(30 * time.Second)
	t.Logf("restarted in %v, converged %v later", time.Since(start)-took, took)
	after := count(c.Procs, limit)
	wrong := 0
	for i := range tenants {
		if tn := fmt.Sprintf("w-%d", i); after[tn] != limit-used {
			if wrong < 5 {
				t.Errorf("%s: %d admitted after the restart, want exactly %d (%d of %d checkpointed)", tn, after[tn], limit-used, used, limit)
			}
			wrong++
		}
	}
	var fromRedis float64
	for _, p := range c.Procs {
		fromRedis += metric(t, p, "tokenring_restored_from_checkpoint_total")
		if !strings.Contains(p.Log(), "checkpoint preloaded") {
			t.Errorf("%s did not log its preload:\n%s", p.Name, tail(p.Log(), 4000))
		}
	}
	t.Logf("%v keys restored from Redis; %d of %d tenants wrong", fromRedis, wrong, tenants)
	if fromRedis != tenants {
		t.Errorf("%v keys restored from Redis, want all %d tenants", fromRedis, tenants)
	}
}
