package main

// TLS on -http (config http.tls): every connection served by net/http's
// TLS server with the same handler, the certificate reloaded when its files
// change, and with client_ca_file a client certificate required.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/internal/fdreserve"
	"github.com/tokenring/tokenring/internal/http1"
	"golang.org/x/time/rate"
)

// httpServer is what serves -http: the fast path with net/http behind it
// (*http1.Server), or net/http alone (stdServer): over TLS, or with
// http.fast_path false.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	LoopStats() http1.LoopStats
	// ReserveRefused is the connections closed as soon as accepted
	// because the process was within its descriptor reserve.
	ReserveRefused() uint64
}

// certCheckEvery is how often, at most, the certificate's files are
// looked at for a change.
const certCheckEvery = time.Second

// certReloader serves the key pair of two files, read again when either
// changes (its modification time, size, inode or device: a rewrite in
// place or a symlink swapped), looked at no more than once every
// certCheckEvery. A pair that fails to load keeps the previous one.
// Safe for concurrent use.
type certReloader struct {
	certFile, keyFile string
	now               func() time.Time

	mu      sync.Mutex
	pair    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	mod        time.Time
	size       int64
	ino, dev   uint64
	statFailed bool
}

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path) // follows symlinks: a swapped link shows as another inode
	if err != nil {
		return fileStamp{statFailed: true}
	}
	s := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino, s.dev = uint64(st.Ino), uint64(st.Dev)
	}
	return s
}

// newCertReloader loads the pair now: an error names the files.
func newCertReloader(certFile, keyFile string, now func() time.Time) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, now: now}
	if err := r.load(); err != nil {
		return nil, err
	}
	r.checked = now()
	return r, nil
}

// load reads the pair (r.mu held, or r not yet shared).
func (r *certReloader) load() error {
	stamp := [2]fileStamp{stampOf(r.certFile), stampOf(r.keyFile)}
	pair, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("http.tls: load cert_file %s and key_file %s: %w", r.certFile, r.keyFile, err)
	}
	r.pair, r.stamp = &pair, stamp
	return nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		if [2]fileStamp{stampOf(r.certFile), stampOf(r.keyFile)} != r.stamp {
			_ = r.load() // a half-written pair fails to load: the old one serves until the next look
		}
	}
	return r.pair, nil
}

// tlsConfig is the server's TLS configuration of t: its certificate
// reloaded by a certReloader, and with a client CA a verified client
// certificate required.
func tlsConfig(t config.TLS, now func() time.Time) (*tls.Config, error) {
	r, err := newCertReloader(t.CertFile, t.KeyFile, now)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{"http/1.1"}}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("http.tls.client_ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("http.tls.client_ca_file %s: no PEM certificate in it", t.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// stdServer serves -http through net/http alone, over TLS when its
// TLSConfig is set, keeping the descriptor reserve as http1.Server does: a
// connection accepted within it is closed before its handshake.
type stdServer struct {
	srv      *http.Server
	reserve  *fdreserve.Reserve // nil: none (the limit is unknown)
	reserved atomic.Uint64
	log      *slog.Logger
	warn     rate.Sometimes // a reserve warning a second at most
}

// newStdServer returns the net/http server of h bounded by hc, over TLS
// with tc unless it is nil, warning on log.
func newStdServer(h http.Handler, hc config.HTTP, tc *tls.Config, log *slog.Logger) *stdServer {
	srv := newHTTPServer(h, hc)
	srv.TLSConfig = tc
	return &stdServer{srv: srv, reserve: fdreserve.New(fdreserve.DefaultReserve), log: log, warn: rate.Sometimes{Interval: time.Second}}
}

func (s *stdServer) Serve(ln net.Listener) error {
	if s.srv.TLSConfig == nil {
		return s.srv.Serve(reserveListener{ln, s})
	}
	return s.srv.Serve(tls.NewListener(reserveListener{ln, s}, s.srv.TLSConfig))
}

// ReserveRefused is the connections closed within the descriptor reserve.
func (s *stdServer) ReserveRefused() uint64 { return s.reserved.Load() }

// reserveListener closes, as soon as accepted, every connection of its
// Listener within s's descriptor reserve, counting it.
type reserveListener struct {
	net.Listener
	s *stdServer
}

func (l reserveListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.s.reserve.Full(c) {
			return c, err // net/http retries a temporary error (EMFILE) with a backoff
		}
		n := l.s.reserved.Add(1) // counted before the client can see the close
		_ = c.Close()
		l.s.warn.Do(func() {
			l.s.log.Warn("http connection closed: the node is within its descriptor reserve",
				"reserve", fdreserve.DefaultReserve, "from_descriptor", l.s.reserve.Mark(), "refused_total", n)
		})
	}
}

func (s *stdServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// LoopStats is zero: net/http serves no connection on an event loop.
func (s *stdServer) LoopStats() http1.LoopStats { return http1.LoopStats{} }
