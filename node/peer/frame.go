package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/tokenring/tokenring/node/internal/wire"
)

// The peer protocol runs over one persistent TCP connection per pair of nodes.
// A frame is a 4-byte big-endian length, a kind byte and a batch of items;
// each item is a uvarint id, a status byte, a uvarint length and a body (a
// Call, an Answer, or an error text when the status is itemError). Ids are
// chosen by the caller and echoed in the answer, so answers may come back in
// any order: a queued acquire never holds up the calls behind it.
//
// The length never exceeds the connection's frame cap (Limits.MaxFrame),
// and the reader rejects a larger one before it allocates anything. An item
// too large for one frame (a busy partition's state in a handoff) travels
// in fragments: consecutive frames each holding one piece of it under the
// same id, flagged itemMore on all but the last.
//
// On an authenticated connection (handshake.go) everything after the
// length is sealed (seal.go); the length counts the 16-byte tag.
const (
	frameCalls   byte = 1
	frameAnswers byte = 2

	itemOK    byte = 0
	itemError byte = 1
	// itemMore flags a fragment: the item's body continues in the next
	// item, which has the same id.
	itemMore byte = 0x80

	// DefaultMaxFrame is the frame cap when Limits.MaxFrame is zero, in
	// bytes.
	DefaultMaxFrame = 1 << 20
	// MinMaxFrame and MaxMaxFrame bound a node's frame cap
	// (node.Config.MaxFrame), in bytes.
	MinMaxFrame = 4 << 10
	MaxMaxFrame = 16 << 20

	// frameBatchBytes stops a batch from growing once its items reach
	// this many bytes (or the frame cap, if smaller).
	frameBatchBytes = 1 << 20

	// maxItem is the largest item body, reassembled from its fragments.
	// The reassembly buffer grows only as fragments arrive.
	maxItem = 16 << 20

	// frameHead bounds the bytes a frame spends on its kind and item
	// count; itemHead those an item spends on its id, status and length.
	frameHead = 1 + binary.MaxVarintLen64
	itemHead  = 2*binary.MaxVarintLen64 + 1
)

// item is one entry of a frame.
type item struct {
	id     uint64
	status byte
	body   []byte
}

// size is an upper bound of the bytes item takes in a frame.
func (it *item) size() int { return itemHead + len(it.body) }

// BatchConfig controls how a peer connection batches items into frames.
type BatchConfig struct {
	// Wait is how long the writer lingers for more items after the first one
	// before it writes the frame (a writer goroutine per connection direction
	// then). Zero writes at once, from the goroutine that sends (frameSender):
	// opportunistic batching, whatever accumulated while the previous write
	// was in flight, and for calls whatever the goroutines runnable at the
	// time add. Gubernator's default is 500µs.
	Wait time.Duration
	// Max is the most items in one frame. Zero means 1000 (Gubernator's default).
	// One disables batching: one item per frame and per write.
	Max int
}

func (c BatchConfig) max() int {
	if c.Max <= 0 {
		return 1000
	}
	return c.Max
}

// Limits bounds what a peer connection reads.
type Limits struct {
	// MaxFrame is the largest frame length accepted or written, in bytes;
	// zero means DefaultMaxFrame.
	MaxFrame int
	// ReadTimeout is how long a frame, once its first byte arrived, may
	// take to arrive whole; zero means no bound. An idle connection (no
	// frame started) is never timed out by it.
	ReadTimeout time.Duration
}

func (w Limits) frameCap() int {
	if w.MaxFrame <= 0 {
		return DefaultMaxFrame
	}
	return w.MaxFrame
}

// frameWriter writes the items of one connection's direction in frames.
type frameWriter struct {
	conn  net.Conn
	kind  byte
	batch BatchConfig
	wire  Limits
	seal  *aeadStream // nil: plaintext
	// onFrame, if not nil, is told the items of every frame written (a
	// fragment counts only in the frame that completes its item).
	onFrame func(items int)

	bw    *bufio.Writer
	buf   []byte
	limit int // the most bytes of a frame after its length: the cap less the seal's tag
}

// run reads items from q and writes them, batched per w.batch, until q is
// closed, stop is closed, or a write fails. It returns the write error, or
// nil when q or stop was closed. No frame it writes exceeds the cap.
func (w *frameWriter) run(q <-chan item, stop <-chan struct{}) error {
	w.start()
	max := w.batch.max()
	budget := min(frameBatchBytes, w.limit)
	batch := make([]item, 0, max)
	var carry item // an item that did not fit the previous frame
	carried := false
	var timer *time.Timer
	for {
		first := carry
		if !carried {
			select {
			case it, ok := <-q:
				if !ok {
					return nil
				}
				first = it
			case <-stop:
				return nil
			}
		}
		carried = false
		if frameHead+first.size() > w.limit {
			if err := w.writeFragments(first); err != nil {
				return err
			}
			continue
		}
		batch = append(batch[:0], first)
		size := frameHead + first.size()
		// add puts it in the batch if it fits the frame, and otherwise
		// keeps it for the next one; it reports whether it fit.
		add := func(it item) bool {
			if size+it.size() > w.limit {
				carry, carried = it, true
				return false
			}
			batch = append(batch, it)
			size += it.size()
			return true
		}
		if w.batch.Wait > 0 && max > 1 {
			if timer == nil {
				timer = time.NewTimer(w.batch.Wait)
			} else {
				timer.Reset(w.batch.Wait)
			}
		linger:
			for len(batch) < max && size < budget {
				select {
				case it, ok := <-q:
					if !ok || !add(it) {
						break linger
					}
				case <-timer.C:
					break linger
				}
			}
			timer.Stop()
		} else {
		drain:
			for len(batch) < max && size < budget {
				select {
				case it, ok := <-q:
					if !ok || !add(it) {
						break drain
					}
				default:
					break drain
				}
			}
		}
		if err := w.writeFrame(batch, len(batch)); err != nil {
			return err
		}
	}
}

func (w *frameWriter) start() {
	w.bw = bufio.NewWriterSize(w.conn, 64<<10)
	w.limit = w.wire.frameCap()
	if w.seal != nil {
		w.limit -= sealTag
	}
}

// writeFragments writes an item too large for one frame as fragments, one
// frame each.
func (w *frameWriter) writeFragments(it item) error {
	piece := w.limit - frameHead - itemHead
	body := it.body
	for len(body) > piece {
		frag := item{id: it.id, status: it.status | itemMore, body: body[:piece]}
		if err := w.writeFrame([]item{frag}, 0); err != nil {
			return err
		}
		body = body[piece:]
	}
	return w.writeFrame([]item{{id: it.id, status: it.status, body: body}}, 1)
}

// writeFrame encodes, seals if the connection is sealed, writes and
// flushes one frame; counted is what onFrame is told.
func (w *frameWriter) writeFrame(items []item, counted int) error {
	w.buf = encodeFrame(w.buf[:0], w.kind, items)
	out := w.buf
	if w.seal != nil {
		var err error
		if out, err = w.seal.sealFrame(w.buf); err != nil {
			return err
		}
		w.buf = out
	}
	if _, err := w.bw.Write(out); err != nil {
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return err
	}
	if w.onFrame != nil {
		w.onFrame(counted)
	}
	return nil
}

func encodeFrame(b []byte, kind byte, items []item) []byte {
	b = append(b, 0, 0, 0, 0, kind)
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = binary.AppendUvarint(b, it.id)
		b = append(b, it.status)
		b = binary.AppendUvarint(b, uint64(len(it.body)))
		b = append(b, it.body...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// frameReader reads frames of one kind from a connection, reusing its
// buffers: the items of one frame alias them until the next call.
type frameReader struct {
	conn net.Conn
	r    *bufio.Reader
	kind byte
	wire Limits
	open *aeadStream // nil: plaintext

	// idle, if not nil, is called whenever the reader is about to wait
	// for bytes from the connection (all it has buffered is read).
	idle func()

	armed    bool // a read deadline is set on conn
	starting bool // the deadline set by expectBy bounds the wait for the first frame
	buf      []byte
	raw      []item // the items of the last frame, fragments included
	items    []item // what next returned last

	partial   []byte // the fragments so far of an item not yet whole
	partialID uint64
	inPartial bool
}

func newFrameReader(conn net.Conn, kind byte, wire Limits, open *aeadStream) *frameReader {
	return &frameReader{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), kind: kind, wire: wire, open: open}
}

// expectBy makes the first frame due by deadline: a connection that says
// nothing is closed then.
func (f *frameReader) expectBy(deadline time.Time) error {
	f.armed, f.starting = true, true
	return f.conn.SetReadDeadline(deadline)
}

// next reads frames until it has whole items, and returns them.
func (f *frameReader) next() ([]item, error) {
	for {
		if err := f.readFrame(); err != nil {
			return nil, err
		}
		items, err := f.assemble()
		if err != nil || len(items) > 0 {
			return items, err
		}
	}
}

// waiting tells f.idle that the reader is about to wait for the
// connection.
func (f *frameReader) waiting() {
	if f.idle != nil {
		f.idle()
	}
}

// arm starts the read timeout of a frame under way, unless it is running.
func (f *frameReader) arm() error {
	if f.armed || f.wire.ReadTimeout <= 0 {
		return nil
	}
	f.armed = true
	return f.conn.SetReadDeadline(time.Now().Add(f.wire.ReadTimeout))
}

// readFrame reads one frame into f.buf, opened if the connection is sealed.
// It waits for a frame's first byte as long as it takes (unless expectBy
// said otherwise); the rest must follow within the read timeout.
func (f *frameReader) readFrame() error {
	if f.r.Buffered() == 0 {
		f.waiting()
		if f.armed && !f.starting {
			if err := f.conn.SetReadDeadline(time.Time{}); err != nil {
				return err
			}
			f.armed = false
		}
		if _, err := f.r.Peek(1); err != nil {
			return err
		}
	}
	f.starting = false
	var hdr [4]byte
	if f.r.Buffered() < len(hdr) {
		f.waiting()
		if err := f.arm(); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	low := int64(1)
	if f.open != nil {
		low += sealTag
	}
	if n < low || n > int64(f.wire.frameCap()) {
		return fmt.Errorf("frame of %d bytes, want %d to %d", n, low, f.wire.frameCap())
	}
	if f.r.Buffered() < int(n) {
		f.waiting()
		if err := f.arm(); err != nil {
			return err
		}
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		return err
	}
	if f.open != nil {
		plain, err := f.open.openFrame(hdr[:], f.buf)
		if err != nil {
			return err
		}
		f.buf = plain
	}
	if f.buf[0] != f.kind {
		return fmt.Errorf("frame kind %d, want %d", f.buf[0], f.kind)
	}
	return nil
}

// errFragment is the verdict on fragments that do not follow each other.
var errFragment = errors.New("malformed frame: fragment out of sequence")

// assemble decodes f.buf's items and joins fragments into whole items,
// which it returns (none while an item is still incomplete).
func (f *frameReader) assemble() ([]item, error) {
	var err error
	if f.raw, err = decodeItems(f.buf[1:], f.raw[:0]); err != nil {
		return nil, err
	}
	f.items = f.items[:0]
	for _, it := range f.raw {
		more := it.status&itemMore != 0
		if !more && !f.inPartial {
			f.items = append(f.items, it)
			continue
		}
		if f.inPartial && it.id != f.partialID {
			return nil, errFragment
		}
		if len(f.partial)+len(it.body) > maxItem {
			return nil, fmt.Errorf("item of over %d bytes", maxItem)
		}
		f.inPartial, f.partialID = true, it.id
		f.partial = append(f.partial, it.body...)
		if more {
			continue
		}
		// Whole: hand the buffer out, and start the next item afresh.
		f.items = append(f.items, item{id: it.id, status: it.status, body: f.partial})
		f.partial, f.inPartial = nil, false
	}
	return f.items, nil
}

var errFrame = errors.New("malformed frame")

func decodeItems(b []byte, items []item) ([]item, error) {
	r := wire.NewReader(b)
	count := r.Uvarint()
	if r.Err() != nil || count > uint64(len(b)) {
		return items, errFrame
	}
	for i := uint64(0); i < count; i++ {
		id := r.Uvarint()
		status := r.Byte()
		body := r.Next(r.Uvarint())
		if r.Err() != nil {
			return items, errFrame
		}
		items = append(items, item{id: id, status: status, body: body})
	}
	if r.Len() != 0 {
		return items, errFrame
	}
	return items, nil
}
