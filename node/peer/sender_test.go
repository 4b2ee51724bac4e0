package peer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A frame sender with a cap writes no frame over it, whatever the items,
// and the reader gives them back whole, sealed or not.
func TestFrameSenderFragmentsUnderCap(t *testing.T) {
	for _, secret := range []bool{false, true} {
		client, server := net.Pipe()
		wire := Limits{MaxFrame: MinMaxFrame}
		send, recv := fragmentSessions(secret)
		sizes := fragmentSizes
		var frames []int
		var largest atomic.Int64
		snd := newFrameSender(&frameConn{Conn: client, largest: &largest}, frameCalls, BatchConfig{}, wire, send, func(n int) { frames = append(frames, n) })
		var wg sync.WaitGroup
		wg.Go(func() {
			defer client.Close()
			for i := range len(sizes) - 1 {
				snd.queue(fragmentItem(i))
			}
			if err := snd.send(fragmentItem(len(sizes) - 1)); err != nil {
				t.Error(err)
			}
		})
		readFragmentItems(t, newFrameReader(server, frameCalls, wire, recv), secret)
		wg.Wait()
		server.Close()
		if largest.Load() > int64(wire.MaxFrame)+4 {
			t.Fatalf("sealed %v: a frame of %d bytes, over the %d-byte cap", secret, largest.Load(), wire.MaxFrame)
		}
		counted := 0
		for _, n := range frames {
			counted += n
		}
		if counted != len(sizes) {
			t.Fatalf("sealed %v: frames counted %d items (%v), want %d", secret, counted, frames, len(sizes))
		}
	}
}

// frameConn records the largest frame among its writes (a sender writes
// several frames at once).
type frameConn struct {
	net.Conn
	largest *atomic.Int64
}

func (c *frameConn) Write(b []byte) (int, error) {
	for rest := b; len(rest) >= 4; {
		n := int(rest[0])<<24 | int(rest[1])<<16 | int(rest[2])<<8 | int(rest[3])
		if int64(n+4) > c.largest.Load() {
			c.largest.Store(int64(n + 4))
		}
		if n+4 > len(rest) {
			break
		}
		rest = rest[4+n:]
	}
	return c.Conn.Write(b)
}

// Items sent at once from many goroutines all arrive, each exactly once,
// in frames of at most BatchConfig.Max items, whether the goroutine that
// writes yields first or not.
func TestFrameSenderConcurrentSendsArriveOnce(t *testing.T) {
	for _, yield := range []bool{false, true} {
		client, server := net.Pipe()
		const senders, each, most = 8, 300, 7
		var mu sync.Mutex
		var frames, counted int
		snd := newFrameSender(client, frameCalls, BatchConfig{Max: most}, Limits{}, nil, func(n int) {
			mu.Lock()
			frames, counted = frames+1, counted+n
			mu.Unlock()
		})
		snd.yield = yield
		var wg sync.WaitGroup
		for g := range senders {
			wg.Go(func() {
				for i := range each {
					id := uint64(g*each + i + 1)
					if err := snd.send(item{id: id, body: []byte{byte(id)}}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		fr := newFrameReader(server, frameCalls, Limits{}, nil)
		seen := make(map[uint64]bool)
		for len(seen) < senders*each {
			items, err := fr.next()
			if err != nil {
				t.Fatalf("yield %v: after %d items: %v", yield, len(seen), err)
			}
			if len(items) > most {
				t.Fatalf("yield %v: a frame of %d items, want at most %d", yield, len(items), most)
			}
			for _, it := range items {
				if seen[it.id] || len(it.body) != 1 || it.body[0] != byte(it.id) {
					t.Fatalf("yield %v: item %d again or altered (%v)", yield, it.id, it.body)
				}
				seen[it.id] = true
			}
		}
		wg.Wait()
		client.Close()
		server.Close()
		if counted != senders*each || frames > counted {
			t.Fatalf("yield %v: %d frames counted %d items, want %d items", yield, frames, counted, senders*each)
		}
	}
}

// A failed write sticks: the send that met it and every later one return
// it, and nothing more is written.
func TestFrameSenderWriteErrorSticks(t *testing.T) {
	client, server := net.Pipe()
	server.Close()
	snd := newFrameSender(client, frameCalls, BatchConfig{}, Limits{}, nil, nil)
	first := snd.send(item{id: 1, body: []byte("a")})
	if first == nil {
		t.Fatal("a send on a closed pipe succeeded")
	}
	snd.queue(item{id: 2, body: []byte("b")})
	if err := snd.flush(); err != first {
		t.Fatalf("flush after a failed write: %v, want %v", err, first)
	}
	if err := snd.send(item{id: 3, body: []byte("c")}); err != first {
		t.Fatalf("send after a failed write: %v, want %v", err, first)
	}
	snd.mu.Lock()
	defer snd.mu.Unlock()
	if len(snd.q) != 0 {
		t.Fatalf("%d items kept after the connection failed", len(snd.q))
	}
}

// A caller that writes its own call is not held by a peer that takes no
// bytes (its socket buffers full, its process stopped): the write is due
// within ProbeAfter+Liveness, and the call fails with ErrPeerDown then,
// even with no other call on the connection to notice the silence.
func TestPeerCallToDeafPeerFailsWhileWriting(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if conn, err := ln.Accept(); err == nil {
			accepted <- conn // held open, never read
		}
	}()
	var d net.Dialer
	const liveness = 200 * time.Millisecond
	p := newClient(ln.Addr().String(), d.DialContext, BatchConfig{}, ForwardConfig{ProbeAfter: testProbeAfter, Liveness: liveness},
		slog.New(slog.DiscardHandler), &Stats{})
	defer p.Close()
	done := make(chan error, 1)
	go func() {
		// More than loopback's socket buffers hold: the write blocks.
		_, err := p.Call(context.Background(), &Call{Op: OpReplicate, Key: "t:acme", State: make([]byte, maxItem-1024)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrPeerDown) {
			t.Fatalf("call to a peer that reads nothing: %v, want ErrPeerDown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("call still writing 10 s after it began")
	}
	(<-accepted).Close()
}
