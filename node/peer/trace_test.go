package peer

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

var testTrace = TraceContext{
	TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	Flags:   1,
}

// tracePool is a pool that announces itself (so every connection opens
// with a hello, whose answer says whether the peer reads trace contexts).
func tracePool(t *testing.T) *Pool {
	var d net.Dialer
	p := NewPool(PoolConfig{Self: "127.0.0.1:1", Dial: d.DialContext, Forward: ForwardConfig{ProbeAfter: testProbeAfter, Liveness: testLiveness},
		Log: slog.New(slog.DiscardHandler), Stats: &Stats{}})
	t.Cleanup(p.Close)
	return p
}

// negotiated waits until cl's connection knows the peer reads trace
// contexts.
func negotiated(t *testing.T, cl *Client) {
	t.Helper()
	eventually(t, 5*time.Second, "the hello's answer", func() bool {
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.cur != nil && cl.cur.traces.Load()
	})
}

// A traced call reaches the owner's handler with the caller's trace
// context, byte for byte; an untraced call on the same connection, and a
// traced one the peer has not said it reads yet, with none.
func TestTraceContextReachesTheHandler(t *testing.T) {
	var mu sync.Mutex
	var seen []*TraceContext
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ln, ServerConfig{Log: slog.New(slog.DiscardHandler), Inline: func(*Call) bool { return true },
		Handle: func(ctx context.Context, c *Call) (Answer, error) {
			mu.Lock()
			defer mu.Unlock()
			if tc, ok := TraceFrom(ctx); ok {
				seen = append(seen, &tc)
			} else {
				seen = append(seen, nil)
			}
			return Answer{Owner: "owner"}, nil
		}})
	t.Cleanup(srv.Close)
	cl := tracePool(t).Get(srv.Addr().String())
	ctx := context.Background()
	if _, err := cl.Call(ctx, &Call{Op: OpAcquire, Key: "t:a"}); err != nil { // opens the connection
		t.Fatal(err)
	}
	negotiated(t, cl)
	if _, err := cl.CallTraced(ctx, &Call{Op: OpAcquire, Key: "t:a"}, testTrace); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Call(ctx, &Call{Op: OpSettle, Key: "t:a", Lease: 1}); err != nil {
		t.Fatal(err)
	}
	run := Call{Op: OpRun, Key: "t:a", State: AppendRun(nil, []Call{{Op: OpAcquire, Key: "t:a"}, {Op: OpAcquire, Key: "g:b"}})}
	if _, err := cl.CallTraced(ctx, &run, testTrace); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 4 || seen[0] != nil || seen[1] == nil || *seen[1] != testTrace || seen[2] != nil || seen[3] == nil || *seen[3] != testTrace {
		t.Fatalf("trace contexts seen by the handler: %+v, want none, %+v, none, %+v", seen, testTrace, testTrace)
	}
}

// oldServer is a peer of the build before trace contexts: it reads every
// call from its item's first byte, whatever the item's status, and
// answers pings with an empty State.
type oldServer struct {
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	statuses []byte // of every call item but pings
	failed   int    // calls it could not decode
}

func startOldServer(t *testing.T) *oldServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &oldServer{ln: ln}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			o.wg.Add(1)
			go func() {
				defer o.wg.Done()
				defer conn.Close()
				o.serve(conn)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); o.wg.Wait() })
	return o
}

func (o *oldServer) serve(conn net.Conn) {
	fr := newFrameReader(conn, frameCalls, Limits{}, nil)
	for {
		items, err := fr.next()
		if err != nil {
			return
		}
		var out []item
		for _, it := range items {
			c, err := DecodeCall(it.body)
			if err == nil && c.Op != OpPing {
				o.mu.Lock()
				o.statuses = append(o.statuses, it.status)
				o.mu.Unlock()
			}
			if err != nil {
				o.mu.Lock()
				o.failed++
				o.mu.Unlock()
			}
			out = append(out, answerItem(it.id, Answer{Owner: "old"}, err))
		}
		if _, err := conn.Write(encodeFrame(nil, frameAnswers, out)); err != nil {
			return
		}
	}
}

// A member of the build before never gets a trace context: it never said
// it reads them, so a traced call reaches it as an untraced one would,
// and is answered.
func TestTraceNotSentToAnOlderPeer(t *testing.T) {
	o := startOldServer(t)
	p := tracePool(t)
	cl := p.Get(o.ln.Addr().String())
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		a, err := cl.CallTraced(ctx, &Call{Op: OpAcquire, Key: "t:a"}, testTrace)
		if err != nil || a.Owner != "old" {
			t.Fatalf("call %d to the older peer: %+v, %v", i, a, err)
		}
		// Its answer to the hello and to heartbeats came back by now:
		// they said nothing of trace contexts.
		cl.Heartbeat()
	}
	eventually(t, 5*time.Second, "the heartbeats", func() bool { return !cl.beating.Load() })
	if _, err := cl.CallTraced(ctx, &Call{Op: OpAcquire, Key: "t:a"}, testTrace); err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed != 0 || !bytes.Equal(o.statuses, []byte{0, 0, 0, 0}) {
		t.Fatalf("the older peer failed %d calls and saw item statuses %v, want 0 and [0 0 0 0]", o.failed, o.statuses)
	}
}

// The trace context's encoding: what tracedItem writes splitTrace reads,
// a longer head (a later build's) is skipped past, a short one refused.
func TestTraceHeadRoundTrip(t *testing.T) {
	call := AppendCall(nil, &Call{Op: OpAcquire, Key: "t:a"})
	it := tracedItem(7, &testTrace, call)
	if it.id != 7 || it.status != itemTraced {
		t.Fatalf("item %d status %#x", it.id, it.status)
	}
	tc, rest, err := splitTrace(it.body)
	if err != nil || tc != testTrace || !bytes.Equal(rest, call) {
		t.Fatalf("split: %+v %x %v", tc, rest, err)
	}
	longer := append([]byte{traceHeadLen + 3}, it.body[1:1+traceHeadLen]...)
	longer = append(append(longer, 9, 9, 9), call...)
	if tc, rest, err := splitTrace(longer); err != nil || tc != testTrace || !bytes.Equal(rest, call) {
		t.Fatalf("a longer head: %+v %x %v", tc, rest, err)
	}
	for _, bad := range [][]byte{nil, {traceHeadLen - 1}, it.body[:traceHeadLen]} {
		if _, _, err := splitTrace(bad); !errors.Is(err, errTraceHead) {
			t.Fatalf("splitTrace(%x): %v, want errTraceHead", bad, err)
		}
	}
}
