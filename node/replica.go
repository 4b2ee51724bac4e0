package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/custody"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// Replication: an owner's RAM dies with it, so every ReplicationInterval the
// owner sends the snapshots of the keys it changed since the last round to
// each key's backups (the next ReplicationCopies members for the key's
// partition). A backup only stores them. When an owner crashes, the new owner of its partitions first
// tries to pull a key from the previous owner as in a handoff; when that
// fails, it takes the backup's replica instead of starting from zero. What
// is lost is what the owner admitted after its last replication round: at
// most one interval's worth (plus the transfer time).

// dirtySet collects the keys changed since the last replication round,
// sharded so that marking a key rarely contends. It shares the idea of
// limiter.Table's shards, not its work: the table keeps a Budget per key
// under a lock held for each decision and evicts idle keys, while this set
// only collects names, on the hot path, and hands them all over at once
// (drain) every round; a generic sharded map serving both would cost the
// hot path an interface or a type parameter for 40 lines saved.
type dirtySet struct {
	seed   maphash.Seed
	shards [16]struct {
		mu sync.Mutex
		m  map[string]struct{}
	}
}

func (d *dirtySet) mark(key string) {
	s := &d.shards[maphash.String(d.seed, key)%uint64(len(d.shards))]
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]struct{})
	}
	s.m[key] = struct{}{}
	s.mu.Unlock()
}

// len counts the marked keys.
func (d *dirtySet) len() int {
	n := 0
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// drain returns the marked keys and clears the set.
func (d *dirtySet) drain() []string {
	var keys []string
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for k := range s.m {
			keys = append(keys, k)
		}
		s.m = nil
		s.mu.Unlock()
	}
	return keys
}

// replica is a copy of a key's state held for its owner.
type replica struct {
	state []byte
	at    time.Time
}

// replicaStore holds the replicas this node keeps as a backup. Its map
// shrinks (node/bounds.go) as replicas are taken or expire.
type replicaStore struct {
	// check, if set, vets a replica before it is kept: one it rejects
	// (a state dated in the future) is dropped and the key's previous
	// replica, if any, kept.
	check func(key string, state []byte, now time.Time) error
	log   *slog.Logger // nil: rejections are not logged

	mu   sync.Mutex // guards m and size
	m    map[string]replica
	size shrinkable
}

// put keeps state as key's replica, received at now, unless check rejects
// it: then it returns check's error and keeps what it had.
func (r *replicaStore) put(key string, state []byte, now time.Time) error {
	if r.check != nil {
		if err := r.check(key, state, now); err != nil {
			if r.log != nil {
				r.log.Warn("replica rejected", "key", key, "err", err)
			}
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]replica)
	}
	r.m[key] = replica{state: state, at: now}
	r.size.grew(len(r.m))
	return nil
}

// take removes and returns key's replica and when it arrived.
func (r *replicaStore) take(key string) (replica, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep, ok := r.m[key]
	if ok {
		delete(r.m, key)
		r.m = shrink(&r.size, r.m)
	}
	return rep, ok
}

// expire drops replicas older than horizon: their windows and leases have
// run out anyway.
func (r *replicaStore) expire(now time.Time, horizon time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, rep := range r.m {
		if now.Sub(rep.at) > horizon {
			delete(r.m, k)
		}
	}
	r.m = shrink(&r.size, r.m)
}

func (r *replicaStore) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m, r.size = nil, shrinkable{}
}

func (r *replicaStore) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// Replicas reports how many keys this node holds replicas of, as a backup.
func (n *Node) Replicas() int { return n.replicas.len() }

// changed marks key for the next replication round, unless no round would
// copy it: without a checkpoint store, a node alone (or before its first
// ring) has no backup to copy to, and replicateOnce would drop the mark.
// A node that joins later gets the key's state on its next change, as it
// would have from a mark dropped by the round before the join.
func (n *Node) changed(key string) {
	if n.cfg.Checkpoint == nil {
		if r := n.ring.Load(); r == nil || r.Len() < 2 {
			return
		}
	}
	n.dirty.mark(key)
}

// Unreplicated reports the changed keys not yet copied to their backup (and
// checkpoint), plus one for each replication round under way. Zero means
// every change made so far is copied.
func (n *Node) Unreplicated() int { return n.dirty.len() + int(n.inflight.Load()) }

// replicateOnce sends the changed keys' snapshots to their backups, and to
// the checkpoint store if there is one.
func (n *Node) replicateOnce() {
	r := n.ring.Load()
	n.inflight.Add(1) // covers the keys between drain and the end of the round
	defer n.inflight.Add(-1)
	keys := n.dirty.drain()
	if r == nil || len(keys) == 0 {
		return
	}
	// The round ends when the node closes: Close waits for it, and a
	// checkpoint store that does not answer must not hold Close up.
	ctx, cancel := context.WithTimeout(context.Background(), max(n.cfg.ReplicationInterval, time.Second))
	defer cancel()
	roundDone := make(chan struct{})
	defer close(roundDone)
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-roundDone:
		}
	}()
	now := n.cfg.Now()
	var states map[string][]byte
	if n.cfg.Checkpoint != nil {
		states = make(map[string][]byte, len(keys))
	}
	batches := make(map[string]*replBatch) // by backup peer address
	for _, key := range keys {
		if t := n.tr.Load(); t != nil && t.gates[r.Partition(key)].hop.Load().mode != custody.RouteLocal {
			continue // handed on meanwhile: the new custodian replicates it
		}
		backups := n.backups(r, key)
		if len(backups) == 0 && states == nil {
			continue // no backup (a node alone) and no checkpoint: no snapshot to take
		}
		var state []byte
		if !n.table.Peek(key, func(b *limiter.Budget) { state, _ = b.AppendBinary(nil) }) {
			continue // evicted: nothing worth keeping
		}
		if states != nil {
			states[key] = state
		}
		for _, backup := range backups {
			b := batches[backup.Peer]
			if b == nil {
				b = &replBatch{backup: backup}
				batches[backup.Peer] = b
			}
			b.keys, b.states = append(b.keys, key), append(b.states, state)
		}
	}
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() { n.replicateTo(ctx, b) })
	}
	if len(states) > 0 {
		if err := n.cfg.Checkpoint.Save(ctx, now, states); err != nil {
			n.cpWarn.failed(n.log, n.cfg.Now(), len(states), err)
			for key := range states {
				n.dirty.mark(key)
			}
		} else {
			n.cpWarn.saved(n.log)
			n.counts.checkpointed.Add(int64(len(states)))
		}
	}
	wg.Wait()
}

// replBatchBytes bounds the snapshots one peer.OpReplicateMany carries, in
// bytes (a single larger snapshot travels alone): a round's copies to one
// backup go in a few calls instead of one call per key.
const replBatchBytes = 256 << 10

// replBatch is what one replication round copies to one backup: keys[i]'s
// snapshot is states[i].
type replBatch struct {
	backup ring.Member
	keys   []string
	states [][]byte
}

// replicateTo copies b to its backup in calls of at most replBatchBytes
// of snapshots, one after the other.
func (n *Node) replicateTo(ctx context.Context, b *replBatch) {
	for start := 0; start < len(b.keys); {
		end, size := start+1, len(b.keys[start])+len(b.states[start])
		for end < len(b.keys) && size+len(b.keys[end])+len(b.states[end]) <= replBatchBytes {
			size += len(b.keys[end]) + len(b.states[end])
			end++
		}
		n.replicateChunk(ctx, b.backup, b.keys[start:end], b.states[start:end])
		start = end
	}
}

// replicateChunk copies keys' snapshots to backup in one peer.OpReplicateMany.
// Once the backup acknowledged them they count as its copies (fence.go);
// keys it did not acknowledge stay marked for the next round. A backup
// that answers with an error (a version without peer.OpReplicateMany, in a
// rolling upgrade) gets them one by one.
func (n *Node) replicateChunk(ctx context.Context, backup ring.Member, keys []string, states [][]byte) {
	body := binary.AppendUvarint(nil, uint64(len(keys)))
	for i, key := range keys {
		body = peer.AppendEntry(body, key, states[i])
	}
	_, err := n.peers.Get(backup.Peer).Call(ctx, &Call{Op: peer.OpReplicateMany, From: n.PeerAddr(), State: body})
	if err != nil && !errors.Is(err, ErrPeerDown) && ctx.Err() == nil {
		n.replicateEach(ctx, backup, keys, states)
		return
	}
	if err != nil {
		for _, key := range keys {
			n.dirty.mark(key) // try again next round
		}
		return
	}
	for i, key := range keys {
		n.acked.put(key, backup.Name, states[i])
	}
	n.counts.replicated.Add(int64(len(keys)))
}

// replicateEach copies keys' snapshots to backup in one peer.OpReplicate each,
// at most 64 at a time.
func (n *Node) replicateEach(ctx context.Context, backup ring.Member, keys []string, states [][]byte) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := n.peers.Get(backup.Peer).Call(ctx, &Call{Op: peer.OpReplicate, Key: key, From: n.PeerAddr(), State: states[i]})
			if err != nil {
				n.dirty.mark(key) // try again next round
				return
			}
			n.acked.put(key, backup.Name, states[i])
			n.counts.replicated.Add(1)
		}()
	}
	wg.Wait()
}

// backups returns the members that hold copies of key: its partition's
// first ReplicationCopies backups in r, this node left out.
func (n *Node) backups(r *ring.Ring, key string) []ring.Member {
	bs := r.Backups(key, n.cfg.ReplicationCopies)
	return slices.DeleteFunc(bs, func(m ring.Member) bool { return m.Name == n.cfg.Name })
}

// replicateNow copies key's state to its backups, in parallel, and waits
// until each holds it or cannot be reached (ReplicationSync). Concurrent
// copies to one backup share frames on its peer connection. When a backup
// cannot be reached in time the key stays marked for the next round.
func (n *Node) replicateNow(ctx context.Context, key string) {
	r := n.ring.Load()
	if r == nil {
		return
	}
	backups := n.backups(r, key)
	if len(backups) == 0 {
		return
	}
	var state []byte
	if !n.table.Peek(key, func(b *limiter.Budget) { state, _ = b.AppendBinary(nil) }) {
		return
	}
	var wg sync.WaitGroup
	for _, backup := range backups {
		wg.Go(func() {
			if _, err := n.peers.Get(backup.Peer).Call(ctx, &Call{Op: peer.OpReplicate, Key: key, From: n.PeerAddr(), State: state}); err != nil {
				n.counts.syncMissed.Add(1)
				n.dirty.mark(key)
				return
			}
			n.acked.put(key, backup.Name, state)
			n.counts.replicated.Add(1)
		})
	}
	wg.Wait()
}

// checkpointWarnEvery is the most often a failing checkpoint store is
// warned about: rounds run every ReplicationInterval (100 ms by default),
// and an unreachable Redis would otherwise be a warning per round.
const checkpointWarnEvery = time.Minute

// checkpointWarn logs checkpoint failures as a warning at most once per
// checkpointWarnEvery, with the rounds that failed since the last warning
// (the others at debug), and the recovery once, at info.
type checkpointWarn struct {
	mu     sync.Mutex
	last   time.Time // the last warning; zero: the store is fine
	missed int       // failed rounds not warned about
}

func (w *checkpointWarn) failed(log *slog.Logger, now time.Time, keys int, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.last.IsZero() && now.Sub(w.last) < checkpointWarnEvery {
		w.missed++
		log.Debug("checkpoint failed; retrying next round", "keys", keys, "err", err)
		return
	}
	log.Warn("checkpoint failed; retrying every round", "keys", keys, "failed_rounds_since_last_warning", w.missed, "next_warning_in", checkpointWarnEvery, "err", err)
	w.last, w.missed = now, 0
}

func (w *checkpointWarn) saved(log *slog.Logger) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.last.IsZero() {
		log.Info("checkpoint saved again", "failed_rounds_since_last_warning", w.missed)
	}
	w.last, w.missed = time.Time{}, 0
}

// appendReplica encodes a backup's copy of a key for peer.OpReplica's answer:
// when it arrived (unix ns), then the key's snapshot.
func appendReplica(b []byte, r replica) []byte {
	b = binary.AppendVarint(b, r.at.UnixNano())
	return append(b, r.state...)
}

// decodeReplica decodes what appendReplica encoded.
func decodeReplica(b []byte) (replica, error) {
	at, n := binary.Varint(b)
	if n <= 0 {
		return replica{}, fmt.Errorf("replica: %w", peer.ErrShort)
	}
	return replica{state: b[n:], at: time.Unix(0, at)}, nil
}
