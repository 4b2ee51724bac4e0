package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// newReplicator returns a Replicator of a node named n1 whose table holds
// keys, each admitted twice, and their snapshots.
func newReplicator(t *testing.T, keys []string) (*Replicator, [][]byte) {
	t.Helper()
	table := limiter.NewTable(limiter.Policy{}, func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} })
	now := time.Now()
	states := make([][]byte, len(keys))
	for i, k := range keys {
		for range 2 {
			if err := table.Do(k, now, func(b *limiter.Budget) { b.Acquire(now, limiter.Request{PromptTokens: 1, MaxTokens: 1}) }); err != nil {
				t.Fatal(err)
			}
		}
		table.Peek(k, func(b *limiter.Budget) { states[i], _ = b.AppendBinary(nil) })
	}
	log := slog.New(slog.DiscardHandler)
	peers := peer.NewPool(peer.PoolConfig{Self: "127.0.0.1:1", Log: log, Stats: &peer.Stats{}, Dial: (&net.Dialer{}).DialContext})
	t.Cleanup(peers.Close)
	return &Replicator{Name: "n1", Self: "127.0.0.1:1", Copies: 1, Table: table, Peers: peers, Log: log, Now: time.Now,
		Dirty: NewDirty(), Acked: &Acked{}, Backup: &Store{}}, states
}

func someKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("t:k%d", i)
	}
	return keys
}

// oldBackup is a peer server of a version without OpReplicateMany: it
// refuses it, and keeps each OpReplicate's key.
type oldBackup struct {
	srv  *peer.Server
	mu   sync.Mutex
	keys map[string][]byte
	many int // OpReplicateMany calls refused
}

func startOldBackup(t *testing.T) *oldBackup {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &oldBackup{keys: map[string][]byte{}}
	o.srv = peer.NewServer(ln, peer.ServerConfig{
		Handle: func(_ context.Context, c *peer.Call) (peer.Answer, error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			switch c.Op {
			case peer.OpReplicateMany:
				o.many++
				return peer.Answer{}, errors.New("decode call: unknown op 16")
			case peer.OpReplicate:
				o.keys[c.Key] = c.State
				return peer.Answer{Owner: "old", OK: true}, nil
			}
			return peer.Answer{}, errors.New("unexpected op " + c.Op.String())
		},
		Inline: func(*peer.Call) bool { return true },
		Log:    slog.New(slog.DiscardHandler),
	})
	t.Cleanup(o.srv.Close)
	return o
}

// A backup that refuses OpReplicateMany (an older version, during a
// rolling upgrade) still gets every key, one call each, and the keys count
// as acknowledged.
func TestReplicationFallsBackPerKeyForAnOlderBackup(t *testing.T) {
	keys := someKeys(50)
	r, states := newReplicator(t, keys)
	old := startOldBackup(t)
	backup := ring.Member{Name: "old", Peer: old.srv.Addr().String()}
	r.copyMany(context.Background(), backup, keys, states)
	old.mu.Lock()
	defer old.mu.Unlock()
	if old.many != 1 {
		t.Errorf("%d OpReplicateMany calls, want 1 (then one call per key)", old.many)
	}
	if len(old.keys) != len(keys) {
		t.Fatalf("the old backup holds %d keys, want %d", len(old.keys), len(keys))
	}
	for i, k := range keys {
		if string(old.keys[k]) != string(states[i]) {
			t.Fatalf("%s: the old backup holds another state", k)
		}
		if c, ok := r.Acked.Get(k); !ok || !slices.Equal(c.By, []string{"old"}) {
			t.Fatalf("%s: not acknowledged by the old backup: %+v %v", k, c, ok)
		}
	}
	if got := r.Stats.Replicated.Load(); got != int64(len(keys)) {
		t.Errorf("%d keys counted replicated, want %d", got, len(keys))
	}
}

// A round whose batch the backup never acknowledges (it is down) leaves
// every key of it marked for the next round, and none acknowledged.
func TestReplicationToADownBackupKeepsKeysMarked(t *testing.T) {
	keys := someKeys(20)
	r, states := newReplicator(t, keys)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // refused from now on
	r.copyMany(context.Background(), ring.Member{Name: "down", Peer: down}, keys, states)
	if got := r.Dirty.Len(); got != len(keys) {
		t.Errorf("%d keys marked after a failed round, want all %d", got, len(keys))
	}
	for _, k := range keys {
		if _, ok := r.Acked.Get(k); ok {
			t.Fatalf("%s acknowledged by a backup that is down", k)
		}
	}
}
