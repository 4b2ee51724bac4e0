package main

// Envoy's rate limit service (package rls): its gRPC server on -grpc
// (grpc.addr), and the rate limit files of rls.config_dir, read again when
// they change.

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/tokenring/tokenring/api"
	"github.com/tokenring/tokenring/config"
	"github.com/tokenring/tokenring/frontdoor"
	"github.com/tokenring/tokenring/gossip"
	"github.com/tokenring/tokenring/node"
	"github.com/tokenring/tokenring/rls"
	"github.com/tokenring/tokenring/rls/descriptors"
	"github.com/tokenring/tokenring/router"
)

// grpcAddr is the gRPC server's address: -grpc, else grpc.addr; "" for
// none.
func grpcAddr(f flags, cfg config.Config) string {
	if f.grpc != "" {
		return f.grpc
	}
	return cfg.GRPC.Addr
}

// loadDescriptors reads rls.config_dir into cur; none without one. A
// directory that does not load stops the node at the start (a reload
// keeps the old files instead: rlsDir).
func loadDescriptors(cfg config.Config, cur *live) error {
	if cfg.RLS.ConfigDir == "" {
		return nil
	}
	d, err := descriptors.Load(cfg.RLS.ConfigDir)
	if err != nil {
		return fmt.Errorf("rls.config_dir %s: %w", cfg.RLS.ConfigDir, err)
	}
	cur.descs.Store(d)
	return nil
}

// limitsHash is what a node gossips as the limits it admits with: the
// config's LimitsHash, and with rate limit files their hash too.
func limitsHash(cfg config.Config, descs *descriptors.Config) string {
	h := cfg.LimitsHash()
	if descs == nil {
		return h
	}
	sum := sha256.Sum256([]byte(h + "\x00" + descs.Hash()))
	return hex.EncodeToString(sum[:len(h)/2])
}

// newFrontEnds makes the HTTP side (newRouter) and, with -grpc or
// rls.config_dir, Envoy's rate limit service over the same router, the
// files of rls.config_dir read into cur first.
func newFrontEnds(f flags, n *node.Node, cfg config.Config, cur *live, ready func() bool, reg *prometheus.Registry, log *slog.Logger) (*frontdoor.Door, *rlsServer, error) {
	if err := loadDescriptors(cfg, cur); err != nil {
		return nil, nil, err
	}
	r, err := newRouter(n, cfg, cur, ready, reg, log)
	if err != nil {
		return nil, nil, err
	}
	rs, err := newRLS(grpcAddr(f, cfg), cfg, cur, r.Router(), reg, log.With("component", "rls"))
	if err != nil {
		r.Close()
		return nil, nil, err
	}
	return r, rs, nil
}

// serve serves srv on ln and the rate limit service's gRPC server (rs;
// nil: none); the channel gets the first of their ends.
func serve(srv httpServer, ln net.Listener, rs *rlsServer) <-chan error {
	errc := make(chan error, 2) // the HTTP server's end, the gRPC server's
	go func() { errc <- fmt.Errorf("serve http: %w", srv.Serve(ln)) }()
	rs.serve(errc)
	return errc
}

// rlsServer is a node's rate limit service and, with an address, its gRPC
// server, listening there once served.
type rlsServer struct {
	srv  *rls.Server
	gs   *grpc.Server // nil: no -grpc
	addr string       // -grpc, grpc.addr
	ln   net.Listener // once served
	log  *slog.Logger
}

// newRLS makes the rate limit service deciding through r, with cur's
// descriptors and cfg's clients, and with an address its gRPC server: over
// TLS (and mutual TLS) as -http is, with http.tls. nil when there is
// neither an address nor rls.config_dir.
func newRLS(addr string, cfg config.Config, cur *live, r *router.Router, reg prometheus.Registerer, log *slog.Logger) (*rlsServer, error) {
	if addr == "" && cfg.RLS.ConfigDir == "" {
		return nil, nil
	}
	srv, err := rls.New(r, rls.Config{PerDescriptor: !cfg.RLS.AllOrNothing, ResponseHeaders: cfg.RLS.ResponseHeaders,
		Registry: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	srv.SetDescriptors(cur.descs.Load())
	srv.SetClients(api.NewClients(clientTokens(cfg), clientCerts(cfg), limitSetters(cfg)))
	s := &rlsServer{srv: srv, addr: addr, log: log}
	if addr == "" {
		return s, nil
	}
	tc, err := grpcTLS(cfg)
	if err != nil {
		return nil, err
	}
	s.gs = srv.GRPC(tc)
	return s, nil
}

// serve listens on the gRPC address and serves there until stop; a
// listener that fails, or the server's end, is sent on errc.
func (s *rlsServer) serve(errc chan<- error) {
	if s == nil || s.gs == nil {
		return
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		errc <- fmt.Errorf("listen -grpc %s: %w", s.addr, err)
		return
	}
	s.ln = ln
	go func() {
		if err := s.gs.Serve(s.ln); err != nil {
			errc <- fmt.Errorf("serve grpc: %w", err)
		}
	}()
}

// drain makes the gRPC health service say NOT_SERVING (rls.Server.Drain).
func (s *rlsServer) drain() {
	if s != nil {
		s.srv.Drain()
	}
}

// stop lets the calls in progress finish (GOAWAY to the clients, which go
// to another node) for up to timeout, then closes what is left.
func (s *rlsServer) stop(timeout time.Duration) {
	if s == nil || s.gs == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		s.gs.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("grpc shutdown: calls still in progress closed", "after", timeout)
		s.gs.Stop()
		<-done
	}
}

// listening is the gRPC listener's address; "" without one.
func (s *rlsServer) listening() string {
	if s == nil || s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// grpcTLS is the gRPC server's TLS configuration: http.tls's (tlsConfig:
// the certificate reloaded when its files change, a client certificate
// required with a client CA), speaking HTTP/2 only; nil without http.tls.
func grpcTLS(cfg config.Config) (*tls.Config, error) {
	if !cfg.HTTP.TLS.Enabled() {
		return nil, nil
	}
	tc, err := tlsConfig(cfg.HTTP.TLS, time.Now)
	if err != nil {
		return nil, err
	}
	tc.NextProtos = []string{"h2"}
	return tc, nil
}

// rlsDir is rls.config_dir as a node reloads it: whenever one of its files
// changes (rewritten, renamed, added, removed, or reached through a
// swapped symlink, as a mounted ConfigMap's), looked at with the config
// file (configCheckEvery), and on SIGHUP. A directory that loads is handed
// to apply; one that does not keeps the files in force, logs
// descriptors.Load's error (file, line, field) and counts
// tokenring_rls_config_reloads_total{result="refused"}. Not safe for
// concurrent use: the config file's loop owns it.
type rlsDir struct {
	path    string
	apply   func(*descriptors.Config)
	current *descriptors.Config
	stamp   string
	log     *slog.Logger
	reloads *prometheus.CounterVec
}

func newRLSDir(path string, current *descriptors.Config, apply func(*descriptors.Config), log *slog.Logger) *rlsDir {
	d := &rlsDir{path: path, apply: apply, current: current, stamp: dirStamp(path), log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenring_rls_config_reloads_total",
			Help: "Reloads of rls.config_dir, by result: applied (a changed directory loaded and took effect) or refused (it did not load: the old files stay).",
		}, []string{"result"})}
	d.reloads.WithLabelValues("applied")
	d.reloads.WithLabelValues("refused")
	return d
}

// check loads the directory when a file's stamp changed (or always, when
// forced) and applies it when what it says changed.
func (d *rlsDir) check(forced bool) {
	st := dirStamp(d.path)
	if !forced && st == d.stamp {
		return
	}
	d.stamp = st
	next, err := descriptors.Load(d.path)
	if err != nil {
		d.log.Error("rls config reload refused: the old rate limit files stay", "dir", d.path, "err", err)
		d.reloads.WithLabelValues("refused").Inc()
		return
	}
	if d.current != nil && next.Hash() == d.current.Hash() {
		return
	}
	d.current = next
	d.apply(next)
	d.log.Info("rls config reloaded", "dir", d.path, "domains", strings.Join(next.Domains(), ","), "hash", next.Hash())
	d.reloads.WithLabelValues("applied").Inc()
}

// dirStamp is what tells that the files of dir changed: every entry's
// name and its file's stamp (through a symlink), in name order.
func dirStamp(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var b strings.Builder
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s %+v\n", name, stampOf(filepath.Join(dir, name)))
	}
	return b.String()
}

// rlsReloaded applies reloaded rate limit files to a running node: cur
// and the service take them, the node's keys look at their limits again,
// and the new limits hash is gossiped.
func rlsReloaded(cur *live, s *rlsServer, n *node.Node, members *gossip.Cluster, log *slog.Logger) func(*descriptors.Config) {
	return func(d *descriptors.Config) {
		cur.descs.Store(d)
		s.srv.SetDescriptors(d)
		n.LimitsChanged()
		if err := members.SetLimitsHash(limitsHash(cur.p.Load().cfg, d), time.Second); err != nil {
			log.Warn("limits hash not published", "err", err)
		}
	}
}

// watchRLS returns the check of rls.config_dir for the config file's loop
// (nil without one), its metric registered on reg.
func watchRLS(cfg config.Config, cur *live, s *rlsServer, n *node.Node, members *gossip.Cluster, reg prometheus.Registerer, log *slog.Logger) func(bool) {
	if cfg.RLS.ConfigDir == "" || s == nil {
		return nil
	}
	d := newRLSDir(cfg.RLS.ConfigDir, cur.descs.Load(), rlsReloaded(cur, s, n, members, log), log)
	reg.MustRegister(d.reloads)
	return d.check
}
