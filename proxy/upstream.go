package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tokenring/tokenring/internal/alarm"
	"github.com/tokenring/tokenring/internal/http1"
)

// UpstreamTimeouts bound how long the proxy waits on an upstream, so that a
// hung provider cannot hold a tenant's concurrency slot (renewed all the
// while) for as long as the client cares to wait. When one fires the
// request's lease is finished at once: cancelled if the request never
// reached the upstream, else released (the reservation stays counted, the
// slot is freed) or, for a stream, settled with what was seen. Zero fields
// take the defaults.
type UpstreamTimeouts struct {
	// Dial bounds the TCP connect. Default 5s.
	Dial time.Duration
	// TLS bounds the TLS handshake. Default 10s.
	TLS time.Duration
	// ResponseHeader bounds the wait from sending the request to the
	// answer's headers: a non-streaming completion is generated whole
	// before its headers, so this is the longest completion allowed.
	// Default 5m.
	ResponseHeader time.Duration
	// StreamIdle bounds each silence while reading an answer's body: a
	// stream (or body) with no byte for this long is cut. Default 60s.
	StreamIdle time.Duration
}

// The defaults of UpstreamTimeouts.
const (
	DefaultUpstreamDial           = 5 * time.Second
	DefaultUpstreamTLS            = 10 * time.Second
	DefaultUpstreamResponseHeader = 5 * time.Minute
	DefaultUpstreamStreamIdle     = time.Minute
)

func (t UpstreamTimeouts) withDefaults() UpstreamTimeouts {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&t.Dial, DefaultUpstreamDial)
	def(&t.TLS, DefaultUpstreamTLS)
	def(&t.ResponseHeader, DefaultUpstreamResponseHeader)
	def(&t.StreamIdle, DefaultUpstreamStreamIdle)
	return t
}

// NewUpstreamClient returns the client the proxy uses for an upstream when
// Config.Client is nil: t's dial and TLS timeouts, keep-alive with up
// to 256 idle connections per host, and no overall timeout (streams run
// long; forward bounds the wait for headers and each silence itself).
// Requests to an http:// upstream go over internal/http1's Client (each
// call written and its answer's head read by the calling goroutine, with
// no gzip asked for); https:// ones, and any the http1 Client does not
// take (among them those HTTP_PROXY sends through a proxy), over
// net/http's Transport.
func NewUpstreamClient(t UpstreamTimeouts) *http.Client {
	t = t.withDefaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: t.Dial, KeepAlive: upstreamKeepAlive}).DialContext
	tr.TLSHandshakeTimeout = t.TLS
	tr.MaxIdleConnsPerHost = 256
	plain := &http1.Client{DialTimeout: t.Dial, KeepAlive: upstreamKeepAlive, MaxIdlePerHost: 256, Fallback: tr, Proxy: tr.Proxy}
	return &http.Client{Transport: plain}
}

// upstreamKeepAlive is the TCP keep-alive period of upstream connections.
const upstreamKeepAlive = 30 * time.Second

// upstreamTimeout is the cause with which forward cancels an upstream
// request that stayed silent too long.
type upstreamTimeout struct {
	what  string
	after time.Duration
}

func (e *upstreamTimeout) Error() string { return fmt.Sprintf("upstream %s for %v", e.what, e.after) }

// idleBody is an upstream answer's body that cancels its request (through
// stop) when no byte arrives for idle. A read cut that way returns the
// timeout as its error.
type idleBody struct {
	io.ReadCloser
	idle  time.Duration
	alarm *alarm.Alarm
	fired atomic.Bool
	cause error
}

func newIdleBody(body io.ReadCloser, alarms *alarm.Clock, idle time.Duration, stop func(error)) *idleBody {
	b := &idleBody{ReadCloser: body, idle: idle, cause: &upstreamTimeout{"sent nothing", idle}}
	b.alarm = alarms.After(idle, func() {
		b.fired.Store(true)
		stop(b.cause)
	})
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.alarm.Reset(b.idle)
	}
	if err != nil && !errors.Is(err, io.EOF) && b.fired.Load() {
		err = b.cause
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.alarm.Stop()
	return b.ReadCloser.Close()
}
