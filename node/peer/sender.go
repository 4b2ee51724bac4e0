package peer

import (
	"fmt"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"
)

// frameSender writes one direction of a peer connection from the
// goroutines that have something to send, without a writer goroutine of its
// own (flat combining). A sender appends its item to the queue; if no write
// is under way it takes the turn and writes everything queued, as frames
// built into one buffer and one write, again and again until the queue is
// empty, so an item queued while a write was in flight goes out with the
// next write of the goroutine holding the turn. Compared with a writer
// goroutine fed by a channel it saves, per frame, a hand-off to that
// goroutine (a wakeup, often a futex) and, when several items are queued, a
// write per item.
//
// Frames follow the rules of frameWriter: none exceeds the cap, at most
// BatchConfig.Max items each, an item too large for a frame goes out as
// fragments. The first write error sticks: every later send returns it
// and writes nothing (the connection is to be torn down).
type frameSender struct {
	w frameWriter // encoding, sealing and limits; used only by the goroutine holding the turn
	// writeTimeout, if positive, bounds each write: a peer that does not
	// take our bytes for that long fails the write (and the connection).
	writeTimeout time.Duration
	// yield, if set, makes the goroutine that takes the turn let the
	// other runnable goroutines run before it writes (runtime.Gosched),
	// so the calls they are about to send join its frame: forwarded
	// calls come from many request goroutines made runnable together, and
	// one frame for several of them saves the write, the peer's read and
	// the peer's wakeup of each of the others. Measured (BenchmarkForwardCPU,
	// c4 and c16): 1.1 and 1.5 calls per frame without, 3.3 and 10 with;
	// the CPU per forwarded call fell by a third.
	yield bool

	mu    sync.Mutex // guards q, spare, busy and err
	q     []item     // items waiting for the turn's next write
	spare []item     // the storage of the batch last written, reused for q
	busy  bool       // a goroutine holds the turn
	err   error      // the first write error

	counts []int // onFrame's count of each frame of the write under way
}

// frameSenderRetain is the largest frame buffer kept between writes, in
// bytes: a handoff's megabytes are not held for the small frames after it.
const frameSenderRetain = 256 << 10

func newFrameSender(conn net.Conn, kind byte, batch BatchConfig, wire Limits, seal *aeadStream, onFrame func(int)) *frameSender {
	s := &frameSender{w: frameWriter{conn: conn, kind: kind, batch: batch, wire: wire, seal: seal, onFrame: onFrame}}
	s.w.limit = wire.frameCap()
	if seal != nil {
		s.w.limit -= sealTag
	}
	return s
}

// queue adds it to the queue without writing: the next send, or the
// goroutine holding the turn, writes it.
func (s *frameSender) queue(it item) {
	s.mu.Lock()
	if s.err == nil {
		s.q = append(s.q, it)
	}
	s.mu.Unlock()
}

// send queues it and, unless another goroutine holds the turn, writes
// everything queued before it returns. It returns the connection's write
// error, if any write failed (this one or an earlier one).
func (s *frameSender) send(it item) error {
	s.mu.Lock()
	if s.err == nil {
		s.q = append(s.q, it)
	}
	return s.turn()
}

// flush writes what is queued unless another goroutine holds the turn.
func (s *frameSender) flush() error {
	s.mu.Lock()
	return s.turn()
}

// turn writes the queue until it is empty, unless another goroutine holds
// the turn (that one writes it). Callers hold s.mu; turn releases it.
func (s *frameSender) turn() error {
	if s.busy || s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.busy = true
	if s.yield {
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
	}
	for len(s.q) > 0 && s.err == nil {
		batch := s.q
		s.q = s.spare[:0]
		s.mu.Unlock()
		err := s.write(batch)
		clear(batch) // let the bodies go
		s.mu.Lock()
		s.spare = batch[:0]
		if err != nil {
			s.err = err
		}
	}
	if s.err != nil {
		s.q = nil // nothing more will be written
	}
	s.busy = false
	err := s.err
	s.mu.Unlock()
	return err
}

// write encodes items as frames into one buffer and writes it.
func (s *frameSender) write(items []item) error {
	w := &s.w
	if cap(w.buf) > frameSenderRetain {
		w.buf = nil
	}
	buf, counts := w.buf[:0], s.counts[:0]
	most, budget := w.batch.max(), min(frameBatchBytes, w.limit)
	var err error
	frame := func(part []item, counted int) {
		if err == nil {
			buf, err = s.appendFrame(buf, part)
			counts = append(counts, counted)
		}
	}
	for len(items) > 0 {
		if frameHead+items[0].size() > w.limit {
			s.appendFragments(items[0], frame)
			items = items[1:]
			continue
		}
		n, size := 0, frameHead
		for n < len(items) && n < most && size+items[n].size() <= w.limit && size < budget {
			size += items[n].size()
			n++
		}
		frame(items[:n], n)
		items = items[n:]
	}
	w.buf, s.counts = buf, counts
	if err != nil {
		return err
	}
	if err := s.writeOut(buf); err != nil {
		return err
	}
	if w.onFrame != nil {
		for _, n := range counts {
			w.onFrame(n)
		}
	}
	return nil
}

// writeChunk is how many bytes of a write must leave within writeTimeout:
// a handoff's megabytes are timed by their progress, not as a whole.
const writeChunk = 256 << 10

// writeOut writes b, in chunks each within writeTimeout when there is one.
func (s *frameSender) writeOut(b []byte) error {
	if s.writeTimeout <= 0 {
		_, err := s.w.conn.Write(b)
		return err
	}
	for len(b) > 0 {
		if err := s.w.conn.SetWriteDeadline(time.Now().Add(s.writeTimeout)); err != nil {
			return err
		}
		n, err := s.w.conn.Write(b[:min(len(b), writeChunk)])
		if err != nil {
			return fmt.Errorf("peer write, %d bytes left (each chunk due within %v): %w", len(b)-n, s.writeTimeout, err)
		}
		b = b[n:]
	}
	return nil
}

// appendFrame appends one frame of items to buf, sealed if the connection
// is.
func (s *frameSender) appendFrame(buf []byte, items []item) ([]byte, error) {
	start := len(buf)
	size := frameHead
	for i := range items {
		size += items[i].size()
	}
	buf = slices.Grow(buf, size+4+sealTag)
	// The frame is encoded (and sealed) in place after what buf holds:
	// the capacity just made leaves room for it and its tag.
	f := encodeFrame(buf[start:start], s.w.kind, items)
	if s.w.seal != nil {
		var err error
		if f, err = s.w.seal.sealFrame(f); err != nil {
			return buf, err
		}
	}
	return buf[:start+len(f)], nil
}

// appendFragments hands frame the fragments of an item too large for one
// frame, each in a frame of its own; only the last counts the item.
func (s *frameSender) appendFragments(it item, frame func([]item, int)) {
	piece := s.w.limit - frameHead - itemHead
	body := it.body
	for len(body) > piece {
		frame([]item{{id: it.id, status: it.status | itemMore, body: body[:piece]}}, 0)
		body = body[piece:]
	}
	frame([]item{{id: it.id, status: it.status, body: body}}, 1)
}
