package main

// -system redis-incr and redis-zset: the Redis baselines, driven by the
// same workers as tokenringd.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// zsetWindow is the sliding log's window. It is longer than any run, so
// the ZREMRANGEBYSCORE of the script removes nothing and what bounds each
// key is the trim to the newest -entries (ZREMRANGEBYRANK).
const zsetWindow = time.Hour

// zsetLimit is the script's limit: above any -entries, so every decision
// admits.
const zsetLimit = 1 << 40

// slidingLog is the classic sorted-set sliding log with one change: the
// set is trimmed to its newest ARGV[5]-1 members before the new one is
// added, so that a key holds exactly -entries members whatever the rate.
// KEYS[1]: the key; ARGV: now (µs), window (µs), limit, a member unique
// to this call, entries. It returns 1 for an admission, 0 for a refusal.
var slidingLog = redis.NewScript(`
local now, window, limit, entries = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - window)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -entries)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4])
  redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000))
  return 1
end
return 0`)

// incrKey and zsetKey are the Redis keys of a tenant.
func incrKey(tenant string) string { return "incr:" + tenant }
func zsetKey(tenant string) string { return "zset:" + tenant }

// redisSystem is a redis-server on -redis, one pooled connection per
// worker.
type redisSystem struct {
	c   loadConfig
	rdb *redis.Client
}

// newRedisSystem connects, loads the script and, for redis-zset, prefills
// every tenant's key with -entries members inside the window.
func newRedisSystem(ctx context.Context, c loadConfig) (*redisSystem, error) {
	rdb := redis.NewClient(&redis.Options{Addr: c.redisAddr, PoolSize: c.workers})
	s := &redisSystem{c: c, rdb: rdb}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s: %w", c.redisAddr, err)
	}
	if c.system == "redis-zset" {
		if err := slidingLog.Load(ctx, rdb).Err(); err != nil {
			rdb.Close()
			return nil, fmt.Errorf("redis %s: load the sliding-log script: %w", c.redisAddr, err)
		}
		if err := s.prefill(ctx, time.Now()); err != nil {
			rdb.Close()
			return nil, err
		}
	}
	return s, nil
}

// prefillChunk is how many members one ZADD of the prefill writes.
const prefillChunk = 1000

// prefill replaces each tenant's sorted set by -entries members "p-J",
// scored in the microseconds before now.
func (s *redisSystem) prefill(ctx context.Context, now time.Time) error {
	base := now.UnixMicro() - int64(s.c.entries)
	for ti := range s.c.tenants {
		key := zsetKey(tenantName(s.c, ti))
		pipe := s.rdb.Pipeline()
		pipe.Del(ctx, key)
		for j := 0; j < s.c.entries; j += prefillChunk {
			members := make([]redis.Z, 0, min(prefillChunk, s.c.entries-j))
			for k := j; k < min(j+prefillChunk, s.c.entries); k++ {
				members = append(members, redis.Z{Score: float64(base + int64(k)), Member: "p-" + strconv.Itoa(k)})
			}
			pipe.ZAdd(ctx, key, members...)
		}
		pipe.PExpire(ctx, key, zsetWindow)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redis %s: prefill %s: %w", s.c.redisAddr, key, err)
		}
	}
	return nil
}

func (s *redisSystem) close() { _ = s.rdb.Close() }

// decider: redis-incr sends INCR (always an admission: the floor any
// Redis limiter pays), redis-zset the sliding-log script by EVALSHA. A
// Redis error is a transport error.
func (s *redisSystem) decider(id int) decideFunc {
	if s.c.system == "redis-incr" {
		return func(ctx context.Context, _, _ int, tenant string) outcome {
			if err := s.rdb.Incr(ctx, incrKey(tenant)).Err(); err != nil {
				return outcome{err: err}
			}
			return outcome{code: http.StatusOK, allowed: true}
		}
	}
	prefix := strconv.Itoa(id) + "-"
	return func(ctx context.Context, i, _ int, tenant string) outcome {
		now := time.Now().UnixMicro()
		member := prefix + strconv.Itoa(i)
		ok, err := slidingLog.EvalSha(ctx, s.rdb, []string{zsetKey(tenant)},
			now, zsetWindow.Microseconds(), zsetLimit, member, s.c.entries).Int()
		switch {
		case err != nil:
			return outcome{err: err}
		case ok == 1:
			return outcome{code: http.StatusOK, allowed: true}
		}
		return outcome{code: http.StatusTooManyRequests}
	}
}
