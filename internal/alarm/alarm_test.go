package alarm

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fired returns an alarm function and a channel that gets the time it ran.
func fired() (func(), chan time.Time) {
	ch := make(chan time.Time, 1)
	return func() { ch <- time.Now() }, ch
}

// wait returns when ch gets a value, or fails t after a generous bound.
func wait(t *testing.T, ch chan time.Time) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(5 * time.Second):
		t.Fatal("the alarm never fired")
		return time.Time{}
	}
}

// never fails t if ch gets a value within a few ticks.
func never(t *testing.T, ch chan time.Time, tick time.Duration) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("a stopped alarm fired")
	case <-time.After(5 * tick):
	}
}

// TestAfterFiresNoEarlierThanItsDeadline: the function runs once, and not
// before d has passed.
func TestAfterFiresNoEarlierThanItsDeadline(t *testing.T) {
	c := New(Config{Tick: 2 * time.Millisecond})
	defer c.Close()
	fn, ch := fired()
	start := time.Now()
	a := c.After(15*time.Millisecond, fn)
	if at := wait(t, ch); at.Sub(start) < 15*time.Millisecond {
		t.Fatalf("fired after %v, before its 15ms", at.Sub(start))
	}
	if a.Stop() || a.Reset(time.Millisecond) {
		t.Fatal("Stop or Reset reported success on an alarm that had fired")
	}
}

// TestStopKeepsItFromFiring: a stopped alarm never fires, and only the
// first Stop reports it.
func TestStopKeepsItFromFiring(t *testing.T) {
	c := New(Config{Tick: 2 * time.Millisecond})
	defer c.Close()
	fn, ch := fired()
	a := c.After(4*time.Millisecond, fn)
	if !a.Stop() {
		t.Fatal("Stop of a pending alarm reported false")
	}
	never(t, ch, 4*time.Millisecond)
	if a.Stop() {
		t.Fatal("the second Stop reported true")
	}
	c.mu.Lock()
	live := c.live
	c.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d alarms still filed", live)
	}
}

// TestResetMovesTheDeadline: later (an atomic store: the alarm is filed
// again when its old slot comes due) and earlier (filed again at once).
func TestResetMovesTheDeadline(t *testing.T) {
	c := New(Config{Tick: 2 * time.Millisecond})
	defer c.Close()
	fn, ch := fired()
	a := c.After(4*time.Millisecond, fn)
	start := time.Now()
	if !a.Reset(30 * time.Millisecond) {
		t.Fatal("Reset of a pending alarm reported false")
	}
	if at := wait(t, ch); at.Sub(start) < 30*time.Millisecond {
		t.Fatalf("fired %v after a Reset to 30ms", at.Sub(start))
	}
	fn, ch = fired()
	b := c.After(time.Hour, fn)
	b.Reset(time.Millisecond)
	wait(t, ch)
}

// TestFiresOnceWhateverRaces: alarms stopped and moved from other
// goroutines while they come due: each fires exactly when no Stop reported
// true, and never twice.
func TestFiresOnceWhateverRaces(t *testing.T) {
	c := New(Config{Tick: time.Millisecond})
	const n = 400
	var runs [n]atomic.Int32
	stopped := make([]bool, n)
	alarms := make([]*Alarm, n)
	for i := range alarms {
		alarms[i] = c.After(time.Duration(i%5)*time.Millisecond, func() { runs[i].Add(1) })
	}
	var wg sync.WaitGroup
	for i := range alarms {
		wg.Go(func() {
			if i%3 == 0 {
				alarms[i].Reset(time.Duration(i%7) * time.Millisecond)
			}
			stopped[i] = i%2 == 0 && alarms[i].Stop()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for i := range alarms {
		for !stopped[i] && runs[i].Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	c.Close()
	time.Sleep(5 * time.Millisecond) // a fired function's goroutine may still be starting
	for i := range alarms {
		want := int32(1)
		if stopped[i] {
			want = 0
		}
		if got := runs[i].Load(); got != want {
			t.Fatalf("alarm %d (stopped: %v) ran %d times, want %d", i, stopped[i], got, want)
		}
	}
}

// TestTicksOnlyWhileNeeded: the goroutine quits Linger after the last
// alarm, and the next alarm starts it again.
func TestTicksOnlyWhileNeeded(t *testing.T) {
	c := New(Config{Tick: time.Millisecond, Linger: 5 * time.Millisecond})
	defer c.Close()
	for round := range 2 {
		fn, ch := fired()
		c.After(time.Millisecond, fn)
		wait(t, ch)
		deadline := time.Now().Add(5 * time.Second)
		for {
			c.mu.Lock()
			running := c.running
			c.mu.Unlock()
			if !running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: still ticking with no alarm", round)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestClosedClockFiresNothing: alarms pending at Close, and those set
// after it, never fire.
func TestClosedClockFiresNothing(t *testing.T) {
	c := New(Config{Tick: time.Millisecond})
	fn, ch := fired()
	c.After(3*time.Millisecond, fn)
	c.Close()
	never(t, ch, time.Millisecond)
	fn, ch = fired()
	if a := c.After(0, fn); a.Reset(time.Millisecond) {
		t.Fatal("an alarm of a closed clock was reset")
	}
	never(t, ch, time.Millisecond)
	c.Close() // twice is fine
}
