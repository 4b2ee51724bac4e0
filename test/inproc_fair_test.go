package test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
	"github.com/tokenring/tokenring/router"
)

// lightTenant sends one acquire of a light tenant (weight 1, far below its
// share) every 100 ms through each member in turn until end, each waiting
// up to 3 s (wait_ms). It returns a function, to call once it has ended,
// giving how many it asked from measureFrom on, how many of those were
// admitted, and the longest an admitted one waited.
func lightTenant(t *testing.T, c *InProc, client *http.Client, measureFrom, end time.Time) func() (asked, admitted int, longest time.Duration) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var a, n int
	var most time.Duration
	wg.Go(func() {
		for k := 0; time.Now().Before(end); k++ {
			sent := time.Now()
			code, out, err := Post(context.Background(), client, c.URL(k%3)+"/v1/acquire",
				`{"tenant":"light","model":"gpt-4o","prompt_tokens":1,"max_tokens":1,"wait_ms":3000}`)
			if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
				t.Errorf("acquire light: %d %v %v", code, out, err)
				return
			}
			if !sent.Before(measureFrom) {
				mu.Lock()
				a++
				if out["allowed"] == true {
					n++
					most = max(most, time.Since(sent))
				}
				mu.Unlock()
			}
			time.Sleep(time.Until(sent.Add(100 * time.Millisecond)))
		}
	})
	return func() (int, int, time.Duration) {
		wg.Wait()
		return a, n, most
	}
}

// A pool shared by three tenants of weights 1, 2 and 3, on three members
// with the shipped defaults (hot-key slices on: the pool is the hottest
// key), each tenant asking far more than the pool admits, through every
// member: once the shares have converged (two windows), each tenant's
// admissions in a whole window are within 5% of 1/6, 2/6 and 3/6 of
// theirs, the pool never admits more than its limit in a window, and a
// fourth, light tenant, waiting up to 3 s, gets every request it asks (no
// waiter starves).
func TestInProcFairPool(t *testing.T) {
	noLeaks(t)
	const window, poolLimit = 4 * time.Second, 600
	limits := func(key string) limiter.Limits {
		l := limiter.Limits{Window: window}
		if key == router.PoolKey("gpt") {
			l.Requests, l.Fair = poolLimit, true
		}
		return l
	}
	weights := map[string]int64{"w1": 1, "w2": 2, "w3": 3}
	c := NewInProc(t, 3, limits, WithPools(func(string) (string, bool) { return "gpt", true }),
		WithWeights(func(tenant string) int64 { return max(weights[tenant], 1) }), WithGossip(steadyGossip))
	client := inProcClient(t)
	start := time.Now()
	measureFrom, end := start.Add(2*window), start.Add(3*window)
	var mu sync.Mutex
	got := make(map[string]int)
	reasons := make(map[string]int)
	var wg sync.WaitGroup
	for tenant := range weights {
		for w := range 6 {
			wg.Go(func() {
				url := c.URL(w % 3)
				for time.Now().Before(end) {
					code, a, err := Post(context.Background(), client, url+"/v1/acquire",
						fmt.Sprintf(`{"tenant":%q,"model":"gpt-4o","prompt_tokens":1,"max_tokens":1}`, tenant))
					at := time.Now()
					if err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
						t.Errorf("acquire %s: %d %v %v", tenant, code, a, err)
						return
					}
					mu.Lock()
					if a["allowed"] == true && !at.Before(measureFrom) && at.Before(end) {
						got[tenant]++
					} else if a["allowed"] != true {
						reasons[fmt.Sprint(a["reason"])]++
					}
					mu.Unlock()
					if code == http.StatusTooManyRequests {
						time.Sleep(5 * time.Millisecond)
					}
				}
			})
		}
	}
	light := lightTenant(t, c, client, measureFrom, end)
	wg.Wait()
	asked, admitted, longest := light()
	total := got["w1"] + got["w2"] + got["w3"]
	t.Logf("admitted in the last window: %v (%d of %d), the light tenant %d of %d asked (longest wait %v); refusals %v",
		got, total, poolLimit, admitted, asked, longest, reasons)
	if all := total + admitted; all > poolLimit*102/100 || all < poolLimit*90/100 {
		t.Errorf("the pool admitted %d in a window of %d", all, poolLimit)
	}
	if asked < 10 || admitted != asked {
		t.Errorf("the light tenant got %d of the %d it asked in the last window", admitted, asked)
	}
	for tenant, w := range weights {
		if want := float64(total) * float64(w) / 6; float64(got[tenant]) < want*0.95 || float64(got[tenant]) > want*1.05 {
			t.Errorf("%s (weight %d): %d admitted, want %.0f ±5%%", tenant, w, got[tenant], want)
		}
	}
	if reasons["fair_share"] == 0 {
		t.Errorf("no refusal for a fair share: %v", reasons)
	}
}
