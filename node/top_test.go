package node

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// Nearest lists the keys of a prefix nearest any of their limits first (by
// the largest fraction used), ties by key, at most k, leaving out keys with
// nothing used or no limit, and reports their exact status.
func TestNearest(t *testing.T) {
	limits := func(key string) limiter.Limits {
		switch key {
		case "t:unlimited":
			return limiter.Limits{}
		case "t:slots":
			return limiter.Limits{Requests: 1000, Tokens: 1 << 30, Concurrency: 4}
		}
		return limiter.Limits{Requests: 10, Tokens: 10_000, Concurrency: 100}
	}
	now := time.Unix(1_700_000_000, 0)
	n, err := New(Config{Name: "n1", LimitsFor: limits, Now: func() time.Time { return now }, ReplicationInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	admit := func(key string, times int, tokens int64) {
		for range times {
			a, err := n.Do(context.Background(), Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: tokens, MaxTokens: 1}})
			if err != nil || !a.Decision.Allowed {
				t.Fatalf("acquire %s: %+v %v", key, a, err)
			}
		}
	}
	admit("t:nine", 9, 99)      // requests 0.9
	admit("t:five", 5, 99)      // requests 0.5
	admit("t:tokens", 1, 7_999) // tokens 0.8
	admit("t:slots", 3, 1)      // slots 0.75
	admit("t:b-tie", 5, 99)     // 0.5 too: before t:five by key
	admit("t:unlimited", 3, 1)  // no limit: never near one
	admit("p:pool", 10, 1)      // another prefix
	n.table.Do("t:idle", now, func(*limiter.Budget) {})

	keys := func(ks []KeyStatus) []string {
		var out []string
		for _, k := range ks {
			out = append(out, k.Key)
		}
		return out
	}
	all := n.Nearest("t:", 100)
	if want := []string{"t:nine", "t:tokens", "t:slots", "t:b-tie", "t:five"}; !reflect.DeepEqual(keys(all), want) {
		t.Fatalf("Nearest(t:, 100) = %v, want %v", keys(all), want)
	}
	if got := keys(n.Nearest("t:", 2)); !reflect.DeepEqual(got, []string{"t:nine", "t:tokens"}) {
		t.Fatalf("Nearest(t:, 2) = %v", got)
	}
	if got := n.Nearest("t:", 0); got != nil {
		t.Fatalf("Nearest(t:, 0) = %v", got)
	}
	if got := keys(n.Nearest("p:", 5)); !reflect.DeepEqual(got, []string{"p:pool"}) {
		t.Fatalf("Nearest(p:, 5) = %v", got)
	}
	nine := all[0]
	if nine.Used != 0.9 || nine.Status.Requests.Remaining != 1 || nine.Status.Tokens.Remaining != 10_000-9*100 || nine.Status.Concurrency.Remaining != 91 {
		t.Fatalf("t:nine: %+v", nine)
	}
	if s := all[2]; s.Used != 0.75 || s.Status.Concurrency.Remaining != 1 {
		t.Fatalf("t:slots: %+v", s)
	}
}
