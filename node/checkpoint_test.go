package node

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenring/tokenring/internal/redistest"
	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/replica"
)

// startRedis runs a real redis-server for the test and returns a client
// of it (redistest.Start: skipped locally without one, failed in CI).
func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { client.Close() })
	return client
}

// failingCheckpoint wraps a Checkpoint and fails saves once told to.
type failingCheckpoint struct {
	replica.Checkpoint
	fail atomic.Bool
}

func (f *failingCheckpoint) Save(ctx context.Context, at time.Time, states map[string][]byte) error {
	if f.fail.Load() {
		return errors.New("checkpoint store down")
	}
	return f.Checkpoint.Save(ctx, at, states)
}

// After a crash the new owner restores from whichever copy is newer: the
// backup's replica or the Redis checkpoint.
func TestCrashRestoresNewestCopy(t *testing.T) {
	client := startRedis(t)
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 20} }
	for _, tc := range []struct {
		name            string
		loseReplica     bool // the backup lost its replica: only the checkpoint has the state
		checkpointStale bool // the checkpoint missed the last round: the replica is newer
		replicaStale    bool // the backup missed the last round: the checkpoint is newer
	}{
		{name: "checkpoint only", loseReplica: true},
		{name: "replica newer", checkpointStale: true},
		{name: "checkpoint newer", replicaStale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp := &failingCheckpoint{Checkpoint: &replica.RedisCheckpoint{Client: client, Prefix: t.Name() + ":"}}
			n1, n2, after, key := ownerPair(t, limits, func(c *Config) { c.ReplicationInterval = time.Hour; c.Checkpoint = cp })
			admit(t, n1, key, 5)
			n1.replicateOnce()
			first, ok := n2.replicas.Take(key) // the first round's replica, with its time
			if !ok {
				t.Fatal("no replica after the first round")
			}
			n2.replicas.Put(key, first.State, first.At)
			// The second round's copies must be of a strictly later state
			// (copies are ordered by limiter.SnapshotTime): the clock past
			// the first round's state before the admissions that change it.
			firstAt, err := limiter.SnapshotTime(first.State)
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, time.Second, "the clock past the first round's state", func() bool { return n1.cfg.Now().After(firstAt) })
			admit(t, n1, key, 3)
			cp.fail.Store(tc.checkpointStale)
			n1.replicateOnce()
			if tc.replicaStale {
				// The second round's replica was lost: the backup still holds
				// the first round's (5 admissions), the checkpoint has all 8.
				// (Put keeps the later of two states: take the second's out.)
				n2.replicas.Take(key)
				n2.replicas.Put(key, first.State, first.At)
			}
			if tc.loseReplica {
				n2.replicas.Take(key)
			}
			n1.Close() // crash
			n2.SetRing(after)
			if got := admit(t, n2, key, 20); got != 12 {
				t.Fatalf("%d admitted after the crash, want 12: the newest copy holds all 8 admissions", got)
			}
			// The copy restored from is the one the case names.
			fromCheckpoint := int64(0)
			if tc.loseReplica || tc.replicaStale {
				fromCheckpoint = 1
			}
			if got, rep := n2.counts.fromCheckpoint.Load(), n2.counts.fromReplica.Load(); got != fromCheckpoint || rep != 1-fromCheckpoint {
				t.Fatalf("restored %d keys from the checkpoint, %d from the replica; want %d and %d", got, rep, fromCheckpoint, 1-fromCheckpoint)
			}
		})
	}
}

// downCheckpoint is a checkpoint store that does not answer: every Save
// waits for its context, as against an unreachable Redis. It counts saves.
type downCheckpoint struct {
	replica.Checkpoint
	saves atomic.Int64
}

func (d *downCheckpoint) Save(ctx context.Context, at time.Time, states map[string][]byte) error {
	d.saves.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (d *downCheckpoint) Load(context.Context, string) ([]byte, time.Time, bool, error) {
	return nil, time.Time{}, false, errors.New("checkpoint store down")
}

// failingSaves is a checkpoint store whose saves fail at once: a failed
// round marks its keys again, so a node holding a key saves at every
// interval. It counts saves.
type failingSaves struct{ downCheckpoint }

func (f *failingSaves) Save(context.Context, time.Time, map[string][]byte) error {
	f.saves.Add(1)
	return errors.New("checkpoint store down")
}

// With the checkpoint store down, Close ends the round under way at once
// (not after its timeout) and no round runs after Close returned; the
// failures are warned about once, not once per round.
func TestNoCheckpointRoundAfterClose(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 1000} }
	cp := &downCheckpoint{}
	// n2 stays up, on the same interval, with a store failing at once: its
	// saves show the rounds n1 would run had its loop outlived Close.
	witness := &failingSaves{}
	logs := &lockedBuffer{}
	n1, n2, _, key := ownerPair(t, limits, func(c *Config) {
		c.ReplicationInterval = 5 * time.Millisecond
		c.Checkpoint = cp
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if c.Name == "n2" {
			c.Checkpoint, c.Logger = witness, slog.New(slog.DiscardHandler)
		}
	})
	admit(t, n1, key, 1)
	admit(t, n2, keysWhere(1, func(k string) bool { o, _ := n2.Ring().Owner(k); return o.Name == "n2" })[0], 1)
	// A failed round marks its keys again: the next one retries.
	eventually(t, 10*time.Second, "3 checkpoint rounds at n1", func() bool { return cp.saves.Load() >= 3 })
	start := time.Now()
	n1.Close()
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Close took %v: the round under way must end when the node closes, not at its 1s timeout", took)
	}
	saves := cp.saves.Load()
	beat := witness.saves.Load()
	eventually(t, 10*time.Second, "ten rounds at n2 after n1 closed", func() bool { return witness.saves.Load() >= beat+10 })
	if got := cp.saves.Load(); got != saves {
		t.Fatalf("%d checkpoint rounds after Close returned", got-saves)
	}
	if w := strings.Count(logs.String(), "checkpoint failed"); w != 1 {
		t.Fatalf("%d checkpoint warnings for %d failed rounds, want 1:\n%s", w, saves, logs.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
