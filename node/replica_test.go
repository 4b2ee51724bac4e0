package node

import (
	"context"
	"errors"
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
	if got := n1.counts.replicated.Load(); got != count {
		t.Errorf("%d keys counted replicated, want %d", got, count)
	}
	for _, k := range keys {
		b, _ := all.Backup(k)
		if c, ok := n1.acked.get(k); !ok || !slices.Equal(c.by, []string{b.Name}) {
			t.Fatalf("%s: acknowledged copy %+v %v, want one by %s", k, c, ok, b.Name)
		}
	}
	if n1.Unreplicated() != 0 {
		t.Errorf("%d keys left unreplicated", n1.Unreplicated())
	}
}

// oldBackup is a peer server of a version without peer.OpReplicateMany: it
// refuses it, and keeps each peer.OpReplicate's key.
type oldBackup struct {
	srv  *peer.Server
	mu   sync.Mutex
	keys map[string][]byte
	many int // peer.OpReplicateMany calls refused
}

func startOldBackup(t *testing.T, like *Node) *oldBackup {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &oldBackup{keys: map[string][]byte{}}
	auth, err := like.cfg.peerAuth()
	if err != nil {
		t.Fatal(err)
	}
	o.srv = peer.NewServer(ln, peer.ServerConfig{
		Handle: func(_ context.Context, c *Call) (Answer, error) {
			o.mu.Lock()
			defer o.mu.Unlock()
			switch c.Op {
			case peer.OpReplicateMany:
				o.many++
				return Answer{}, errors.New("decode call: unknown op 16")
			case peer.OpReplicate:
				o.keys[c.Key] = c.State
				return Answer{Owner: "old", OK: true}, nil
			}
			return Answer{}, errors.New("unexpected op " + c.Op.String())
		},
		Inline: func(*Call) bool { return true },
		Log:    slog.New(slog.DiscardHandler),
		Auth:   auth,
		Limits: peer.Limits{MaxFrame: like.cfg.MaxFrame, ReadTimeout: like.cfg.PeerReadTimeout},
	})
	t.Cleanup(o.srv.Close)
	return o
}

// A backup that refuses peer.OpReplicateMany (an older version, during a
// rolling upgrade) still gets every key, one call each, and the keys count
// as acknowledged.
func TestReplicationFallsBackPerKeyForAnOlderBackup(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	n1 := newNodes(t, 1, limits, func(c *Config) { c.ReplicationInterval = time.Hour })[0]
	old := startOldBackup(t, n1)
	keys := keysWhere(50, func(string) bool { return true })
	states := make([][]byte, len(keys))
	for i, k := range keys {
		admit(t, n1, k, 2)
		n1.table.Peek(k, func(b *limiter.Budget) { states[i], _ = b.AppendBinary(nil) })
	}
	backup := ring.Member{Name: "old", Peer: old.srv.Addr().String()}
	n1.replicateChunk(context.Background(), backup, keys, states)
	old.mu.Lock()
	defer old.mu.Unlock()
	if old.many != 1 {
		t.Errorf("%d peer.OpReplicateMany calls, want 1 (then one call per key)", old.many)
	}
	if len(old.keys) != len(keys) {
		t.Fatalf("the old backup holds %d keys, want %d", len(old.keys), len(keys))
	}
	for i, k := range keys {
		if string(old.keys[k]) != string(states[i]) {
			t.Fatalf("%s: the old backup holds another state", k)
		}
		if c, ok := n1.acked.get(k); !ok || !slices.Equal(c.by, []string{"old"}) {
			t.Fatalf("%s: not acknowledged by the old backup: %+v %v", k, c, ok)
		}
	}
	if got := n1.counts.replicated.Load(); got != int64(len(keys)) {
		t.Errorf("%d keys counted replicated, want %d", got, len(keys))
	}
}

// A round whose batch the backup never acknowledges (it is down) leaves
// every key of it marked for the next round, and none acknowledged.
func TestReplicationToADownBackupKeepsKeysMarked(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }
	n1 := newNodes(t, 1, limits, func(c *Config) { c.ReplicationInterval = time.Hour })[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // refused from now on
	keys := keysWhere(20, func(string) bool { return true })
	states := make([][]byte, len(keys))
	n1.dirty.drain()
	n1.replicateChunk(context.Background(), ring.Member{Name: "down", Peer: down}, keys, states)
	if got := n1.dirty.len(); got != len(keys) {
		t.Errorf("%d keys marked after a failed round, want all %d", got, len(keys))
	}
	for _, k := range keys {
		if _, ok := n1.acked.get(k); ok {
			t.Fatalf("%s acknowledged by a backup that is down", k)
		}
	}
}
