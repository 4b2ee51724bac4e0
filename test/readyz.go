package test

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// readyz asks every target's /readyz at once, each through client(target)
// within timeout, and reports which answered 200.
func readyz(ctx context.Context, targets []*Proc, client func(*Proc) *http.Client, timeout time.Duration) []bool {
	ok := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, p := range targets {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/readyz", nil)
			if err != nil {
				return
			}
			resp, err := client(p).Do(req)
			if err != nil {
				return
			}
			resp.Body.Close()
			ok[i] = resp.StatusCode == http.StatusOK
		})
	}
	wg.Wait()
	return ok
}
