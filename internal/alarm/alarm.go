// Package alarm runs functions at deadlines without a runtime timer each.
// Imports nothing of ours.
//
// Go's runtime wakes a thread for a timer it adds when that timer is the
// earliest it holds (a netpoll break or a thread started: a futex on
// another CPU). A proxied call set four timers (three timeouts and its
// lease's renewal) and stopped them all, none ever firing: up to four such
// wake-ups on its critical path, and three of those timers alone were a
// sixth of the node's CPU for the call (BENCHMARKS.md, "What each piece of
// complexity buys": internal/alarm deadlines). A Clock instead files
// deadlines in slots of one Tick, which one goroutine, ticking only while a
// deadline is set (and Linger after), fires: setting, moving and stopping
// a deadline is a lock and a map operation, or an atomic store. The price
// is precision: a function runs after its deadline, by up to a Tick and
// its goroutine's start.
package alarm

import (
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultTick   = 10 * time.Millisecond
	DefaultLinger = time.Second
)

// Config configures a Clock.
type Config struct {
	// Tick is the slot width and how often due slots are fired.
	// Zero means DefaultTick.
	Tick time.Duration
	// Linger is how long the ticking goroutine stays after the last
	// deadline is gone, so that a stream of short calls does not start
	// it (a timer) for each. Zero means DefaultLinger.
	Linger time.Duration
}

// Clock fires the functions of its Alarms at their deadlines, on the wall
// clock (time.Now), which its ticks follow too. Its zero value is not
// usable: make one with New, and Close it.
type Clock struct {
	cfg Config

	mu      sync.Mutex
	slots   map[int64]map[*Alarm]struct{} // by slot: deadline (ns) ÷ Tick, rounded up
	next    int64                         // the first slot not yet fired: nothing is filed before it
	live    int                           // alarms in slots
	running bool                          // the ticking goroutine is on
	closed  bool
	stop    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// Alarm is one deadline of a Clock.
type Alarm struct {
	c  *Clock
	fn func()
	at atomic.Int64 // deadline, ns since the epoch; 0 once stopped or fired
	// slot is the slot the alarm is filed in (guarded by c.mu): at most
	// at's; a later at is filed again when slot comes due.
	slot int64
}

// New returns a Clock with cfg's defaults filled in.
func New(cfg Config) *Clock {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Linger <= 0 {
		cfg.Linger = DefaultLinger
	}
	return &Clock{cfg: cfg, slots: make(map[int64]map[*Alarm]struct{}), stop: make(chan struct{})}
}

// After returns an Alarm that runs fn on a goroutine of its own no earlier
// than d from now (and about a Tick after at most), unless it is stopped
// first. On a closed Clock it never runs.
func (c *Clock) After(d time.Duration, fn func()) *Alarm {
	a := &Alarm{c: c, fn: fn}
	now := time.Now().UnixNano()
	at := now + int64(d)
	a.at.Store(at)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		a.at.Store(0)
		return a
	}
	if !c.running {
		c.next = c.slotOf(now) // every slot before is empty: live was 0
		c.running = true
		c.wg.Add(1)
		go c.run()
	}
	c.file(a, at)
	return a
}

// Reset moves a's deadline to d from now, and reports whether it did: false
// once a has run or was stopped. A later deadline is an atomic store; an
// earlier one files a again.
func (a *Alarm) Reset(d time.Duration) bool {
	at := time.Now().Add(d).UnixNano()
	for {
		old := a.at.Load()
		if old == 0 {
			return false
		}
		if at >= old {
			if a.at.CompareAndSwap(old, at) {
				return true // its slot comes first: it is filed again then
			}
			continue
		}
		c := a.c
		c.mu.Lock()
		if !a.at.CompareAndSwap(old, at) {
			c.mu.Unlock()
			continue
		}
		c.unfile(a)
		c.file(a, at)
		c.mu.Unlock()
		return true
	}
}

// Stop keeps a from running, and reports whether it did: false once a has
// run (or begun to) or was stopped.
func (a *Alarm) Stop() bool {
	if a.at.Swap(0) == 0 {
		return false
	}
	c := a.c
	c.mu.Lock()
	c.unfile(a)
	c.mu.Unlock()
	return true
}

// Close stops the ticking goroutine and waits for it: no alarm fires after
// Close returns (a function fired before may still be running).
func (c *Clock) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// slotOf is the slot of deadline at: the first whose end is not before it.
func (c *Clock) slotOf(at int64) int64 {
	tick := int64(c.cfg.Tick)
	return (at + tick - 1) / tick
}

// file puts a in at's slot, or the next to fire if that one has. Callers
// hold c.mu.
func (c *Clock) file(a *Alarm, at int64) {
	a.slot = max(c.slotOf(at), c.next)
	s := c.slots[a.slot]
	if s == nil {
		s = make(map[*Alarm]struct{})
		c.slots[a.slot] = s
	}
	s[a] = struct{}{}
	c.live++
}

// unfile takes a out of its slot, if it is in one. Callers hold c.mu.
func (c *Clock) unfile(a *Alarm) {
	s := c.slots[a.slot]
	if _, ok := s[a]; !ok {
		return
	}
	delete(s, a)
	if len(s) == 0 {
		delete(c.slots, a.slot)
	}
	c.live--
}

// run ticks while alarms are filed, and for Linger after the last.
func (c *Clock) run() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	quiet := time.Duration(0)
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		due, more := c.due(time.Now())
		for _, a := range due {
			go a.fn()
		}
		if more {
			quiet = 0
			continue
		}
		if quiet += c.cfg.Tick; quiet >= c.cfg.Linger && c.quit() {
			return
		}
	}
}

// due takes the alarms whose deadline is at or before now out of their
// slots (filing again those moved later), and reports whether any alarm is
// left filed.
func (c *Clock) due(now time.Time) (due []*Alarm, more bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := now.UnixNano()
	last := ns / int64(c.cfg.Tick) // the last slot ended by now
	for ; c.next <= last; c.next++ {
		s := c.slots[c.next]
		delete(c.slots, c.next)
		c.live -= len(s)
		for a := range s {
			switch at := a.at.Load(); {
			case at == 0: // stopped as it was taken
			case at > ns:
				c.file(a, at) // moved later by Reset
			case a.at.CompareAndSwap(at, 0):
				due = append(due, a)
			default: // moved or stopped meanwhile
				if at := a.at.Load(); at != 0 {
					c.file(a, at)
				}
			}
		}
	}
	return due, c.live > 0
}

// quit ends the ticking unless an alarm was filed meanwhile.
func (c *Clock) quit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live > 0 {
		return false
	}
	c.running = false
	return true
}
