package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// Replicator copies the keys a node decides for to their backups and the
// checkpoint, and fetches the copies a crashed owner left. The node sets
// its fields once, before use; its methods are safe for concurrent use.
type Replicator struct {
	Name        string        // this node's member name: never a backup of its own keys
	Self        string        // this node's peer address (Call.From; a fetch from it reads Backup)
	Copies      int           // backups per key: its partition's first Copies backups in the ring
	Checkpoint  Checkpoint    // nil: none
	PullTimeout time.Duration // bounds one fetch of a copy
	Table       *limiter.Table
	Peers       peer.Transport
	Log         *slog.Logger
	Now         func() time.Time
	Dirty       *Dirty // the keys to copy next round: a copy that fails marks its key again
	Acked       *Acked // the copies the backups acknowledged
	Backup      *Store // the copies this node holds for others

	Stats Stats
	warn  checkpointWarn
}

// Stats counts what replication did, for metrics and tests.
type Stats struct {
	Replicated   atomic.Int64 // key snapshots the backups acknowledged
	SyncMissed   atomic.Int64 // Sync copies that could not reach a backup
	Checkpointed atomic.Int64 // key snapshots written to the checkpoint store
}

// Round sends the snapshots of keys (drained from Dirty) to their backups
// in rg, batched per backup, and to the checkpoint if there is one. A key
// here says this node no longer decides for (handed on meanwhile: its new
// custodian replicates it) is skipped, and so is one the table no longer
// holds. What a backup or the checkpoint did not take is marked again.
func (r *Replicator) Round(ctx context.Context, rg *ring.Ring, keys []string, here func(key string) bool) {
	now := r.Now()
	var states map[string][]byte
	if r.Checkpoint != nil {
		states = make(map[string][]byte, len(keys))
	}
	batches := make(map[string]*batch) // by backup peer address
	for _, key := range keys {
		if !here(key) {
			continue // handed on meanwhile: the new custodian replicates it
		}
		backups := r.backups(rg, key)
		if len(backups) == 0 && states == nil {
			continue // no backup (a node alone) and no checkpoint: no snapshot to take
		}
		state, ok := r.snapshot(key)
		if !ok {
			continue // evicted: nothing worth keeping
		}
		if states != nil {
			states[key] = state
		}
		for _, backup := range backups {
			b := batches[backup.Peer]
			if b == nil {
				b = &batch{backup: backup}
				batches[backup.Peer] = b
			}
			b.keys, b.states = append(b.keys, key), append(b.states, state)
		}
	}
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() { r.copyTo(ctx, b) })
	}
	if len(states) > 0 {
		if err := r.Checkpoint.Save(ctx, now, states); err != nil {
			r.warn.failed(r.Log, r.Now(), len(states), err)
			for key := range states {
				r.Dirty.Mark(key)
			}
		} else {
			r.warn.saved(r.Log)
			r.Stats.Checkpointed.Add(int64(len(states)))
		}
	}
	wg.Wait()
}

// snapshot is key's state in the table, if the table holds the key.
func (r *Replicator) snapshot(key string) (state []byte, ok bool) {
	ok = r.Table.Peek(key, func(b *limiter.Budget) { state, _ = b.AppendBinary(nil) })
	return state, ok
}

// batchBytes bounds the snapshots one OpReplicateMany carries, in bytes (a
// single larger snapshot travels alone): a round's copies to one backup go
// in a few calls instead of one call per key.
const batchBytes = 256 << 10

// batch is what one replication round copies to one backup: keys[i]'s
// snapshot is states[i].
type batch struct {
	backup ring.Member
	keys   []string
	states [][]byte
}

// copyTo copies b to its backup in calls of at most batchBytes of
// snapshots, one after the other.
func (r *Replicator) copyTo(ctx context.Context, b *batch) {
	for start := 0; start < len(b.keys); {
		end, size := start+1, len(b.keys[start])+len(b.states[start])
		for end < len(b.keys) && size+len(b.keys[end])+len(b.states[end]) <= batchBytes {
			size += len(b.keys[end]) + len(b.states[end])
			end++
		}
		r.copyMany(ctx, b.backup, b.keys[start:end], b.states[start:end])
		start = end
	}
}

// copyMany copies keys' snapshots to backup in one OpReplicateMany. Once
// the backup acknowledged them they count as its copies (Acked); keys it
// did not acknowledge are marked for the next round. A backup that answers
// with an error (a version without OpReplicateMany, in a rolling upgrade)
// gets them one by one.
func (r *Replicator) copyMany(ctx context.Context, backup ring.Member, keys []string, states [][]byte) {
	body := binary.AppendUvarint(nil, uint64(len(keys)))
	for i, key := range keys {
		body = peer.AppendEntry(body, key, states[i])
	}
	_, err := r.Peers.Call(ctx, backup.Peer, &peer.Call{Op: peer.OpReplicateMany, From: r.Self, State: body})
	if err != nil && !errors.Is(err, peer.ErrPeerDown) && ctx.Err() == nil {
		r.copyEach(ctx, backup, keys, states)
		return
	}
	if err != nil {
		for _, key := range keys {
			r.Dirty.Mark(key) // try again next round
		}
		return
	}
	for i, key := range keys {
		r.Acked.Put(key, backup.Name, states[i])
	}
	r.Stats.Replicated.Add(int64(len(keys)))
}

// copyEach copies keys' snapshots to backup in one OpReplicate each, at
// most 64 at a time.
func (r *Replicator) copyEach(ctx context.Context, backup ring.Member, keys []string, states [][]byte) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := r.Peers.Call(ctx, backup.Peer, &peer.Call{Op: peer.OpReplicate, Key: key, From: r.Self, State: states[i]})
			if err != nil {
				r.Dirty.Mark(key) // try again next round
				return
			}
			r.Acked.Put(key, backup.Name, states[i])
			r.Stats.Replicated.Add(1)
		}()
	}
	wg.Wait()
}

// backups returns the members that hold copies of key: its partition's
// first Copies backups in rg, this node left out.
func (r *Replicator) backups(rg *ring.Ring, key string) []ring.Member {
	bs := rg.Backups(key, r.Copies)
	return slices.DeleteFunc(bs, func(m ring.Member) bool { return m.Name == r.Name })
}

// Sync copies key's state to its backups in rg, in parallel, and waits
// until each holds it or cannot be reached (node.Config.ReplicationSync).
// Concurrent copies to one backup share frames on its peer connection.
// When a backup cannot be reached in time the key is marked for the next
// round.
func (r *Replicator) Sync(ctx context.Context, rg *ring.Ring, key string) {
	backups := r.backups(rg, key)
	if len(backups) == 0 {
		return
	}
	state, ok := r.snapshot(key)
	if !ok {
		return
	}
	var wg sync.WaitGroup
	for _, backup := range backups {
		wg.Go(func() {
			if _, err := r.Peers.Call(ctx, backup.Peer, &peer.Call{Op: peer.OpReplicate, Key: key, From: r.Self, State: state}); err != nil {
				r.Stats.SyncMissed.Add(1)
				r.Dirty.Mark(key)
				return
			}
			r.Acked.Put(key, backup.Name, state)
			r.Stats.Replicated.Add(1)
		})
	}
	wg.Wait()
}

// Fetch returns the newest copy of a crashed owner's key: the replicas at
// backups (asked in parallel) or (checkpoint true, and there is one) the
// checkpoint's, and where it came from (a backup's address, or
// "checkpoint"); nil when there is none.
func (r *Replicator) Fetch(ctx context.Context, key string, backups []string, checkpoint bool) ([]byte, string) {
	var (
		mu     sync.Mutex
		rep    []byte
		backup string
		wg     sync.WaitGroup
	)
	for _, addr := range backups {
		wg.Go(func() {
			c, err := r.fetchReplica(ctx, key, addr)
			if err != nil {
				r.Log.Warn("fetch: replica unavailable", "key", key, "backup", addr, "err", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(c.State) > 0 && (len(rep) == 0 || later(c.State, rep)) {
				rep, backup = c.State, addr
			}
		})
	}
	wg.Wait()
	if r.Checkpoint == nil || !checkpoint {
		return rep, backup
	}
	cctx, cancel := context.WithTimeout(ctx, r.PullTimeout)
	defer cancel()
	cp, _, ok, err := r.Checkpoint.Load(cctx, key)
	if err != nil {
		r.Log.Warn("fetch: checkpoint unavailable", "key", key, "err", err)
	}
	if ok && (len(rep) == 0 || later(cp, rep)) {
		return cp, "checkpoint"
	}
	return rep, backup
}

// fetchReplica fetches the backup copy of key from addr (this node or a
// peer).
func (r *Replicator) fetchReplica(ctx context.Context, key, addr string) (Copy, error) {
	if addr == "" {
		return Copy{}, nil
	}
	if addr == r.Self {
		c, _ := r.Backup.Take(key)
		return c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.PullTimeout)
	defer cancel()
	a, err := r.Peers.Call(ctx, addr, &peer.Call{Op: peer.OpReplica, Key: key, From: r.Self})
	if err != nil {
		return Copy{}, fmt.Errorf("replica of %q from %s: %w", key, addr, err)
	}
	if !a.OK {
		return Copy{}, nil
	}
	c, err := DecodeCopy(a.State)
	if err != nil {
		return Copy{}, fmt.Errorf("replica of %q from %s: %w", key, addr, err)
	}
	return c, nil
}
