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
			admit(t, n1, key, 3)
			cp.fail.Store(tc.checkpointStale)
			time.Sleep(2 * time.Millisecond) // the second round's copies are strictly newer
			n1.replicateOnce()
			if tc.replicaStale {
				// The second round's replica was lost: the backup still holds
				// the first round's (5 admissions), the checkpoint has all 8.
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

// With the checkpoint store down, Close ends the round under way at once
// (not after its timeout) and no round runs after Close returned; the
// failures are warned about once, not once per round.
func TestNoCheckpointRoundAfterClose(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 1000} }
	cp := &downCheckpoint{}
	logs := &lockedBuffer{}
	n1, _, _, key := ownerPair(t, limits, func(c *Config) {
		c.ReplicationInterval = 5 * time.Millisecond
		c.Checkpoint = cp
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	admit(t, n1, key, 1)
	deadline := time.Now().Add(10 * time.Second)
	for cp.saves.Load() < 3 { // a failed round marks its keys again: the next one retries
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoint rounds in 10s", cp.saves.Load())
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	n1.Close()
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("Close took %v: the round under way must end when the node closes, not at its 1s timeout", took)
	}
	saves := cp.saves.Load()
	time.Sleep(50 * time.Millisecond) // ten intervals
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
