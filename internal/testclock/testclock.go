// Package testclock is a settable clock for tests, for the packages that
// take their time as a func() time.Time: it moves only when told.
package testclock

import (
	"sync"
	"time"
)

// Clock is a settable clock. Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock at 2023-11-14 22:13:20 UTC (Unix 1,700,000,000).
func New() *Clock { return &Clock{t: time.Unix(1_700_000_000, 0)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
