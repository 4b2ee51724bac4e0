package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/replica"
)

// countingCheckpoint counts the reads of single keys: the Redis GETs a
// decision would wait for.
type countingCheckpoint struct {
	replica.Checkpoint
	loads atomic.Int64
}

func (c *countingCheckpoint) Load(ctx context.Context, key string) ([]byte, time.Time, bool, error) {
	c.loads.Add(1)
	return c.Checkpoint.Load(ctx, key)
}

// A whole cluster restarts: every node is gone, a fresh one preloads the
// checkpoint and becomes the only member. Every checkpointed key comes back
// when its partition is restored, before anyone asks for it, counting what
// the checkpoint held, and no decision waits for a Redis read.
func TestRestartRestoresCheckpointedKeys(t *testing.T) {
	client := startRedis(t)
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	const keys = 40
	checkpointWith := func(c *Config) {
		c.ReplicationInterval = time.Hour
		c.Checkpoint = &replica.RedisCheckpoint{Client: client, Prefix: "restart:"}
	}
	old := newNodes(t, 2, limits, checkpointWith)
	both := ringOf(t, old...)
	for _, nd := range old {
		nd.SetRing(both)
	}
	used := func(i int) int { return 1 + i%10 } // 1 … 10 of 10
	for i := range keys {
		k := fmt.Sprintf("t:k%d", i)
		if got := admit(t, old[i%2], k, used(i)); got != used(i) {
			t.Fatalf("%s: %d of %d admitted before the restart", k, got, used(i))
		}
	}
	for _, nd := range old {
		nd.replicateOnce() // the checkpoint holds every admission
	}
	for _, nd := range old {
		nd.Close() // every node is gone
	}

	cp := &countingCheckpoint{Checkpoint: &replica.RedisCheckpoint{Client: client, Prefix: "restart:"}}
	fresh := newNodes(t, 1, limits, func(c *Config) { checkpointWith(c); c.Checkpoint = cp })[0]
	n, err := fresh.Preload(context.Background())
	if err != nil || n != keys {
		t.Fatalf("preloaded %d keys (%v), want %d", n, err, keys)
	}
	fresh.SetRing(ringOf(t, fresh))
	if got := fresh.Keys(); got != keys {
		t.Errorf("%d keys after the restore, before any call, want all %d", got, keys)
	}
	for i := range keys {
		k := fmt.Sprintf("t:k%d", i)
		if got := admit(t, fresh, k, 10); got != 10-used(i) {
			t.Errorf("%s: %d admitted after the restart, want exactly %d (%d of 10 checkpointed)", k, got, 10-used(i), used(i))
		}
	}
	for i := range 50 { // keys the checkpoint never held: new, and known to be new
		if got := admit(t, fresh, fmt.Sprintf("t:new%d", i), 1); got != 1 {
			t.Fatalf("new key: %d of 1 admitted", got)
		}
	}
	if got := cp.loads.Load(); got != 0 {
		t.Errorf("%d checkpoint reads on the decision path, want 0: every checkpointed key was preloaded, and the scan was whole", got)
	}
	if fresh.preload.Load() != nil {
		t.Error("the preload is still held after every partition was restored")
	}
	// Nothing is left to look up (no backup, the checkpoint all here): a
	// key never seen is decided at once, as on a node without a checkpoint.
	if !fresh.Immediate("t:never-seen") {
		t.Error("a key never seen, after a whole restore with no backup: not immediate")
	}
}

// The preload only serves the node's start: once a node is settled, a
// partition it restores after a crash comes from the newest copy (here the
// backup's replica), never from the older preloaded snapshot.
func TestPreloadServesOnlyTheStart(t *testing.T) {
	client := startRedis(t)
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	opts := func(c *Config) {
		c.ReplicationInterval = time.Hour
		c.Checkpoint = &replica.RedisCheckpoint{Client: client, Prefix: "start:"}
	}
	nodes := newNodes(t, 2, limits, opts)
	a, b := nodes[0], nodes[1]
	both, onlyA := ringOf(t, a, b), ringOf(t, a)
	key := keysMoving(both, onlyA, "n2", "n1", 1)[0]
	// The checkpoint of a previous life: key has 7 of 10 used.
	first := newNodes(t, 1, limits, opts)[0]
	first.SetRing(ringOf(t, first))
	admit(t, first, key, 7)
	first.replicateOnce()
	first.Close()

	for _, nd := range nodes {
		if got, err := nd.Preload(context.Background()); err != nil || got != 1 {
			t.Fatalf("%s preloaded %d keys (%v), want 1", nd.Name(), got, err)
		}
		nd.SetRing(both)
	}
	if got := admit(t, b, key, 2); got != 2 {
		t.Fatalf("%d of 2 admitted at the owner after the start, want 2", got)
	}
	b.replicateOnce() // a's replica holds 9 of 10
	eventually(t, 5*time.Second, "a's unused preload to be dropped once a settled", func() bool {
		ok := a.preload.Load() != nil
		return !ok
	})
	b.Close() // crash
	a.SetRing(onlyA)
	if got := admit(t, a, key, 10); got != 1 {
		t.Fatalf("%d admitted after the crash, want exactly 1: the replica holds 9 of 10 (the preload only 7)", got)
	}
}

// BenchmarkRestart100kCheckpointedKeys measures a restart from the
// checkpoint: Redis holds 100,000 keys' snapshots, and a fresh node
// preloads them and restores all 271 partitions as the only member. The
// clock runs from the start of Preload until every key is in the table.
func BenchmarkRestart100kCheckpointedKeys(b *testing.B) {
	client := startRedis(b)
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 1000, Concurrency: 1000} }
	const keys = 100_000
	cp := &replica.RedisCheckpoint{Client: client, Prefix: "bench:", TTL: time.Hour}
	now := time.Now()
	table := limiter.NewTable(limiter.Policy{}, limits)
	table.Do("k", now, func(bd *limiter.Budget) { bd.Acquire(now, limiter.Request{PromptTokens: 10}) })
	state, _ := table.Take("k")
	batch := map[string][]byte{}
	for i := range keys {
		batch[fmt.Sprintf("t:k%d", i)] = state
		if len(batch) == 5000 || i == keys-1 {
			if err := cp.Save(context.Background(), now, batch); err != nil {
				b.Fatal(err)
			}
			clear(batch)
		}
	}
	var total, scan time.Duration
	for range b.N {
		b.StopTimer()
		nd := newNodes(b, 1, limits, func(c *Config) { c.Checkpoint = cp; c.ReplicationInterval = -1 })[0]
		r := ringOf(b, nd)
		b.StartTimer()
		start := time.Now()
		n, err := nd.Preload(context.Background())
		if err != nil || n != keys {
			b.Fatalf("preloaded %d keys (%v), want %d", n, err, keys)
		}
		scanned := time.Now()
		nd.SetRing(r)
		total += time.Since(start)
		scan += scanned.Sub(start)
		b.StopTimer()
		if got := nd.Keys(); got != keys {
			b.Fatalf("%d keys restored, want %d", got, keys)
		}
		nd.Close()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/restore")
	b.ReportMetric(scan.Seconds()/float64(b.N), "s/preload")
}

// TestLoneNodeKeepsNoRestoreHints: a node alone, without a checkpoint, has
// nowhere to recover a key from, so its partitions carry no fetch hint
// (each would cost every decision a lookup), and nowhere to copy a key to,
// so its decisions mark nothing to replicate; with a checkpoint they do.
func TestLoneNodeKeepsNoRestoreHints(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Window: time.Minute} }
	hinted := func(nd *Node) (n int) {
		t := nd.tr.Load()
		for p := range t.gates {
			if t.gates[p].fetch.Load() != nil {
				n++
			}
		}
		return n
	}
	hour := func(c *Config) { c.ReplicationInterval = time.Hour } // no round drains the marks
	lone := newNodes(t, 1, limits, hour)[0]
	lone.SetRing(ringOf(t, lone))
	if n := hinted(lone); n != 0 {
		t.Errorf("a lone node without a checkpoint: %d partitions hinted, want 0", n)
	}
	if got := admit(t, lone, "t:a", 10); got != 10 {
		t.Errorf("%d of 10 admitted", got)
	}
	if n := lone.Unreplicated(); n != 0 {
		t.Errorf("a lone node without a checkpoint marked %d keys to replicate, want 0: no round would copy them", n)
	}
	cp := newNodes(t, 1, limits, func(c *Config) {
		c.Checkpoint, c.ReplicationInterval = &memCheckpoint{states: map[string][]byte{}}, time.Hour
	})[0]
	cp.SetRing(ringOf(t, cp))
	if n := hinted(cp); n == 0 {
		t.Error("a lone node with a checkpoint: no partition hinted")
	}
	if got := admit(t, cp, "t:a", 10); got != 10 {
		t.Errorf("%d of 10 admitted", got)
	}
	if n := cp.Unreplicated(); n != 1 {
		t.Errorf("a lone node with a checkpoint: %d keys to checkpoint, want 1", n)
	}
}
