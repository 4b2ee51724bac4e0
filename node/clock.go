package node

import "time"

// Clock is the time every timer and deadline of a node's decision and
// custody paths reads: the limiter's windows (Now), the mandate and stall
// watch (Mono), the waits for a partition or a first membership
// (NewTimer). The production clock is the host's (Config.Now for Now,
// the runtime's monotonic clock for Mono); a simulation supplies its own
// and steps the node's periodic work itself (Config.Stepped).
type Clock interface {
	// Now is the wall clock: what windows and lease deadlines count in.
	Now() time.Time
	// Mono is a monotonic reading, in nanoseconds since an origin fixed
	// for the clock's life: it never steps back, whatever Now does.
	Mono() int64
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
}

// Timer is one deadline of a Clock.
type Timer interface {
	// C receives the time once the deadline passed.
	C() <-chan time.Time
	// Stop cancels the timer; it reports whether that stopped it firing.
	Stop() bool
}

// hostClock is the production Clock: now for Now (time.Now unless a test
// set Config.Now), the runtime's monotonic clock for Mono and the timers.
type hostClock struct {
	now    func() time.Time
	origin time.Time // carries a monotonic reading
}

func newHostClock(now func() time.Time) hostClock {
	return hostClock{now: now, origin: time.Now()}
}

func (c hostClock) Now() time.Time { return c.now() }

func (c hostClock) Mono() int64 { return int64(time.Since(c.origin)) }

func (c hostClock) NewTimer(d time.Duration) Timer { return hostTimer{time.NewTimer(d)} }

type hostTimer struct{ t *time.Timer }

func (t hostTimer) C() <-chan time.Time { return t.t.C }
func (t hostTimer) Stop() bool          { return t.t.Stop() }
