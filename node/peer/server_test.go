package peer

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// testServer is a Server that decides calls the way a node without a ring
// does: every acquire at once, against a table of its own where every key
// is allowed ten requests; any other call is served and kept nowhere.
type testServer struct {
	*Server
	table   *limiter.Table
	stats   Stats
	handled atomic.Int64 // calls handed to Handle
}

// serverSetup is what newTestServer's options change.
type serverSetup struct {
	cfg       ServerConfig
	secrets   [][]byte
	handshake time.Duration
	listen    func(network, addr string) (net.Listener, error)
}

func tenRequests(string) limiter.Limits { return limiter.Limits{Requests: 10, Concurrency: 100} }

func withSecrets(secrets ...[]byte) func(*serverSetup) {
	return func(s *serverSetup) { s.secrets = secrets }
}

// newTestServer starts a testServer on loopback with a node's defaults,
// changed by opts; the test closes it.
func newTestServer(t *testing.T, opts ...func(*serverSetup)) *testServer {
	t.Helper()
	s := serverSetup{
		cfg:       ServerConfig{Limits: Limits{MaxFrame: DefaultMaxFrame, ReadTimeout: DefaultReadTimeout}, Log: slog.New(slog.DiscardHandler)},
		handshake: DefaultHandshakeTimeout,
		listen:    net.Listen,
	}
	for _, o := range opts {
		o(&s)
	}
	ts := &testServer{table: limiter.NewTable(limiter.Policy{}, tenRequests)}
	auth, err := NewAuth(s.secrets, rand.Reader, s.handshake)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := s.listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Handle, s.cfg.Inline = ts.handle, func(*Call) bool { return true }
	s.cfg.Auth, s.cfg.Stats = auth, &ts.stats
	ts.Server = NewServer(ln, s.cfg)
	t.Cleanup(ts.Close)
	return ts
}

func (ts *testServer) addr() string { return ts.Addr().String() }

func (ts *testServer) handle(_ context.Context, c *Call) (Answer, error) {
	ts.handled.Add(1)
	a := Answer{Owner: "owner"}
	if c.Op != OpAcquire {
		return a, nil
	}
	now := time.Now()
	err := ts.table.Do(c.Key, now, func(b *limiter.Budget) { a.Decision = b.Acquire(now, c.Req) })
	return a, err
}

// remaining admits at ts until it refuses and returns how many it
// admitted.
func (ts *testServer) remaining(t *testing.T, key string) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		a, err := ts.handle(context.Background(), &Call{Op: OpAcquire, Key: key, Req: limiter.Request{PromptTokens: 1, MaxTokens: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if !a.Decision.Allowed {
			return n
		}
	}
	t.Fatal("never refused")
	return 0
}
