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

// zsetRPM and zsetTPM are the limits the load run asks the script to
// enforce: above anything a run reaches, so every decision admits (as
// tokenring's runs are given limits no run reaches), while the script
// still does all of its work: it reads every member of the window to sum
// their tokens before it decides.
const (
	zsetRPM = 1 << 40
	zsetTPM = 1 << 50 // a Lua number (a double) is exact to 2^53
)

// slidingLog is the usual exact sorted-set sliding log, for requests AND
// tokens in one window as tokenring decides them: each member is
// "ID:TOKENS", scored by its time in µs. It removes the entries older than
// the window, then (the one change from the textbook script) trims the set
// to its newest ARGV[7]-1 members, so that a key holds exactly -entries
// members after the call whatever the rate; it reads the members left
// (ZRANGE, O(N) in the members of the window) and sums their tokens, and
// admits if count < rpm and sum + tokens <= tpm: ZADD of the new member,
// PEXPIRE of the key by the window.
//
// KEYS[1]: the key; ARGV: now (µs), window (µs), rpm, tpm, an ID unique to
// this call (without ':'), tokens, entries. It returns 1 for an admission,
// 0 for a refusal.
var slidingLog = redis.NewScript(`
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local rpm, tpm, tokens, entries = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - window)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -entries)
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local sum = 0
for i = 1, #members do
  sum = sum + tonumber(string.match(members[i], ':(%d+)$'))
end
if #members < rpm and sum + tokens <= tpm then
  redis.call('ZADD', KEYS[1], now, ARGV[5] .. ':' .. ARGV[6])
  redis.call('PEXPIRE', KEYS[1], math.floor(window / 1000))
  return 1
end
return 0`)

// zsetCall is one decision of the sliding log.
type zsetCall struct {
	key      string
	now      time.Time
	window   time.Duration // the run's: zsetWindow
	id       string        // unique to the call, without ':'
	tokens   int64         // what the call counts against tpm
	rpm, tpm int64
	entries  int // the most members the key holds after the call
}

// zsetDecide runs the sliding log for call by EVALSHA (loaded first by
// newRedisSystem): true for an admission.
func zsetDecide(ctx context.Context, rdb *redis.Client, call zsetCall) (bool, error) {
	ok, err := slidingLog.EvalSha(ctx, rdb, []string{call.key}, call.now.UnixMicro(), call.window.Microseconds(),
		call.rpm, call.tpm, call.id, call.tokens, call.entries).Int()
	return ok == 1, err
}

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

// prefill replaces each tenant's sorted set by -entries members
// "p-J:TOKENS", each carrying the tokens of one call of the run, scored in
// the microseconds before now.
func (s *redisSystem) prefill(ctx context.Context, now time.Time) error {
	base := now.UnixMicro() - int64(s.c.entries)
	tokens := ":" + strconv.FormatInt(s.tokens(), 10)
	for ti := range s.c.tenants {
		key := zsetKey(tenantName(s.c, ti))
		pipe := s.rdb.Pipeline()
		pipe.Del(ctx, key)
		for j := 0; j < s.c.entries; j += prefillChunk {
			members := make([]redis.Z, 0, min(prefillChunk, s.c.entries-j))
			for k := j; k < min(j+prefillChunk, s.c.entries); k++ {
				members = append(members, redis.Z{Score: float64(base + int64(k)), Member: "p-" + strconv.Itoa(k) + tokens})
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

// tokens is what one call counts against the sliding log's tpm: its prompt
// and its completion bound, as tokenring reserves them.
func (s *redisSystem) tokens() int64 { return int64(s.c.promptTokens + s.c.maxTokens) }

// decider: redis-incr sends INCR (always an admission: the floor any
// Redis limiter pays), redis-zset the sliding-log script by EVALSHA, for
// the run's prompt and completion tokens. A Redis error is a transport
// error.
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
		ok, err := zsetDecide(ctx, s.rdb, zsetCall{key: zsetKey(tenant), now: time.Now(), window: zsetWindow, id: prefix + strconv.Itoa(i),
			tokens: s.tokens(), rpm: zsetRPM, tpm: zsetTPM, entries: s.c.entries})
		switch {
		case err != nil:
			return outcome{err: err}
		case ok:
			return outcome{code: http.StatusOK, allowed: true}
		}
		return outcome{code: http.StatusTooManyRequests}
	}
}
