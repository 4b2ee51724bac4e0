package http1

import "sync/atomic"

// Later is a request's answer to come: a Quick handler on an event loop
// that will have its answer only once something else has finished (a
// call forwarded to another node) takes one with Request.Later, returns
// true having written nothing, and calls Answer once, from any goroutine,
// when the answer is ready. The loop meanwhile serves its other
// connections; this one's next requests wait for the answer.
type Later struct {
	p       promise
	closing bool // the request asked for the connection to close after it
	done    atomic.Bool
}

// promise is where a Later's answer goes: a connection of a loop.
type promise struct {
	l       *loop
	c       *loopConn
	closing bool // the connection closes after this answer
	// taken is the Later the handler took, if any (the loop's own field,
	// read once the handler has returned).
	taken *Later
}

// Later returns the way to answer r later, or nil when r cannot be
// answered so (it is not on an event loop, or answers to the requests
// before it on its connection are still unwritten): the handler then
// answers now, or declines. A handler that takes a Later and then
// declines r must not call its Answer.
func (r *Request) Later() *Later {
	p := r.promise
	if p == nil {
		return nil
	}
	r.promise = nil // one a request
	x := &Later{p: *p, closing: p.closing}
	p.taken = x
	return x
}

// Answer sends resp as the request's answer; a Later answers once (later
// calls do nothing). resp is copied: the caller may reuse it.
func (x *Later) Answer(resp *Response) {
	if !x.done.CompareAndSwap(false, true) {
		return
	}
	x.p.l.answerLater(x, resp)
}
