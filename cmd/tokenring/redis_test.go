package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tokenring/tokenring/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startRedis runs a real redis-server for the test and returns its
// address (redistest.Start: skipped locally without one, failed in CI).
func startRedis(t *testing.T) string { return redistest.Start(t) }

// -system redis-incr: each of -n 200 decisions is one INCR, admitted; the
// counters of the tenants add up to 200.
func TestLoadRedisIncr(t *testing.T) {
	addr := startRedis(t)
	res, err := runLoadCLI(t, "-system", "redis-incr", "-redis", addr, "-n", "200", "-c", "8", "-tenants", "20", "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 200, Allowed: 200, Codes: map[string]int{"200": 200}, Route: "rr", Workers: 8}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	total := 0
	for i := range 20 {
		n, err := rdb.Get(ctx, incrKey(fmt.Sprintf("load-%d", i))).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		total += n
	}
	if total != 200 {
		t.Fatalf("the tenants' counters add up to %d, want 200", total)
	}
}

// -system redis-zset -entries 10: -n 200 decisions, all admitted; after the
// run every tenant's sorted set holds exactly 10 members (prefilled, then
// trimmed to the newest 10 at each decision), each carrying the 200 tokens
// of a call (-prompt-tokens 100 + -max-tokens 100), and the run's 200
// members are the newest of their keys: a key that got k of them keeps
// min(k, 10).
func TestLoadRedisZset(t *testing.T) {
	addr := startRedis(t)
	const tenants, entries = 20, 10
	res, err := runLoadCLI(t, "-system", "redis-zset", "-redis", addr, "-entries", fmt.Sprint(entries),
		"-n", "200", "-c", "1", "-tenants", fmt.Sprint(tenants), "-d", "1m")
	if err != nil {
		t.Fatal(err)
	}
	want := loadResult{Requests: 200, Allowed: 200, Codes: map[string]int{"200": 200}, Route: "rr", Workers: 1}
	if got := countsOf(res); !equalCounts(got, want) {
		t.Fatalf("reported %+v\nwant       %+v", got, want)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	// One worker with -seed 1 picks tenants as this does.
	perTenant := make([]int, tenants)
	c := loadConfig{tenants: tenants, seed: 1}
	w := &worker{c: c, rng: newWorkerRand(c, 0)}
	for range 200 {
		perTenant[w.rng.IntN(tenants)]++
	}
	for i := range tenants {
		key := zsetKey(fmt.Sprintf("load-%d", i))
		members, err := rdb.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		for _, m := range members {
			if !strings.HasSuffix(m, ":200") {
				t.Errorf("%s: member %q does not carry the call's 200 tokens", key, m)
			}
			if !strings.HasPrefix(m, "p-") {
				ran++
			}
		}
		if len(members) != entries || ran != min(perTenant[i], entries) {
			t.Errorf("%s holds %d members, %d of them the run's; want %d, %d (it got %d decisions)",
				key, len(members), ran, entries, min(perTenant[i], entries), perTenant[i])
		}
	}
}

// The sliding log decides requests AND tokens exactly: within rpm 3 and
// tpm 500, calls of 200 tokens are admitted while the window's sum stays
// within 500 (2 of them), a call of 100 then fills it to exactly 500, and
// the next is refused by rpm (3 members) whatever its tokens; entries older
// than the window are removed and count for nothing; a refusal adds no
// member. Each admission adds one member "ID:TOKENS".
func TestSlidingLogDecidesRequestsAndTokens(t *testing.T) {
	addr := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := slidingLog.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration, id string, tokens int64) bool {
		t.Helper()
		ok, err := zsetDecide(ctx, rdb, zsetCall{key: "zset:exact", now: t0.Add(d), window: time.Minute,
			id: id, tokens: tokens, rpm: 3, tpm: 500, entries: 100})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	steps := []struct {
		at     time.Duration
		id     string
		tokens int64
		want   bool
	}{
		{0, "a", 200, true},                            // 200
		{time.Second, "b", 200, true},                  // 400
		{2 * time.Second, "c", 200, false},             // 600 > tpm 500
		{3 * time.Second, "d", 100, true},              // exactly 500
		{4 * time.Second, "e", 0, false},               // 3 members: rpm
		{time.Minute + time.Second, "f", 300, true},    // a and b expired: d's 100 + 300
		{time.Minute + 2*time.Second, "g", 101, false}, // 400 + 101 > 500
	}
	for _, st := range steps {
		if got := at(st.at, st.id, st.tokens); got != st.want {
			t.Fatalf("call %s (%d tokens) at +%v: admitted %v, want %v", st.id, st.tokens, st.at, got, st.want)
		}
	}
	members, err := rdb.ZRange(ctx, "zset:exact", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"d:100", "f:300"}; !slices.Equal(members, want) {
		t.Fatalf("the key holds %q, want %q", members, want)
	}
}

// Bad -system flags are usage errors, found before anything is sent.
func TestLoadSystemFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"unknown system", []string{"-system", "memcached"}},
		{"redis without -redis", []string{"-system", "redis-incr"}},
		{"zset without -redis", []string{"-system", "redis-zset"}},
		{"-redis for tokenring", []string{"-redis", "127.0.0.1:6379"}},
		{"zero entries", []string{"-system", "redis-zset", "-redis", "127.0.0.1:1", "-entries", "0"}},
		{"too many entries", []string{"-system", "redis-zset", "-redis", "127.0.0.1:1", "-entries", "2000000"}},
		{"prefill too large", []string{"-system", "redis-zset", "-redis", "127.0.0.1:1", "-entries", "100000", "-tenants", "1000"}},
		{"route for redis", []string{"-system", "redis-incr", "-redis", "127.0.0.1:1", "-route", "owner"}},
		{"batch for proxy", []string{"-system", "proxy", "-client", "batch"}},
		{"stream for tokenring", []string{"-stream"}},
		{"api key for redis", []string{"-system", "redis-incr", "-redis", "127.0.0.1:1", "-api-key", "sk-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"load", "-n", "10", "-d", "5s"}, tc.args...)
			err := run(context.Background(), args, &stdout, &stderr)
			if !errors.Is(err, errUsage) {
				t.Fatalf("tokenring %s: err = %v, want a usage error", strings.Join(args, " "), err)
			}
			if code := exitCode(err, &stderr); code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if stdout.Len() > 0 {
				t.Errorf("printed %q", stdout.String())
			}
		})
	}
	for _, ok := range [][]string{
		{"-system", "redis-zset", "-redis", "127.0.0.1:1", "-entries", "10000", "-tenants", "1000"},
		{"-system", "proxy", "-stream", "-api-key", "sk-1"},
	} {
		if _, err := parseLoad(ok, &bytes.Buffer{}); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}
