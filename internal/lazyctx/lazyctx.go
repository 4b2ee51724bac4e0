// Package lazyctx is context.WithTimeout made only when somebody asks for
// it. Imports nothing of ours.
package lazyctx

import (
	"context"
	"sync"
	"time"
)

// Timeout is context.WithTimeout(parent, timeout) made only when somebody
// asks for it (Done, Err or Deadline); the timeout runs from that moment.
// A decision made at once never asks, and the real context (a context,
// four allocations and a timer-heap update) was a tenth of such a
// decision's cost; a call that forwards, waits or replicates asks first
// thing, and gets the real context. Value never makes it.
type Timeout struct {
	parent  context.Context
	timeout time.Duration

	once   sync.Once
	ctx    context.Context // context.WithTimeout(parent, timeout), once made
	cancel context.CancelFunc
}

// WithTimeout returns the lazy context and the function that releases it
// (call it as a context.CancelFunc).
func WithTimeout(parent context.Context, timeout time.Duration) (*Timeout, context.CancelFunc) {
	l := &Timeout{parent: parent, timeout: timeout}
	return l, l.release
}

func (l *Timeout) real() context.Context {
	l.once.Do(func() { l.ctx, l.cancel = context.WithTimeout(l.parent, l.timeout) })
	return l.ctx
}

// release cancels the context if it was made; if not, it never will be:
// it is cancelled from now on, as a CancelFunc leaves it.
func (l *Timeout) release() {
	made := true
	l.once.Do(func() { made, l.ctx = false, cancelled })
	if made {
		l.cancel()
	}
}

// cancelled is a context cancelled from the start (never modified).
var cancelled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (l *Timeout) Deadline() (time.Time, bool) { return l.real().Deadline() }
func (l *Timeout) Done() <-chan struct{}       { return l.real().Done() }
func (l *Timeout) Err() error                  { return l.real().Err() }
func (l *Timeout) Value(key any) any           { return l.parent.Value(key) }
