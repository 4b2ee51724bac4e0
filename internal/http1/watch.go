package http1

import (
	"bufio"
	"sync"
	"time"

	"github.com/tokenring/tokenring/internal/alarm"
)

// watchable is the connection of the request being answered, as
// WatchClient reads it.
type watchable struct {
	c      *conn
	br     *bufio.Reader
	alarms *alarm.Clock // the Server's
}

// aLongTimeAgo is a read deadline that has passed: it ends a read at once.
var aLongTimeAgo = time.Unix(1, 0)

// WatchClient calls gone, on a goroutine of its own, when the client hangs
// up (its connection ends or fails) while the Handler still runs, noticing
// it only from after on: an answer ready sooner starts nothing. (net/http
// reads every connection from a goroutine of its own while its handler
// runs; a short answer pays for it twice, in a wake-up to start the read
// and in another to end it.) A client that sends its next request before
// this answer ends the watch without gone.
//
// stop ends the watch and waits until it has let go of the connection;
// the Handler must call it before it returns, and then take the request
// (return true). Once the watch has started, the request's slices (Path,
// Authorization, Head, Body) may have moved in the connection's buffer:
// copy what is needed before calling WatchClient. On a request the Server
// did not read (ParseHead alone) gone is never called.
func (r *Request) WatchClient(after time.Duration, gone func()) (stop func()) {
	if r.watch == nil {
		return func() {}
	}
	w := &clientWatch{on: *r.watch, gone: gone}
	w.alarm = r.watch.alarms.After(after, w.run)
	return w.stop
}

// clientWatch is one WatchClient.
type clientWatch struct {
	on    watchable
	gone  func()
	alarm *alarm.Alarm

	mu      sync.Mutex
	stopped bool
	done    chan struct{} // made when the read starts, closed when it has ended
}

// run reads the connection until the client sends or hangs up, or stop.
func (w *clientWatch) run() {
	w.mu.Lock()
	if w.stopped || w.on.br.Buffered() >= w.on.br.Size() {
		w.mu.Unlock() // stopped first, or no room to read into: nothing to watch
		return
	}
	w.done = make(chan struct{})
	w.mu.Unlock()
	defer close(w.done)
	_ = w.on.c.SetReadDeadline(time.Time{}) // the wait is the Handler's, not the idle timeout's
	_, err := w.on.br.Peek(w.on.br.Buffered() + 1)
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	if err != nil && !stopped {
		w.gone()
	}
}

// stop ends the watch: it cuts a read in progress short (a read deadline
// in the past) and waits for it.
func (w *clientWatch) stop() {
	w.mu.Lock()
	w.stopped = true
	done := w.done
	w.mu.Unlock()
	w.alarm.Stop()
	if done == nil {
		return
	}
	_ = w.on.c.SetReadDeadline(aLongTimeAgo)
	<-done
	w.on.c.rdl = aLongTimeAgo // not the deadline it was: next sets the idle one again
}
