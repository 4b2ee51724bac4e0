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

// A pool shared by three tenants of weights 1, 2 and 3, on three members
// with the shipped defaults (hot-key slices on: the pool is the hottest
// key), each tenant asking far more than the pool admits, through every
// member: once the shares have converged (two windows), each tenant's
// admissions in a whole window are within 5% of 1/6, 2/6 and 3/6 of the
// pool's, and the pool never admits more than its limit in a window.
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
		WithWeights(func(tenant string) int64 { return weights[tenant] }), WithGossip(steadyGossip))
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
	wg.Wait()
	total := got["w1"] + got["w2"] + got["w3"]
	t.Logf("admitted in the last window: %v (%d of %d); refusals %v", got, total, poolLimit, reasons)
	if total > poolLimit*102/100 || total < poolLimit*90/100 {
		t.Errorf("the pool admitted %d in a window of %d", total, poolLimit)
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
