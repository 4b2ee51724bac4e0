package node

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// A replication round copies all the keys bound for one backup in one
// call (peer.OpReplicateMany), not one call per key, and every key arrives and
// counts as acknowledged.
func TestReplicationRoundIsOneCallPerBackup(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	nodes := newNodes(t, 3, limits, func(c *Config) { c.ReplicationInterval = time.Hour })
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	all := ringAll(t, nodes)
	const count = 200
	keys := keysWhere(count, func(k string) bool { m, _ := all.Owner(k); return m.Name == "n1" })
	for _, k := range keys {
		if got := admit(t, n1, k, 3); got != 3 {
			t.Fatalf("%s: %d of 3 admitted", k, got)
		}
	}
	backups := map[string]bool{}
	for _, k := range keys {
		b, _ := all.Backup(k)
		backups[b.Name] = true
	}
	calls, _ := n1.Forwarded()
	n1.replicateOnce()
	after, _ := n1.Forwarded()
	// Heartbeat pings may share the connections: a handful at most.
	if sent := after - calls; sent > int64(len(backups))+4 {
		t.Errorf("one round of %d keys to %d backups took %d calls, want about one per backup", count, len(backups), sent)
	}
	if got := n2.Replicas() + n3.Replicas(); got != count {
		t.Errorf("%d replicas held, want %d", got, count)
	}
	if got := n1.repl.Stats.Replicated.Load(); got != count {
		t.Errorf("%d keys counted replicated, want %d", got, count)
	}
	for _, k := range keys {
		b, _ := all.Backup(k)
		if c, ok := n1.acked.Get(k); !ok || !slices.Equal(c.By, []string{b.Name}) {
			t.Fatalf("%s: acknowledged copy %+v %v, want one by %s", k, c, ok, b.Name)
		}
	}
	if n1.Unreplicated() != 0 {
		t.Errorf("%d keys left unreplicated", n1.Unreplicated())
	}
}
