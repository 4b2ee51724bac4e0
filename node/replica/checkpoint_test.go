package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokenring/tokenring/internal/redistest"
)

// startRedis runs a real redis-server for the test and returns a client
// of it (redistest.Start: skipped locally without one, failed in CI).
func startRedis(t testing.TB) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { client.Close() })
	return client
}

func TestRedisCheckpointRoundTrip(t *testing.T) {
	cp := &RedisCheckpoint{Client: startRedis(t), Prefix: "tr:"}
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 123)
	if err := cp.Save(ctx, at, map[string][]byte{"t:a": []byte("state-a"), "t:b": {}}); err != nil {
		t.Fatal(err)
	}
	state, got, ok, err := cp.Load(ctx, "t:a")
	if err != nil || !ok || string(state) != "state-a" || !got.Equal(at) {
		t.Fatalf("load: %q %v %v %v", state, got, ok, err)
	}
	if _, _, ok, err := cp.Load(ctx, "t:none"); ok || err != nil {
		t.Fatalf("missing key: ok %v err %v", ok, err)
	}
}

// Scan returns every snapshot under the prefix, in batches, and nothing
// under another prefix (glob characters in a prefix are literal).
func TestRedisCheckpointScan(t *testing.T) {
	client := startRedis(t)
	ctx := context.Background()
	at := time.Unix(1_700_000_000, 42)
	ours := &RedisCheckpoint{Client: client, Prefix: "a*:"}
	other := &RedisCheckpoint{Client: client, Prefix: "ab:"}
	want := map[string]string{}
	states := map[string][]byte{}
	for i := range 2500 { // several SCAN steps
		k := fmt.Sprintf("t:%d", i)
		want[k] = fmt.Sprint("state-", i)
		states[k] = []byte(want[k])
	}
	if err := ours.Save(ctx, at, states); err != nil {
		t.Fatal(err)
	}
	if err := other.Save(ctx, at, map[string][]byte{"t:x": []byte("not ours")}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	err := ours.Scan(ctx, func(key string, state []byte, when time.Time) error {
		if !when.Equal(at) {
			t.Errorf("%s: taken at %v, want %v", key, when, at)
		}
		got[key] = string(state)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("scan returned %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %q, want %q", k, got[k], v)
		}
	}
}
