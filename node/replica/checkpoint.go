package replica

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenring/tokenring/limiter"
)

// Checkpoint is an optional durable store of key snapshots, written by each
// owner in its replication rounds and read by a new owner only when a key's
// previous owner is unreachable (a crash). It is never on the decision path.
// Implementations must be safe for concurrent use.
type Checkpoint interface {
	// Save stores snapshots of keys, all taken at time at.
	Save(ctx context.Context, at time.Time, states map[string][]byte) error
	// Load returns key's latest snapshot and when it was taken; ok is
	// false when there is none.
	Load(ctx context.Context, key string) (state []byte, at time.Time, ok bool, err error)
	// Scan calls fn for every snapshot the store holds (in no particular
	// order; a key may come more than once), stopping at fn's first error,
	// which it returns. It reads the store in batches, so its memory does
	// not grow with the store; state is fn's to keep. A node scans once at
	// startup (Preload), never on the decision path.
	Scan(ctx context.Context, fn func(key string, state []byte, at time.Time) error) error
}

// RedisCheckpoint stores snapshots in Redis as plain strings under
// Prefix+key: 8 bytes of big-endian Unix nanoseconds (when the snapshot was
// taken), then the limiter snapshot. Each expires after TTL, by which time
// its windows and leases have expired too, or, for a key holding a
// budget's spend, when its period ends (limiter.SnapshotKeepUntil) if that
// is later.
type RedisCheckpoint struct {
	Client *redis.Client
	Prefix string        // e.g. "tokenring:"
	TTL    time.Duration // zero means 3 minutes
}

// maxBudgetTTL caps a budget's checkpoint's TTL (a total budget's never
// ends): a little over a year.
const maxBudgetTTL = 400 * 24 * time.Hour

func (r *RedisCheckpoint) ttl() time.Duration {
	if r.TTL <= 0 {
		return 3 * time.Minute
	}
	return r.TTL
}

// Save writes every snapshot in one pipeline.
func (r *RedisCheckpoint) Save(ctx context.Context, at time.Time, states map[string][]byte) error {
	if len(states) == 0 {
		return nil
	}
	pipe := r.Client.Pipeline()
	for key, state := range states {
		v := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(state)), uint64(at.UnixNano()))
		ttl := r.ttl()
		if until := limiter.SnapshotKeepUntil(state); until.Sub(at) > ttl {
			ttl = min(until.Sub(at), maxBudgetTTL)
		}
		pipe.Set(ctx, r.Prefix+key, append(v, state...), ttl)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("checkpoint %d keys to redis: %w", len(states), err)
	}
	return nil
}

// Load reads key's snapshot.
func (r *RedisCheckpoint) Load(ctx context.Context, key string) ([]byte, time.Time, bool, error) {
	v, err := r.Client.Get(ctx, r.Prefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, time.Time{}, false, nil
	}
	if err != nil {
		return nil, time.Time{}, false, fmt.Errorf("checkpoint of %q from redis: %w", key, err)
	}
	if len(v) < 8 {
		return nil, time.Time{}, false, fmt.Errorf("checkpoint of %q: %d bytes, want at least 8", key, len(v))
	}
	return v[8:], time.Unix(0, int64(binary.BigEndian.Uint64(v))), true, nil
}

// scanBatch is how many keys one SCAN step asks Redis for, and so how many
// snapshots one MGET reads.
const scanBatch = 1000

// Scan walks Prefix* with SCAN (COUNT 1000) and reads each step's keys with
// one MGET: one batch in memory at a time. A key that expired between the
// two is skipped, and so is a value too short to hold a timestamp (Load
// reports those as errors). SCAN may return a key twice; it returns every
// key present for the whole scan.
func (r *RedisCheckpoint) Scan(ctx context.Context, fn func(key string, state []byte, at time.Time) error) error {
	match := globEscape(r.Prefix) + "*"
	var cursor uint64
	for {
		keys, next, err := r.Client.Scan(ctx, cursor, match, scanBatch).Result()
		if err != nil {
			return fmt.Errorf("scan checkpoint %s* in redis: %w", r.Prefix, err)
		}
		if len(keys) > 0 {
			vals, err := r.Client.MGet(ctx, keys...).Result()
			if err != nil {
				return fmt.Errorf("read %d checkpoints from redis: %w", len(keys), err)
			}
			for i, v := range vals {
				s, ok := v.(string)
				if !ok || len(s) < 8 {
					continue // expired since the SCAN, or not ours
				}
				at := time.Unix(0, int64(binary.BigEndian.Uint64([]byte(s[:8]))))
				if err := fn(strings.TrimPrefix(keys[i], r.Prefix), []byte(s[8:]), at); err != nil {
					return err
				}
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// globEscape quotes the characters special to Redis's glob-style MATCH.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
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
