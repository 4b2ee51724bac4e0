package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// RedisCheckpoint stores snapshots in Redis as plain strings under
// Prefix+key: 8 bytes of big-endian Unix nanoseconds (when the snapshot was
// taken), then the limiter snapshot. Each expires after TTL, by which time
// its windows and leases have expired too.
type RedisCheckpoint struct {
	Client *redis.Client
	Prefix string        // e.g. "tokenring:"
	TTL    time.Duration // zero means 3 minutes
}

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
		pipe.Set(ctx, r.Prefix+key, append(v, state...), r.ttl())
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
