package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

var (
	secretOld = bytes.Repeat([]byte("o"), MinSecretLen)
	secretNew = bytes.Repeat([]byte("n"), MinSecretLen)
	secretBad = bytes.Repeat([]byte("x"), MinSecretLen)
)

// clientWith returns a peer client of addr dialing with secrets (none:
// plaintext).
func clientWith(t *testing.T, addr string, secrets ...[]byte) *Client {
	t.Helper()
	p := newTestPeerClient(addr, time.After)
	auth, err := NewAuth(secrets, randReader(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.auth = auth
	t.Cleanup(p.Close)
	return p
}

func randReader() io.Reader { return bytes.NewReader(bytes.Repeat([]byte{7}, 1<<16)) }

var acquireOne = Call{Op: OpAcquire, Key: "t:tenant", Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}}

// expectClosed reads conn until the server closes it and returns the bytes
// it sent; it fails the test if that takes longer than within.
func expectClosed(t *testing.T, conn net.Conn, within time.Duration) []byte {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (got %d bytes)", within, len(got))
	}
	return got
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callFrame(calls ...Call) []byte {
	var items []item
	for i := range calls {
		items = append(items, item{id: uint64(i + 1), body: AppendCall(nil, &calls[i])})
	}
	return encodeFrame(nil, frameCalls, items)
}

// A client without the secret, speaking today's plaintext protocol, is
// closed before any frame is served: its acquire and its replica change
// nothing, it is sent not one byte, and it is counted.
func TestPeerPlaintextClientRejectedBySecretServer(t *testing.T) {
	nd := newTestServer(t, withSecrets(secretNew))
	conn := dialRaw(t, nd.addr())
	frame := callFrame(acquireOne, Call{Op: OpReplicate, Key: "t:other", State: []byte("snapshot"), From: "evil"})
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	if got := expectClosed(t, conn, 3*time.Second); len(got) != 0 {
		t.Fatalf("server sent %d bytes to an unauthenticated client", len(got))
	}
	if nd.table.Len() != 0 || nd.handled.Load() != 0 {
		t.Fatalf("keys %d, calls served %d after an unauthenticated client, want 0 and 0", nd.table.Len(), nd.handled.Load())
	}
	if got := nd.remaining(t, acquireOne.Key); got != 10 {
		t.Fatalf("%d of 10 requests left, want 10", got)
	}
	if got := nd.stats.AuthFailures.Load(); got != 1 {
		t.Fatalf("auth failures %d, want 1", got)
	}
}

// A client with a wrong secret fails the handshake: its call fails as the
// peer being down, and nothing is admitted.
func TestPeerWrongSecretFailsHandshake(t *testing.T) {
	nd := newTestServer(t, withSecrets(secretNew, secretOld))
	p := clientWith(t, nd.addr(), secretBad)
	_, err := p.Call(context.Background(), &acquireOne)
	if !errors.Is(err, ErrPeerDown) || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("call with a wrong secret: %v, want ErrPeerDown after the server closed", err)
	}
	eventually(t, 5*time.Second, "the failure counted", func() bool { return nd.stats.AuthFailures.Load() == 1 })
	if got := nd.remaining(t, acquireOne.Key); got != 10 {
		t.Fatalf("%d of 10 requests left, want 10", got)
	}
	// And a server with a secret the client does not hold cannot pass
	// itself off as the owner: the client checks the server's proof.
	other := newTestServer(t, withSecrets(secretBad))
	var d net.Dialer
	conn, err := d.Dial("tcp", other.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	auth, _ := NewAuth([][]byte{secretNew}, randReader(), time.Second)
	if _, err := auth.dial(conn, time.Time{}); err == nil {
		t.Fatal("handshake with a server holding another secret succeeded")
	}
}

// Rotation: a server with {new, old} serves a client dialing with old and
// one dialing with new; a plaintext client and a client with neither are
// refused.
func TestPeerSecretRotation(t *testing.T) {
	nd := newTestServer(t, withSecrets(secretNew, secretOld))
	for _, secret := range [][]byte{secretOld, secretNew} {
		p := clientWith(t, nd.addr(), secret)
		a, err := p.Call(context.Background(), &acquireOne)
		if err != nil || !a.Decision.Allowed {
			t.Fatalf("call dialing with %q: %+v %v", secret[:1], a, err)
		}
	}
	for _, secrets := range [][][]byte{nil, {secretBad}} {
		p := clientWith(t, nd.addr(), secrets...)
		if _, err := p.Call(context.Background(), &acquireOne); !errors.Is(err, ErrPeerDown) {
			t.Fatalf("call dialing with %d secrets: %v, want ErrPeerDown", len(secrets), err)
		}
	}
	if got := nd.remaining(t, acquireOne.Key); got != 8 {
		t.Fatalf("%d of 10 requests left, want 8 (one per accepted client)", got)
	}
}

// handshaken dials nd and runs the client side of the handshake by hand.
func handshaken(t *testing.T, nd *testServer, secret []byte) (net.Conn, *session) {
	t.Helper()
	conn := dialRaw(t, nd.addr())
	auth, err := NewAuth([][]byte{secret}, randReader(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := auth.dial(conn, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return conn, sess
}

func sealed(t *testing.T, sess *session, frame []byte) []byte {
	t.Helper()
	out, err := sess.send.sealFrame(append([]byte(nil), frame...))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A sealed frame altered in flight (one ciphertext bit flipped) fails to
// open: the connection is closed and the call is not applied. The frame
// as sealed is served; replayed, it is refused like an altered one.
func TestPeerAlteredOrReplayedFrameDisconnects(t *testing.T) {
	nd := newTestServer(t, withSecrets(secretNew))
	frame := callFrame(acquireOne)

	conn, sess := handshaken(t, nd, secretNew)
	bad := sealed(t, sess, frame)
	bad[len(bad)/2] ^= 1
	if _, err := conn.Write(bad); err != nil {
		t.Fatal(err)
	}
	if got := expectClosed(t, conn, 3*time.Second); len(got) != 0 {
		t.Fatalf("server answered an altered frame with %d bytes", len(got))
	}
	if nd.table.Len() != 0 {
		t.Fatalf("an altered frame created %d keys", nd.table.Len())
	}

	conn, sess = handshaken(t, nd, secretNew)
	good := sealed(t, sess, frame)
	if _, err := conn.Write(good); err != nil {
		t.Fatal(err)
	}
	fr := newFrameReader(conn, frameAnswers, Limits{}, sess.recv)
	items, err := fr.next()
	if err != nil || len(items) != 1 || items[0].status != itemOK {
		t.Fatalf("answer to the intact frame: %v %v", items, err)
	}
	if a, err := DecodeAnswer(OpAcquire, items[0].body); err != nil || !a.Decision.Allowed {
		t.Fatalf("intact frame's answer: %+v %v", a, err)
	}
	if _, err := conn.Write(good); err != nil { // replayed
		t.Fatal(err)
	}
	if got := expectClosed(t, conn, 3*time.Second); len(got) != 0 {
		t.Fatalf("server answered a replayed frame with %d bytes", len(got))
	}
	if got := nd.remaining(t, acquireOne.Key); got != 9 {
		t.Fatalf("%d of 10 requests left, want 9: the intact frame once, the replay never", got)
	}
}

// scriptConn is a net.Conn that reads a script and discards what is
// written to it.
type scriptConn struct {
	r *bytes.Reader
}

func (c *scriptConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *scriptConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// A frame header over the cap is rejected before anything is allocated
// for the frame, and its connection is closed.
func TestPeerOversizedFrameRejectedWithoutAllocation(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 16<<20) // what the cap used to allow
	conn := &scriptConn{r: bytes.NewReader(nil)}
	fr := newFrameReader(conn, frameCalls, Limits{}, nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		conn.r.Reset(hdr[:])
		if _, err := fr.next(); err == nil {
			t.Fatal("a 16 MiB frame header was accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Fatalf("20 oversized headers allocated %d bytes", grew)
	}

	nd := newTestServer(t)
	raw := dialRaw(t, nd.addr())
	binary.BigEndian.PutUint32(hdr[:], DefaultMaxFrame+1)
	if _, err := raw.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if got := expectClosed(t, raw, 3*time.Second); len(got) != 0 {
		t.Fatalf("server answered an oversized frame with %d bytes", len(got))
	}
}

// A connection that starts a frame and stalls is closed after the read
// timeout; one idle between frames for longer is not.
func TestPeerStalledHalfFrameClosed(t *testing.T) {
	const timeout = 200 * time.Millisecond
	nd := newTestServer(t, func(s *serverSetup) { s.cfg.Limits.ReadTimeout = timeout })
	conn := dialRaw(t, nd.addr())
	fr := newFrameReader(conn, frameAnswers, Limits{}, nil)
	ping := callFrame(Call{Op: OpPing})
	for range 2 {
		if _, err := conn.Write(ping); err != nil {
			t.Fatal(err)
		}
		if _, err := fr.next(); err != nil {
			t.Fatalf("ping answer: %v", err)
		}
		time.Sleep(2 * timeout) // idle between frames for longer than the read timeout: the idle period under test, not a stall
	}
	if _, err := conn.Write(ping[:len(ping)-2]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	expectClosed(t, conn, 5*time.Second)
	if took := time.Since(start); took < timeout-20*time.Millisecond {
		t.Fatalf("half a frame closed after %v, before the %v read timeout", took, timeout)
	}
}

// flakyListener fails its first fails Accepts with EMFILE, as a process
// out of file descriptors does, then accepts.
type flakyListener struct {
	net.Listener
	fails  int
	failed atomic.Int64
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failed.Load() < int64(l.fails) {
		l.failed.Add(1)
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// An accept error (EMFILE) does not end the accept loop: the node serves
// forwarded calls afterwards without a restart.
func TestPeerAcceptSurvivesEMFILE(t *testing.T) {
	var fl *flakyListener
	nd := newTestServer(t, func(s *serverSetup) {
		s.listen = func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			fl = &flakyListener{Listener: ln, fails: 5}
			return fl, err
		}
	})
	p := clientWith(t, nd.addr())
	p.fwd.Liveness = 3 * time.Second // dial and handshake: the backoff is 5+10+20+40+80 ms
	a, err := p.Call(context.Background(), &acquireOne)
	if err != nil || !a.Decision.Allowed {
		t.Fatalf("call after %d failed accepts: %+v %v", fl.failed.Load(), a, err)
	}
	if got := fl.failed.Load(); got != 5 {
		t.Fatalf("%d accepts failed, want 5", got)
	}
}

// Connections beyond MaxPeerConns are closed at once; a slot freed is
// taken again.
func TestPeerConnectionCap(t *testing.T) {
	nd := newTestServer(t, func(s *serverSetup) { s.cfg.MaxConns = 2 })
	ping := callFrame(Call{Op: OpPing})
	served := func(conn net.Conn) error {
		if _, err := conn.Write(ping); err != nil {
			return err
		}
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := newFrameReader(conn, frameAnswers, Limits{}, nil).next()
		return err
	}
	first, second := dialRaw(t, nd.addr()), dialRaw(t, nd.addr())
	for _, c := range []net.Conn{first, second} {
		if err := served(c); err != nil {
			t.Fatal(err)
		}
	}
	third := dialRaw(t, nd.addr())
	third.Write(ping)
	if got := expectClosed(t, third, 3*time.Second); len(got) != 0 {
		t.Fatalf("a connection beyond the cap was sent %d bytes", len(got))
	}
	first.Close()
	eventually(t, 5*time.Second, "a freed slot", func() bool {
		nd.mu.Lock()
		defer nd.mu.Unlock()
		return len(nd.conns) == 1
	})
	if err := served(dialRaw(t, nd.addr())); err != nil {
		t.Fatalf("a connection after one closed: %v", err)
	}
}

// fragmentSizes are the item bodies' sizes of the fragmenting tests: empty,
// small, about a frame, several frames.
var fragmentSizes = []int{0, 10, MinMaxFrame - 60, MinMaxFrame, 3*MinMaxFrame + 7, 100, 2 * MinMaxFrame}

// fragmentItem is item i of the fragmenting tests: id i+1, status i%2, a
// body of fragmentSizes[i] bytes each i.
func fragmentItem(i int) item {
	return item{id: uint64(i + 1), status: byte(i % 2), body: bytes.Repeat([]byte{byte(i)}, fragmentSizes[i])}
}

// fragmentSessions are the two ends' sealing streams when sealed, else nil.
func fragmentSessions(sealed bool) (send, recv *aeadStream) {
	if !sealed {
		return nil, nil
	}
	key := &clusterKey{secret: secretNew, auth: secretNew}
	cs, _ := newSession(key, []byte("transcript"), true)
	ss, _ := newSession(key, []byte("transcript"), false)
	return cs.send, ss.recv
}

// readFragmentItems reads every fragmentItem from fr and checks each whole.
func readFragmentItems(t *testing.T, fr *frameReader, sealed bool) {
	t.Helper()
	for got := 0; got < len(fragmentSizes); {
		items, err := fr.next()
		if err != nil {
			t.Fatalf("sealed %v: after %d items: %v", sealed, got, err)
		}
		for _, it := range items {
			i := int(it.id - 1)
			if i < 0 || i >= len(fragmentSizes) {
				t.Fatalf("sealed %v: an item of id %d, not sent", sealed, it.id)
			}
			if len(it.body) != fragmentSizes[i] || it.status != byte(i%2) || (len(it.body) > 0 && it.body[len(it.body)-1] != byte(i)) {
				t.Fatalf("item %d: %d bytes status %d, want %d bytes status %d", i, len(it.body), it.status, fragmentSizes[i], i%2)
			}
			got++
		}
	}
}

// A frame writer with a cap writes no frame over it, whatever the items,
// and the reader gives them back whole.
func TestFrameWriterFragmentsUnderCap(t *testing.T) {
	for _, secret := range []bool{false, true} {
		client, server := net.Pipe()
		wire := Limits{MaxFrame: MinMaxFrame}
		send, recv := fragmentSessions(secret)
		sizes := fragmentSizes
		q := make(chan item, len(sizes))
		for i := range sizes {
			q <- fragmentItem(i)
		}
		close(q)
		var wg sync.WaitGroup
		var largest atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer client.Close()
			w := &frameWriter{conn: &measuredConn{Conn: client, largest: &largest}, kind: frameCalls, wire: wire, seal: send}
			if err := w.run(q, nil); err != nil {
				t.Error(err)
			}
		}()
		readFragmentItems(t, newFrameReader(server, frameCalls, wire, recv), secret)
		wg.Wait()
		server.Close()
		if largest.Load() > int64(wire.MaxFrame)+4 {
			t.Fatalf("sealed %v: a write of %d bytes, over the %d-byte cap", secret, largest.Load(), wire.MaxFrame)
		}
	}
}

// measuredConn records its largest write (the writer flushes each frame
// in one).
type measuredConn struct {
	net.Conn
	largest *atomic.Int64
}

func (c *measuredConn) Write(b []byte) (int, error) {
	if int64(len(b)) > c.largest.Load() {
		c.largest.Store(int64(len(b)))
	}
	return c.Conn.Write(b)
}

// FuzzPeerHandshake feeds arbitrary bytes as the client of a handshake
// and the frames after it: the server never accepts without the secret,
// never panics, and a reader never holds a buffer over its cap.
func FuzzPeerHandshake(f *testing.F) {
	hello := append(handshakeMagic[:], bytes.Repeat([]byte{1}, 32)...)
	f.Add(hello)
	f.Add(append(append([]byte(nil), hello...), bytes.Repeat([]byte{2}, proofLen)...))
	f.Add(callFrame(acquireOne))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(encodeFrame(nil, frameCalls, []item{{id: 1, status: itemMore, body: []byte("ab")}, {id: 1, body: []byte("c")}}))
	auth, err := NewAuth([][]byte{secretNew, secretOld}, bytes.NewReader(nil), time.Second)
	if err != nil {
		f.Fatal(err)
	}
	key := &auth.keys[0]
	f.Fuzz(func(t *testing.T, data []byte) {
		auth.rand = randReader()
		if sess, err := auth.accept(&scriptConn{r: bytes.NewReader(data)}); err == nil || sess != nil {
			t.Fatalf("handshake accepted %x", data)
		}
		// The frames after a handshake, sealed under keys the input
		// cannot know: none opens.
		sess, err := newSession(key, hello, false)
		if err != nil {
			t.Fatal(err)
		}
		wire := Limits{MaxFrame: MinMaxFrame}
		sr := newFrameReader(&scriptConn{r: bytes.NewReader(data)}, frameCalls, wire, sess.recv)
		if items, err := sr.next(); err == nil {
			t.Fatalf("a sealed reader accepted %d items without the key", len(items))
		}
		pr := newFrameReader(&scriptConn{r: bytes.NewReader(data)}, frameCalls, wire, nil)
		for {
			_, err := pr.next()
			if cap(pr.buf) > wire.MaxFrame || len(pr.partial) > maxItem {
				t.Fatalf("reader holds %d + %d bytes, over the cap", cap(pr.buf), len(pr.partial))
			}
			if err != nil {
				break
			}
		}
	})
}

// A client that connects to a server with secrets and says nothing is
// closed after HandshakeTimeout, and counted.
func TestPeerSilentClientClosedAfterHandshakeTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	nd := newTestServer(t, withSecrets(secretNew), func(s *serverSetup) { s.handshake = timeout })
	conn := dialRaw(t, nd.addr())
	start := time.Now()
	if got := expectClosed(t, conn, 5*time.Second); len(got) != 0 {
		t.Fatalf("a silent client was sent %d bytes", len(got))
	}
	if took := time.Since(start); took < timeout-20*time.Millisecond {
		t.Fatalf("closed after %v, before the %v handshake timeout", took, timeout)
	}
	eventually(t, 5*time.Second, "the failure counted", func() bool { return nd.stats.AuthFailures.Load() == 1 })
}
