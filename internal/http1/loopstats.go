package http1

import "sync/atomic"

// LoopStats counts what a Server's event loops (Config.Loops) did since it
// started: the requests they answered, and the connections they gave to a
// goroutine of their own, by why. All zero without loops.
type LoopStats struct {
	Answered uint64 // requests answered on a loop's thread
	Declined uint64 // connections handed over at a request Config.Quick declined
	NotPlain uint64 // ... at a request ParseHead does not take (ErrNotPlain: a GET, a query, ...)
	Large    uint64 // ... at a request over the loop's read buffer (8 KiB)
	Full     uint64 // ... at an answer the socket had no room for
}

// loopCounters are a Server's LoopStats as its loops count them.
type loopCounters struct {
	answered, declined, notPlain, large, full atomic.Uint64
}

// LoopStats returns what the server's event loops did so far.
func (s *Server) LoopStats() LoopStats {
	c := &s.loopStats
	return LoopStats{Answered: c.answered.Load(), Declined: c.declined.Load(), NotPlain: c.notPlain.Load(), Large: c.large.Load(), Full: c.full.Load()}
}
