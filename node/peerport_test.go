package node

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/node/peer"
	"github.com/tokenring/tokenring/ring"
)

// The node's side of the peer protocol: its settings, and a partition
// larger than a frame. The protocol itself is tested in node/peer.

var (
	secretOld = bytes.Repeat([]byte("o"), peer.MinSecretLen)
	secretNew = bytes.Repeat([]byte("n"), peer.MinSecretLen)
)

func tenRequests(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }

// withTestSecrets gives cfg a cluster secret when the environment has
// TOKENRING_TEST_PEER_SECRETS set, so the cluster tests (newCluster,
// newNodes) run on the authenticated protocol too:
//
//	TOKENRING_TEST_PEER_SECRETS=1 go test -race ./node/
func withTestSecrets(cfg *Config) {
	if os.Getenv("TOKENRING_TEST_PEER_SECRETS") != "" {
		cfg.Secrets = [][]byte{secretOld}
	}
}

// lonelyNode starts a node with no ring: every call it is sent is decided
// there, as by an owner.
func lonelyNode(t *testing.T, opts ...func(*Config)) *Node {
	t.Helper()
	cfg := Config{Name: "owner", LimitsFor: tenRequests, ReplicationInterval: -1}
	for _, o := range opts {
		o(&cfg)
	}
	nd, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	return nd
}

func withSecrets(secrets ...[]byte) func(*Config) {
	return func(c *Config) { c.Secrets = secrets }
}

// remaining admits at nd until it refuses and returns how many it admitted.
func remaining(t *testing.T, nd *Node, key string) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		a, err := nd.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !a.Decision.Allowed {
			return n
		}
	}
	t.Fatal("never refused")
	return 0
}

// A partition of 20,000 keys (a state well over the 1 MiB frame cap) hands
// off with the default cap: in fragments, every key arrives with its count.
func TestPeerLargePartitionHandsOffUnderFrameCap(t *testing.T) {
	const keys = 20000
	one := func(c *Config) { c.Ring.PartitionCount = 1; c.ReplicationInterval = -1 }
	nodes := newNodes(t, 2, tenRequests, one, withSecrets(secretNew))
	both := ringOfConfig(t, nodes[0].cfg.Ring, nodes...)
	src, dst := nodes[0], nodes[1] // the one partition moves from src to dst
	if m, _ := both.Owner("t:big-0"); m.Name == src.Name() {
		src, dst = dst, src
	}
	src.SetRing(ringOfConfig(t, src.cfg.Ring, src))
	for i := range keys {
		key := "t:big-" + strconv.Itoa(i)
		if a, err := src.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}); err != nil || !a.Decision.Allowed {
			t.Fatalf("%s: %+v %v", key, a, err)
		}
	}
	var state int
	src.table.Range(func(key string) bool {
		src.table.Peek(key, func(b *limiter.Budget) {
			snap, _ := b.AppendBinary(nil)
			state += len(key) + len(snap)
		})
		return true
	})
	if state <= peer.DefaultMaxFrame {
		t.Fatalf("the partition's state is %d bytes, not over the %d-byte cap: the test proves nothing", state, peer.DefaultMaxFrame)
	}
	dst.SetRing(both)
	src.SetRing(both)
	eventually(t, 20*time.Second, "the "+strconv.Itoa(keys)+" keys at the new owner", func() bool { return dst.Keys() == keys })
	if src.Keys() != 0 || dst.Keys() != keys {
		t.Fatalf("keys after the handoff: from %d, to %d, want 0 and %d", src.Keys(), dst.Keys(), keys)
	}
	for _, i := range []int{0, keys / 2, keys - 1} {
		if got := remaining(t, dst, "t:big-"+strconv.Itoa(i)); got != 9 {
			t.Fatalf("key %d: %d of 10 left at the new owner, want 9", i, got)
		}
	}
}

func ringOfConfig(t testing.TB, cfg ring.Config, nodes ...*Node) *ring.Ring {
	t.Helper()
	var ms []ring.Member
	for _, nd := range nodes {
		ms = append(ms, member(nd))
	}
	r, err := ring.New(cfg, ms)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// New refuses a secret shorter than peer.MinSecretLen and a frame cap out of
// range, naming what is wrong.
func TestNewRejectsWeakPeerSettings(t *testing.T) {
	for _, tc := range []struct {
		cfg  func(*Config)
		want string
	}{
		{withSecrets(secretNew, secretOld[:peer.MinSecretLen-1]), "cluster secret 1 is 31 bytes, want at least 32"},
		{func(c *Config) { c.MaxFrame = peer.MinMaxFrame - 1 }, "MaxFrame 4095"},
		{func(c *Config) { c.MaxFrame = peer.MaxMaxFrame + 1 }, "MaxFrame 16777217"},
	} {
		cfg := Config{Name: "n", LimitsFor: tenRequests}
		tc.cfg(&cfg)
		nd, err := New(cfg)
		if err == nil {
			nd.Close()
			t.Fatalf("New accepted a config that wants %q", tc.want)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("New: %v, want %q", err, tc.want)
		}
	}
}
