package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The server side of the peer protocol: one goroutine reads each
// connection's frames, answers pings (and calls cheap enough, see inline)
// on the spot, runs the other calls on goroutines of their own, and one
// writer batches the answers into frames.

// peerServer serves forwarded calls on a listener.
type peerServer struct {
	ln     net.Listener
	handle func(ctx context.Context, c *Call) (Answer, error)
	inline func(c *Call) bool // calls cheap enough to run on the reader goroutine
	// heard returns the clock (unix ns) to set whenever a frame arrives
	// from the peer at the given peer address; nil: nobody keeps one.
	heard func(from string) *atomic.Int64
	batch BatchConfig
	log   *slog.Logger

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func (s *peerServer) serve() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.conns == nil {
			s.mu.Unlock()
			conn.Close()
			return
		}
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(conn)
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		}()
	}
}

func (s *peerServer) serveConn(conn net.Conn) {
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan item, 4096)
	stop := make(chan struct{})
	var calls sync.WaitGroup // calls running on their own goroutines
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		if err := writeFrames(conn, frameAnswers, out, s.batch, stop, nil); err != nil {
			conn.Close()
			for { // keep draining so no call blocks in reply
				select {
				case <-out:
				case <-stop:
					return
				}
			}
		}
	}()
	defer func() {
		cancel()
		calls.Wait()
		close(stop)
		writer.Wait()
	}()
	reply := func(id uint64, a Answer, err error) {
		it := item{id: id}
		if err != nil {
			it.status, it.body = itemError, []byte(err.Error())
		} else {
			it.body = AppendAnswer(nil, &a)
		}
		select {
		case out <- it:
		case <-stop:
		}
	}
	fr := newFrameReader(conn, frameCalls)
	var heard *atomic.Int64 // the caller's, once it said who it is
	for {
		items, err := fr.next()
		if err != nil {
			s.log.Debug("peer connection ended", "remote", conn.RemoteAddr().String(), "err", err)
			return
		}
		if heard != nil {
			heard.Store(time.Now().UnixNano())
		}
		for _, it := range items {
			c, err := DecodeCall(it.body)
			switch {
			case err != nil:
				reply(it.id, Answer{}, err)
			case c.Op == OpPing: // a liveness probe: answered at once, whatever else is queued
				if c.From != "" && heard == nil && s.heard != nil {
					heard = s.heard(c.From)
					heard.Store(time.Now().UnixNano())
				}
				reply(it.id, Answer{}, nil)
			case s.inline(&c):
				a, err := s.handle(ctx, &c)
				reply(it.id, a, err)
			default:
				calls.Add(1)
				go func(id uint64, c Call) {
					defer calls.Done()
					a, err := s.handle(ctx, &c)
					reply(id, a, err)
				}(it.id, c)
			}
		}
	}
}

// close stops accepting, closes every connection and waits for their goroutines.
func (s *peerServer) close() {
	s.ln.Close()
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
}

// serve executes a call that arrived from a peer.
func (n *Node) serve(ctx context.Context, c *Call) (Answer, error) {
	switch c.Op {
	case OpTransfer:
		msgs, err := decodeCustodyMsgs(c.State)
		if err != nil {
			return Answer{}, err
		}
		if t := n.tr.Load(); t != nil {
			t.step(msgs)
		}
		return Answer{Owner: n.cfg.Name, OK: true}, nil
	case OpReplicate:
		n.replicas.put(c.Key, c.State, n.cfg.Now())
		return Answer{Owner: n.cfg.Name, OK: true}, nil
	case OpReplica:
		rep, ok := n.replicas.take(c.Key)
		if !ok {
			return Answer{Owner: n.cfg.Name}, nil
		}
		return Answer{Owner: n.cfg.Name, OK: true, State: appendReplica(nil, rep)}, nil
	case OpTake, OpPut, OpPing:
		return Answer{}, fmt.Errorf("op %s is not served by this version", c.Op)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.HopTimeout+n.cfg.TransferWait+c.Req.Wait)
	defer cancel()
	return n.Do(ctx, c)
}

// inline reports whether a forwarded call is cheap enough to run on the
// connection's reader goroutine: decided here at once, without waiting or
// forwarding.
func (n *Node) inline(c *Call) bool {
	switch {
	case c.Op == OpReplicate || c.Op == OpReplica:
		return true
	case c.Op == OpTransfer, c.Op == OpAcquire && c.Req.Wait > 0:
		return false
	}
	t := n.tr.Load()
	if t == nil {
		return true
	}
	g := &t.gates[n.ring.Load().Partition(c.Key)]
	return g.hop.Load().mode == routeLocal && g.restore.Load() == nil
}
