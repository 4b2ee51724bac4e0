package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenring/tokenring/limiter"
)

// startRedis runs a real redis-server on a free loopback port for the test.
// Without redis-server the test is skipped locally and fails in CI.
func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server is required in CI (.ci/run installs it): %v", err)
		}
		t.Skipf("skipping: redis-server not installed (%v); CI installs it", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	t.Cleanup(func() {
		client.Close()
		_ = cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer PING")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return client
}

func TestRedisCheckpointRoundTrip(t *testing.T) {
	cp := &RedisCheckpoint{Client: startRedis(t), Prefix: "tr:"}
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 123)
	if err := cp.Save(ctx, at, map[string][]byte{"t:a": []byte("state-a"), "t:b": {}}); err != nil {
		t.Fatal(err)
	}
	state, got, ok, err := cp.Load(ctx, "t:a")
	if err != nil || !ok || string(state) != "state-a" || !got.Equal(at) {
		t.Fatalf("load: %q %v %v %v", state, got, ok, err)
	}
	if _, _, ok, err := cp.Load(ctx, "t:none"); ok || err != nil {
		t.Fatalf("missing key: ok %v err %v", ok, err)
	}
}

// failingCheckpoint wraps a Checkpoint and fails saves once told to.
type failingCheckpoint struct {
	Checkpoint
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
			cp := &failingCheckpoint{Checkpoint: &RedisCheckpoint{Client: client, Prefix: t.Name() + ":"}}
			n1, n2, after, key := ownerPair(t, limits, func(c *Config) { c.ReplicationInterval = time.Hour; c.Checkpoint = cp })
			admit(t, n1, key, 5)
			n1.replicateOnce()
			first, ok := n2.replicas.take(key) // the first round's replica, with its time
			if !ok {
				t.Fatal("no replica after the first round")
			}
			n2.replicas.put(key, first.state, first.at)
			admit(t, n1, key, 3)
			cp.fail.Store(tc.checkpointStale)
			time.Sleep(2 * time.Millisecond) // the second round's copies are strictly newer
			n1.replicateOnce()
			if tc.replicaStale {
				// The second round's replica was lost: the backup still holds
				// the first round's (5 admissions), the checkpoint has all 8.
				n2.replicas.put(key, first.state, first.at)
			}
			if tc.loseReplica {
				n2.replicas.take(key)
			}
			n1.Close() // crash
			n2.SetRing(after)
			if got := admit(t, n2, key, 20); got != 12 {
				t.Fatalf("%d admitted after the crash, want 12: the newest copy holds all 8 admissions", got)
			}
		})
	}
}
