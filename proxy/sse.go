package proxy

// The relay of an event stream (text/event-stream) from the upstream to the
// client, event by event, reading each event's usage through the provider.

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"sync"
	"time"
)

// maxEvent is the bytes of one stream event parsed; larger ones pass
// through unparsed.
const maxEvent = 1 << 20

// headerDelay is how long a stream's headers wait for its first event, so
// that both leave in one write (and reach the client in one read); the
// headers of a stream whose first event comes later are sent alone then.
const headerDelay = 10 * time.Millisecond

// relayStream relays an event stream event by event and settles before the
// terminal event or at the end. Every event written is flushed before the
// relay next waits on the upstream (events that arrived together leave
// together, the first one at once).
func (x *exchange) relayStream(w http.ResponseWriter, req *http.Request, resp *http.Response) {
	rc := http.NewResponseController(w)
	w.WriteHeader(resp.StatusCode)
	hf := sendHeadersAfter(rc, headerDelay)
	defer hf.claim() // also on the panic below: the timer must not touch w after the handler
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	var ev []byte        // the current event, while it is at most maxEvent bytes
	passthrough := false // the current event outgrew maxEvent: written as it comes, unparsed
	lineStart := true    // the next fragment starts a line
	claimed, pending, flushed := false, false, false
	var werr error
	write := func(b []byte) {
		if werr != nil || len(b) == 0 {
			return
		}
		if !claimed {
			claimed = true
			if werr = hf.claim(); werr != nil { // the client is gone
				return
			}
		}
		_, werr = w.Write(b)
		pending = true
	}
	for werr == nil {
		frag, rerr := br.ReadSlice('\n')
		blank := lineStart && rerr == nil && (len(frag) == 1 || (len(frag) == 2 && frag[0] == '\r'))
		lineStart = rerr == nil
		if passthrough {
			write(frag)
		} else {
			ev = append(ev, frag...)
			if len(ev) > maxEvent {
				write(ev)
				ev, passthrough = ev[:0], true
			}
		}
		if blank || (rerr != nil && rerr != bufio.ErrBufferFull) {
			if !passthrough && len(ev) > 0 && x.observeEvent(ev) {
				write(ev)
			}
			ev, passthrough = ev[:0], false
			if werr == nil && pending && (!flushed || rerr != nil || !eventBuffered(br)) {
				werr, pending, flushed = rc.Flush(), false, true
			}
		}
		if rerr == nil || rerr == bufio.ErrBufferFull {
			continue
		}
		// The stream ended: cleanly (EOF), cut by the upstream, or
		// because the client went away (the request's context ends).
		x.settleSeen()
		if rerr != io.EOF && werr == nil && req.Context().Err() == nil {
			// Cut upstream: cut the client's stream too, so it knows
			// the answer is incomplete.
			panic(http.ErrAbortHandler)
		}
		return
	}
	x.settleSeen() // the client went away
}

// eventBuffered reports whether br holds a whole event (up to its blank
// line), which the relay can read without waiting on the upstream.
func eventBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// headerFlush sends a stream's headers on their own if its first event is
// late (see headerDelay). Until claim, the timer may flush w; after it,
// w is the relay's alone.
type headerFlush struct {
	mu      sync.Mutex
	t       *time.Timer
	claimed bool
	err     error // the timer's flush failed: the client is gone
}

// sendHeadersAfter flushes rc's headers after d unless claimed first.
func sendHeadersAfter(rc *http.ResponseController, d time.Duration) *headerFlush {
	hf := &headerFlush{}
	hf.mu.Lock()
	defer hf.mu.Unlock()
	hf.t = time.AfterFunc(d, func() {
		hf.mu.Lock()
		defer hf.mu.Unlock()
		if !hf.claimed {
			hf.claimed, hf.err = true, rc.Flush()
		}
	})
	return hf
}

// claim stops the timer, waiting for a flush it has started, and returns
// that flush's error. Calls after the first return nil.
func (hf *headerFlush) claim() error {
	hf.t.Stop()
	hf.mu.Lock()
	defer hf.mu.Unlock()
	err := hf.err
	hf.claimed, hf.err = true, nil
	return err
}

// observeEvent reads one stream event's usage and content into x.seen,
// settling before a terminal event. It returns whether the event is passed
// on to the client.
func (x *exchange) observeEvent(ev []byte) bool {
	data, ok := sseData(ev)
	if !ok {
		return true
	}
	end, pass := x.c.p.readEvent(x.c, &x.seen, data)
	if end {
		x.settleSeen()
	}
	return pass
}

// sseData returns the data of an event: its data lines' values joined by
// "\n"; false when it has none.
func sseData(ev []byte) ([]byte, bool) {
	var data []byte
	found := false
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if found {
			data = append(data, '\n')
		}
		data = append(data, v...)
		found = true
	}
	return data, found
}
