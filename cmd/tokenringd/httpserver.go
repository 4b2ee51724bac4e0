package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/internal/http1"
)

// maxHeaderBytes bounds a request's line and headers. Beyond it net/http
// answers a 431 by itself, before any handler runs, written straight to
// the connection; countedConn turns that plain-text answer (and net/http's
// other canned 4xx, for a malformed request) into JSON.
const maxHeaderBytes = 64 << 10

// maxAutoConns caps the automatic http.max_conns.
const maxAutoConns = 16384

// streamingPaths are the LLM proxy's routes, whose answers may stream for
// minutes: they get no write deadline. (ReadTimeout bounds only the
// request: net/http lifts the read deadline once the body is read.)
var streamingPaths = map[string]bool{"/v1/chat/completions": true, "/v1/messages": true}

// newHTTPServer returns the HTTP server of h bounded by hc: header, request
// and idle timeouts, header size, and a write deadline for every answer but
// the LLM proxy's (WriteTimeout is not set server-wide: it would cut
// streams).
func newHTTPServer(h http.Handler, hc config.HTTP) *http.Server {
	return &http.Server{
		Handler:           withDeadlines(h, hc.WriteTimeout, time.Now),
		ReadHeaderTimeout: hc.ReadHeaderTimeout,
		ReadTimeout:       hc.ReadTimeout,
		IdleTimeout:       hc.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// decisions are the decision API's handlers of connection bytes: quick on
// an event loop, plain on a connection's goroutine.
type decisions struct{ plain, quick http1.Handler }

// newServer returns the HTTP server of tokenringd: the decision API's calls
// this node decides at once answered by d.quick on hc's event loops, its
// other plain calls by d.plain on a goroutine a connection, both straight
// from the connection, and every other request served by h through
// net/http (newHTTPServer); all bounded by hc. closing reports a draining
// node: its answers close their connections. log gets the accept loop's
// warnings. Either server keeps the descriptor reserve
// (fdreserve.DefaultReserve), its refusals in ReserveRefused. With hc.TLS
// every connection is TLS, served by net/http alone with h (tls.go); its
// certificate files were checked by listenHTTP, and one that fails to load
// now serves nothing (every handshake fails, logged by net/http).
func newServer(h http.Handler, d decisions, hc config.HTTP, closing func() bool, log *slog.Logger) httpServer {
	if hc.TLS.Enabled() {
		tc, err := tlsConfig(hc.TLS, time.Now)
		if err != nil {
			tc = &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, err }}
		}
		return newStdServer(closeOnDrain(h, closing), hc, tc, log)
	}
	if !hc.FastPath {
		return newStdServer(closeOnDrain(h, closing), hc, nil, log)
	}
	return http1.NewServer(http1.Config{
		Handler:           d.plain,
		Quick:             d.quick,
		Loops:             eventLoops(hc.EventLoops),
		Fallback:          newHTTPServer(h, hc),
		ReadHeaderTimeout: hc.ReadHeaderTimeout,
		ReadTimeout:       hc.ReadTimeout,
		WriteTimeout:      hc.WriteTimeout,
		IdleTimeout:       hc.IdleTimeout,
		Closing:           closing,
		Log:               log,
	})
}

// closeOnDrain makes h's answers close their connections while closing
// reports a draining node, as the fast path's do.
func closeOnDrain(h http.Handler, closing func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if closing != nil && closing() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, req)
	})
}

// withDeadlines gives every answer but the streaming routes' a write
// deadline of writeTimeout from now.
func withDeadlines(h http.Handler, writeTimeout time.Duration, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !streamingPaths[req.URL.Path] {
			// Fails only for a writer that cannot: nothing to bound.
			_ = http.NewResponseController(w).SetWriteDeadline(now().Add(writeTimeout))
		}
		h.ServeHTTP(w, req)
	})
}

// eventLoops is the number of event loops of http.event_loops n: 0 is one
// for every two CPUs the process may run on (GOMAXPROCS), at least one;
// -1 none.
func eventLoops(n int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return max(1, runtime.GOMAXPROCS(0)/2)
	}
	return n
}

// listenHTTP listens on addr with the connection cap of hc (automatic when
// 0, see autoMaxConns).
func listenHTTP(addr string, hc config.HTTP, log *slog.Logger) (*cappedListener, error) {
	if hc.TLS.Enabled() { // refuse to start with files that do not load
		if _, err := tlsConfig(hc.TLS, time.Now); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen -http %s: %w", addr, err)
	}
	max := hc.MaxConns
	if max == 0 {
		max = autoMaxConns()
	}
	return newCappedListener(ln, max, log.With("component", "http")), nil
}

// autoMaxConns is http.max_conns when the config leaves it 0: ¾ of the
// process's open-file limit, at most maxAutoConns, at least 64.
func autoMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 1024
	}
	n := rl.Cur / 4 * 3
	switch {
	case n > maxAutoConns:
		return maxAutoConns
	case n < 64:
		return 64
	}
	return int(n)
}

// refusalBody is the JSON error a connection beyond the cap gets.
const refusalBody = `{"error":"too many connections: the node is at its http.max_conns; retry later"}` + "\n"

// refusal is the whole canned answer to a connection beyond the cap.
var refusal = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: " +
	strconv.Itoa(len(refusalBody)) + "\r\n\r\n" + refusalBody)

// maxRefusing bounds the connections being refused at once; beyond it a
// connection over the cap is closed without an answer.
const maxRefusing = 64

// refuseLinger is how long a refused connection's request is read and
// discarded after the answer, so that closing it does not reset the
// connection before the client has read the 503.
const refuseLinger = 200 * time.Millisecond

// cappedListener accepts at most max open connections; one beyond gets a
// canned 503 with Connection: close and is closed at once, rather than
// waiting in the backlog. Open and refused connections are metrics.
type cappedListener struct {
	net.Listener
	max      int64 // > 0
	open     atomic.Int64
	refused  atomic.Uint64
	refusing chan struct{} // a slot per connection being refused
	log      *slog.Logger
}

func newCappedListener(l net.Listener, max int, log *slog.Logger) *cappedListener {
	return &cappedListener{Listener: l, max: int64(max), refusing: make(chan struct{}, maxRefusing), log: log}
}

// Accept returns the next connection within the cap, refusing those beyond.
func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			return &countedConn{Conn: c, open: &l.open}, nil
		}
		l.open.Add(-1)
		if n := l.refused.Add(1); n&(n-1) == 0 { // a log line at 1, 2, 4, 8... refusals
			l.log.Warn("http connection refused: at max_conns", "max_conns", l.max, "refused_total", n)
		}
		select {
		case l.refusing <- struct{}{}:
			go l.refuse(c)
		default:
			_ = c.Close()
		}
	}
}

// refuse answers c with the canned 503 and closes it.
func (l *cappedListener) refuse(c net.Conn) {
	defer func() { <-l.refusing }()
	_ = c.SetDeadline(time.Now().Add(refuseLinger))
	if _, err := c.Write(refusal); err == nil {
		if tc, ok := c.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, maxHeaderBytes))
	}
	_ = c.Close()
}

// collectors are tokenring_http_conns_open and
// tokenring_http_conns_refused_total.
func (l *cappedListener) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tokenring_http_conns_open",
			Help: "HTTP client connections open now (at most http.max_conns)."},
			func() float64 { return float64(l.open.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokenring_http_conns_refused_total",
			Help: "HTTP client connections refused with a 503 (or closed) because http.max_conns were open."},
			func() float64 { return float64(l.refused.Load()) }),
	}
}

// serverCollectors are srv's metrics: loopCollectors and
// tokenring_http_conns_reserve_refused_total.
func serverCollectors(srv httpServer) []prometheus.Collector {
	return append(loopCollectors(srv), prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokenring_http_conns_reserve_refused_total",
		Help: "HTTP client connections closed as soon as accepted because the node was within its descriptor reserve (64 descriptors of its open-file limit)."},
		func() float64 { return float64(srv.ReserveRefused()) }))
}

// loopCollectors are tokenring_http_loop_answers_total and
// tokenring_http_loop_handovers_total{why}, srv's LoopStats: how much of
// the decision traffic its event loops answer, and what sends connections
// to goroutines (why: declined, a call the loop does not decide at once;
// not_plain, a request other than a plain POST, such as a GET; large, a
// request over 8 KiB; full, an answer the socket had no room for).
func loopCollectors(srv httpServer) []prometheus.Collector {
	stat := func(f func(http1.LoopStats) uint64) func() float64 {
		return func() float64 { return float64(f(srv.LoopStats())) }
	}
	handovers := func(why string, f func(http1.LoopStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokenring_http_loop_handovers_total",
			Help:        "HTTP connections an event loop gave to a goroutine of their own (http.event_loops), by why: declined (a call not decided here at once), not_plain (a request other than a plain POST, such as a GET), large (a request over 8 KiB), full (an answer the socket had no room for).",
			ConstLabels: prometheus.Labels{"why": why}}, stat(f))
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tokenring_http_loop_answers_total",
			Help: "Decision API requests answered on an event loop's thread (http.event_loops)."},
			stat(func(s http1.LoopStats) uint64 { return s.Answered })),
		handovers("declined", func(s http1.LoopStats) uint64 { return s.Declined }),
		handovers("not_plain", func(s http1.LoopStats) uint64 { return s.NotPlain }),
		handovers("large", func(s http1.LoopStats) uint64 { return s.Large }),
		handovers("full", func(s http1.LoopStats) uint64 { return s.Full }),
	}
}

// countedConn gives its slot back when closed.
type countedConn struct {
	net.Conn
	once sync.Once
	open *atomic.Int64
}

// netHTTPErrorHeaders follow the status line of the answers net/http
// writes by itself to a request it could not parse (server.go: a 431 for
// headers over MaxHeaderBytes, a 400 for a malformed request). A handler's
// answers never carry them: tokenringd's are JSON.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// Write passes p on, except net/http's own plain-text 4xx answers, which it
// rewrites as the same status with a JSON error body, like every other
// error of tokenringd.
func (c *countedConn) Write(p []byte) (int, error) {
	if json, ok := jsonCanned(p); ok {
		if _, err := c.Conn.Write(json); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// jsonCanned returns the JSON form of one of net/http's canned answers p
// ("HTTP/1.1 431 Request Header Fields Too Large" + netHTTPErrorHeaders +
// the status text again), or false when p is not one.
func jsonCanned(p []byte) ([]byte, bool) {
	const proto = "HTTP/1.1 4"
	if len(p) > 512 || !bytes.HasPrefix(p, []byte(proto)) {
		return nil, false
	}
	status, body, ok := bytes.Cut(p[len("HTTP/1.1 "):], []byte(netHTTPErrorHeaders))
	if !ok || !bytes.HasPrefix(body, status) {
		return nil, false
	}
	msg, _ := json.Marshal(map[string]string{"error": string(body)})
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(msg)+1, msg)
	b.WriteByte('\n')
	return b.Bytes(), true
}

// CloseWrite half-closes the connection (net/http does before closing
// after an error answer, so that the client reads the answer, not a reset).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn is the accepted socket (http1.Wrapper): an event loop serves it
// itself.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

// SetNetConn puts back the socket an event loop hands to a goroutine
// (http1.Wrapper).
func (c *countedConn) SetNetConn(nc net.Conn) { c.Conn = nc }

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
