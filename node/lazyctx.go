package node

import (
	"context"
	"sync"
	"time"
)

// lazyTimeout is context.WithTimeout(parent, timeout) made only when
// somebody asks for it (Done, Err or Deadline); the timeout runs from that
// moment. A forwarded call the owner decides at once never asks, and
// context.WithTimeout (a context, allocations and a timer-heap update) was
// a visible part of such a call's cost; a call that waits, forwards on or
// replicates asks first thing, and gets the real context.
type lazyTimeout struct {
	parent  context.Context
	timeout time.Duration

	once   sync.Once
	ctx    context.Context // context.WithTimeout(parent, timeout), once made
	cancel context.CancelFunc
}

// withLazyTimeout returns the lazy context and the function that releases
// it (call it as a context.CancelFunc).
func withLazyTimeout(parent context.Context, timeout time.Duration) (*lazyTimeout, context.CancelFunc) {
	l := &lazyTimeout{parent: parent, timeout: timeout}
	return l, l.release
}

func (l *lazyTimeout) real() context.Context {
	l.once.Do(func() { l.ctx, l.cancel = context.WithTimeout(l.parent, l.timeout) })
	return l.ctx
}

// release cancels the context if it was made; if not, it never will be:
// it is cancelled from now on, as a CancelFunc leaves it.
func (l *lazyTimeout) release() {
	made := true
	l.once.Do(func() { made, l.ctx = false, cancelledCtx })
	if made {
		l.cancel()
	}
}

// cancelledCtx is a context cancelled from the start (never modified).
var cancelledCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (l *lazyTimeout) Deadline() (time.Time, bool) { return l.real().Deadline() }
func (l *lazyTimeout) Done() <-chan struct{}       { return l.real().Done() }
func (l *lazyTimeout) Err() error                  { return l.real().Err() }
func (l *lazyTimeout) Value(key any) any           { return l.parent.Value(key) }
