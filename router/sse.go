package router

// The relay of an event stream (text/event-stream) from the upstream to the
// client, event by event, reading each event's usage through the provider.

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
)

// maxEvent is the bytes of one stream event parsed; larger ones pass
// through unparsed.
const maxEvent = 1 << 20

// relayStream relays an event stream event by event, flushing each, and
// settles before the terminal event or at the end.
func (x *exchange) relayStream(w http.ResponseWriter, req *http.Request, resp *http.Response) {
	rc := http.NewResponseController(w)
	w.WriteHeader(resp.StatusCode)
	if err := rc.Flush(); err != nil { // the client is gone
		x.settleSeen()
		return
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var ev []byte        // the current event, while it is at most maxEvent bytes
	passthrough := false // the current event outgrew maxEvent: written as it comes, unparsed
	lineStart := true    // the next fragment starts a line
	var werr error
	write := func(b []byte) {
		if werr == nil && len(b) > 0 {
			_, werr = w.Write(b)
		}
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
			if werr == nil {
				werr = rc.Flush()
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
