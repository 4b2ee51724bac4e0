package node

import (
	"sync"
	"time"
)

// connWriter is the writing side of one direction of a peer connection.
// Items go out in frames (frameWriter), written by whichever goroutine
// finds the writer idle: a sender that may block on the connection (send)
// writes its own items, and whatever others queue meanwhile, on its own
// goroutine, without handing them to another one and waiting for it to be
// scheduled; items queued while a write is under way go out in the next
// frame, written by the goroutine already writing (opportunistic
// batching). A background goroutine (run) writes for senders that must not
// block (post) and, when BatchConfig.Wait is set, for everyone: it lingers
// for more items before each frame.
//
// Order: items go out in the order they were queued. After the first write
// error nothing more is written and every send returns that error.
type connWriter struct {
	fw   frameWriter
	wait time.Duration // BatchConfig.Wait: > 0 makes run the only writer
	max  int           // the most items in a frame
	kick chan struct{} // capacity 1: run has something to write
	full chan struct{} // capacity 1: a frame's worth is queued (ends run's linger)

	mu      sync.Mutex // guards pending, spare, busy and err
	pending []item
	spare   []item // the backing array of the last batch written, for reuse
	busy    bool   // a goroutine is writing pending out
	err     error  // the first write error
}

func newConnWriter(fw frameWriter) *connWriter {
	return &connWriter{
		fw:   fw,
		wait: fw.batch.Wait,
		max:  fw.batch.max(),
		kick: make(chan struct{}, 1),
		full: make(chan struct{}, 1),
	}
}

// send queues items and, unless another goroutine is writing already (or
// run lingers for batches), writes them, and everything queued meanwhile,
// on the caller's goroutine. It returns the connection's write error, if
// one happened: the items may not have gone out.
func (w *connWriter) send(items ...item) error {
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.pending = append(w.pending, items...)
	if w.busy || w.wait > 0 {
		w.signal()
		w.mu.Unlock()
		return nil
	}
	w.busy = true
	w.mu.Unlock()
	return w.flush()
}

// post queues it for the writing goroutine (run, unless another one is
// writing already): it never waits for the connection.
func (w *connWriter) post(it item) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return
	}
	w.pending = append(w.pending, it)
	if !w.busy || w.wait > 0 {
		w.signal()
	}
}

// signal wakes run, and ends its linger once a frame's worth is queued.
// Callers hold w.mu.
func (w *connWriter) signal() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
	if w.wait > 0 && len(w.pending) >= w.max {
		select {
		case w.full <- struct{}{}:
		default:
		}
	}
}

// flush writes pending out until it is empty, then gives up busy. The
// caller set busy.
func (w *connWriter) flush() error {
	for {
		w.mu.Lock()
		if w.err != nil || len(w.pending) == 0 {
			w.busy = false
			err := w.err
			w.mu.Unlock()
			return err
		}
		batch := w.pending
		w.pending, w.spare = w.spare[:0], nil
		w.mu.Unlock()
		err := w.fw.writeItems(batch)
		clear(batch) // the bodies are written (or lost with the connection)
		w.mu.Lock()
		w.spare = batch[:0]
		if err != nil && w.err == nil {
			w.err = err
			w.pending = nil
		}
		w.mu.Unlock()
	}
}

// run writes what post (and, with a linger, send) queues until stop is
// closed or a write fails, and returns the write error (nil on stop).
func (w *connWriter) run(stop <-chan struct{}) error {
	var timer *time.Timer
	for {
		select {
		case <-w.kick:
		case <-stop:
			return nil
		}
		if w.wait > 0 {
			if timer == nil {
				timer = time.NewTimer(w.wait)
			} else {
				timer.Reset(w.wait)
			}
			select {
			case <-timer.C:
			case <-w.full:
				timer.Stop()
			case <-stop:
				timer.Stop()
				return nil
			}
		}
		w.mu.Lock()
		if w.busy || w.err != nil {
			err := w.err
			w.mu.Unlock()
			if err != nil {
				return err
			}
			continue // the goroutine writing takes what is queued
		}
		w.busy = true
		w.mu.Unlock()
		if err := w.flush(); err != nil {
			return err
		}
	}
}
