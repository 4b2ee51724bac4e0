package node

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The peer protocol runs over one persistent TCP connection per pair of nodes.
// A frame is a 4-byte big-endian length, a kind byte and a batch of items;
// each item is a uvarint id, a status byte, a uvarint length and a body (a
// Call, an Answer, or an error text when the status is itemError). Ids are
// chosen by the caller and echoed in the answer, so answers may come back in
// any order: a queued acquire never holds up the calls behind it.
const (
	frameCalls   byte = 1
	frameAnswers byte = 2

	itemOK    byte = 0
	itemError byte = 1

	// maxFrame bounds a frame so a corrupt length cannot make us allocate
	// without limit.
	maxFrame = 16 << 20

	// frameBatchBytes stops a batch from growing once its items reach
	// this many bytes, so large items (a partition's state in a handoff)
	// never add up past maxFrame.
	frameBatchBytes = 1 << 20

	// maxItem is the largest item body a frame can carry.
	maxItem = maxFrame - 64
)

// item is one entry of a frame.
type item struct {
	id     uint64
	status byte
	body   []byte
}

// BatchConfig controls how a peer connection batches items into frames.
type BatchConfig struct {
	// Wait is how long the writer lingers for more items after the first one
	// before it writes the frame. Zero writes as soon as the queue is drained
	// (opportunistic batching: whatever accumulated while the previous write
	// was in flight). Gubernator's default is 500µs.
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

// writeFrames reads items from q and writes them to w in frames of kind,
// batching per cfg, until q is closed or a write fails. It returns the write
// error, or nil when q was closed.
// onFrame, if not nil, is told the size of every frame written.
func writeFrames(w net.Conn, kind byte, q <-chan item, cfg BatchConfig, stop <-chan struct{}, onFrame func(items int)) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	max := cfg.max()
	batch := make([]item, 0, max)
	var buf []byte
	var timer *time.Timer
	for {
		var first item
		select {
		case it, ok := <-q:
			if !ok {
				return nil
			}
			first = it
		case <-stop:
			return nil
		}
		batch = append(batch[:0], first)
		size := len(first.body)
		if cfg.Wait > 0 && max > 1 {
			if timer == nil {
				timer = time.NewTimer(cfg.Wait)
			} else {
				timer.Reset(cfg.Wait)
			}
		linger:
			for len(batch) < max && size < frameBatchBytes {
				select {
				case it, ok := <-q:
					if !ok {
						break linger
					}
					batch = append(batch, it)
					size += len(it.body)
				case <-timer.C:
					break linger
				}
			}
			timer.Stop()
		} else {
		drain:
			for len(batch) < max && size < frameBatchBytes {
				select {
				case it, ok := <-q:
					if !ok {
						break drain
					}
					batch = append(batch, it)
					size += len(it.body)
				default:
					break drain
				}
			}
		}
		buf = encodeFrame(buf[:0], kind, batch)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if onFrame != nil {
			onFrame(len(batch))
		}
	}
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
	r     *bufio.Reader
	kind  byte
	buf   []byte
	items []item
}

func newFrameReader(conn net.Conn, kind byte) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(conn, 64<<10), kind: kind}
}

// next reads one frame and returns its items.
func (f *frameReader) next() ([]item, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame {
		return nil, fmt.Errorf("frame of %d bytes", n)
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if _, err := io.ReadFull(f.r, f.buf); err != nil {
		return nil, err
	}
	if f.buf[0] != f.kind {
		return nil, fmt.Errorf("frame kind %d, want %d", f.buf[0], f.kind)
	}
	var err error
	f.items, err = decodeItems(f.buf[1:], f.items[:0])
	return f.items, err
}

var errFrame = errors.New("malformed frame")

func decodeItems(b []byte, items []item) ([]item, error) {
	r := reader{b: b}
	count := r.uvarint()
	if r.err != nil || count > uint64(len(b)) {
		return items, errFrame
	}
	for i := uint64(0); i < count; i++ {
		id := r.uvarint()
		status := r.byte()
		n := r.uvarint()
		if r.err != nil || n > uint64(len(r.b)) {
			return items, errFrame
		}
		items = append(items, item{id: id, status: status, body: r.b[:n]})
		r.b = r.b[n:]
	}
	if len(r.b) != 0 {
		return items, errFrame
	}
	return items, nil
}
