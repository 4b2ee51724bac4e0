package replica

import (
	"context"
	"sync"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Preload is a node's startup copy of the checkpoint, grouped by
// partition, for the partitions the node restores because nobody alive
// holds them (a whole cluster restarted): their keys are installed before
// the partition is admitted, without a Redis read on the decision path
// (node/restore.go). A partition's keys are taken once; Drop empties it.
// Safe for concurrent use.
type Preload struct {
	mu    sync.Mutex
	parts map[int]map[string]Copy // partition → key → its newest snapshot; nil once dropped
	keys  int                     // in parts
	until time.Time               // when the newest snapshot passes the horizon
	whole bool                    // the scan finished: a key not here is not in the checkpoint
}

// ScanCheckpoint reads every snapshot of cp into a Preload, by partition
// (partition names a key's), leaving out the snapshots older than horizon
// at now. It returns the Preload (nil when it holds no key) and how many
// keys it holds; on an error (the store failed or ctx ended) the keys read
// so far are kept, and the Preload is not whole.
func ScanCheckpoint(ctx context.Context, cp Checkpoint, partition func(key string) int, now time.Time, horizon time.Duration) (*Preload, int, error) {
	parts := map[int]map[string]Copy{}
	keys := 0
	var newest time.Time
	var keepUntil time.Time // the latest end of a budget's period among the kept
	err := cp.Scan(ctx, func(key string, state []byte, at time.Time) error {
		until := limiter.SnapshotKeepUntil(state)
		if now.Sub(at) > horizon && !now.Before(until) {
			return nil // its windows and leases have expired, and it holds no budget's spend
		}
		p := partition(key)
		m := parts[p]
		if m == nil {
			m = map[string]Copy{}
			parts[p] = m
		}
		if old, ok := m[key]; ok {
			if !at.After(old.At) {
				return nil
			}
		} else {
			keys++
		}
		m[key] = Copy{State: state, At: at, Until: until}
		if at.After(newest) {
			newest = at
		}
		if until.After(keepUntil) {
			keepUntil = until
		}
		return nil
	})
	if keys == 0 {
		return nil, 0, err
	}
	end := newest.Add(horizon)
	if keepUntil.After(end) {
		end = keepUntil
	}
	return &Preload{parts: parts, keys: keys, until: end, whole: err == nil}, keys, err
}

// Whole reports whether the scan finished: a key of a partition taken
// that is not among its keys is not in the checkpoint either.
func (pl *Preload) Whole() bool { return pl.whole }

// Until is when the newest snapshot passes the horizon: the preload is of
// no use after it.
func (pl *Preload) Until() time.Time { return pl.until }

// Take removes partition p's keys from the preload and returns them, and
// how many keys remain in other partitions.
func (pl *Preload) Take(p int) (map[string]Copy, int) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	keys := pl.parts[p]
	delete(pl.parts, p)
	pl.keys -= len(keys)
	return keys, pl.keys
}

// Drop empties the preload, returning how many keys it still held.
func (pl *Preload) Drop() int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	left := pl.keys
	pl.parts, pl.keys = nil, 0
	return left
}
