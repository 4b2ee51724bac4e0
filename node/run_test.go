package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// keysOwnedBy returns n keys whose owner is node i, with prefix.
func (c *cluster) keysOwnedBy(t testing.TB, i, n int, prefix string) []string {
	t.Helper()
	var keys []string
	for k := 0; len(keys) < n && k < 100000; k++ {
		key := fmt.Sprintf("%s%d", prefix, k)
		if m, _ := c.ring.Owner(key); m.Name == c.nodes[i].Name() {
			keys = append(keys, key)
		}
	}
	if len(keys) < n {
		t.Fatalf("found %d keys owned by %s, want %d", len(keys), c.nodes[i].Name(), n)
	}
	return keys
}

// fewestForwarded is the fewest calls node nd forwarded during any of five
// tries of do, each once nd had forwarded nothing for 100 ms: the
// cluster's own traffic (custody's handovers and pull rounds after
// SetRing) may fall into a try.
func fewestForwarded(t *testing.T, nd *Node, do func()) int64 {
	t.Helper()
	fewest := int64(-1)
	for range 5 {
		last, _ := nd.Forwarded()
		for quiet := 0; quiet < 2; {
			time.Sleep(50 * time.Millisecond)
			now, _ := nd.Forwarded()
			if now == last {
				quiet++
			} else {
				quiet, last = 0, now
			}
		}
		do()
		after, _ := nd.Forwarded()
		if n := after - last; fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return fewest
}

// A run whose keys one other member owns goes there in one call; its
// acquires are decided in order, the later ones reserving what the first
// reserved, and it stops at the first refusal: the keys after it are not
// charged.
func TestRunGoesWholeToItsOwner(t *testing.T) {
	limits := func(key string) limiter.Limits {
		l := limiter.Limits{Requests: 100, Tokens: 1 << 30}
		if key[0] == 'g' {
			l.Requests = 1
		}
		return l
	}
	c := newCluster(t, 3, limits, BatchConfig{Max: 1}, noReplication)
	tenants := c.keysOwnedBy(t, 1, 1, "t:")
	groups := c.keysOwnedBy(t, 1, 1, "g:")
	pools := c.keysOwnedBy(t, 1, 1, "p:")
	keys := []string{tenants[0], groups[0], pools[0]}
	run := func() []Answer {
		t.Helper()
		calls := make([]Call, len(keys))
		for i, k := range keys {
			calls[i] = Call{Op: OpAcquire, Key: k, Req: limiter.Request{PromptTokens: 10, MaxTokens: 20}}
		}
		a, err := c.nodes[0].Do(context.Background(), RunCall(calls))
		if err != nil {
			t.Fatal(err)
		}
		answers, failed, err := RunAnswers(a)
		if err != nil || failed != "" {
			t.Fatalf("run answers: %v, failed %q", err, failed)
		}
		return answers
	}
	statuses := make([]Call, len(keys))
	for i, k := range keys {
		statuses[i] = Call{Op: OpStatus, Key: k}
	}
	if n := fewestForwarded(t, c.nodes[0], func() {
		if _, err := c.nodes[0].Do(context.Background(), RunCall(statuses)); err != nil {
			t.Error(err)
		}
	}); n != 1 {
		t.Fatalf("a run of three keys of one other member took %d forwarded calls, want 1", n)
	}
	first := run()
	if len(first) != 3 {
		t.Fatalf("%d answers, want 3", len(first))
	}
	for i, a := range first {
		if !a.Decision.Allowed || a.Owner != "n2" || a.Decision.Reserved != 30 {
			t.Fatalf("answer %d: %+v, want admitted by n2 reserving 30", i, a)
		}
	}
	second := run() // the group is full: the pool is not asked
	if len(second) != 2 || !second[0].Decision.Allowed || second[1].Decision.Allowed || second[1].Decision.Reason != limiter.Requests {
		t.Fatalf("second run: %+v, want the tenant admitted and the group refused for requests, then nothing", second)
	}
	status := func(key string) int64 {
		a, err := c.nodes[1].Do(context.Background(), Call{Op: OpStatus, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return a.Decision.Status.Requests.Limit - a.Decision.Status.Requests.Remaining
	}
	if got := [3]int64{status(keys[0]), status(keys[1]), status(keys[2])}; got != [3]int64{2, 1, 1} {
		t.Fatalf("requests counted %v, want [2 1 1]: the refused run's tenant charged (the router cancels it), its pool not", got)
	}
}

// A run whose keys different members own is executed where it arrives,
// each call forwarded to its own key's owner.
func TestRunSplitsAcrossOwners(t *testing.T) {
	limits := func(string) limiter.Limits { return limiter.Limits{Requests: 100} }
	c := newCluster(t, 3, limits, BatchConfig{Max: 1}, noReplication)
	keys := []string{c.keysOwnedBy(t, 1, 1, "t:")[0], c.keysOwnedBy(t, 2, 1, "g:")[0], c.keysOwnedBy(t, 0, 1, "p:")[0]}
	calls := make([]Call, len(keys))
	for i, k := range keys {
		calls[i] = Call{Op: OpAcquire, Key: k}
	}
	// n1's own key first: while the cluster is new, a key not yet in
	// n1's table is looked up at its backup (a forwarded call).
	if _, err := c.nodes[0].Do(context.Background(), calls[2]); err != nil {
		t.Fatal(err)
	}
	a, err := c.nodes[0].Do(context.Background(), RunCall(calls))
	if err != nil {
		t.Fatal(err)
	}
	answers, failed, err := RunAnswers(a)
	if err != nil || failed != "" || len(answers) != 3 {
		t.Fatalf("answers %+v, failed %q, %v", answers, failed, err)
	}
	for i, want := range []string{"n2", "n3", "n1"} {
		if answers[i].Owner != want || !answers[i].Decision.Allowed {
			t.Fatalf("answer %d: %+v, want admitted by %s", i, answers[i], want)
		}
	}
	for i := range calls {
		calls[i].Op = OpStatus
	}
	if n := fewestForwarded(t, c.nodes[0], func() {
		if _, err := c.nodes[0].Do(context.Background(), RunCall(calls)); err != nil {
			t.Error(err)
		}
	}); n != 2 {
		t.Fatalf("%d forwarded calls, want 2 (one per remote key)", n)
	}
}
