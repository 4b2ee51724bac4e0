package config

import (
	"fmt"
	"net"

	"go.yaml.in/yaml/v3"
)

// GRPC is the "grpc:" section: the gRPC server of Envoy's rate limit
// service (docs/envoy.md). It serves over TLS, and asks for client
// certificates, exactly as -http does (http.tls), and takes the same
// clients: tokens.
type GRPC struct {
	// Addr is the address the gRPC server listens on ("host:port"); the
	// -grpc flag, when given, wins. Empty (the default): no gRPC server,
	// so that a node that does not serve Envoy opens no port for it.
	Addr string `yaml:"addr,omitempty"`
}

// RLS is the "rls:" section: Envoy's rate limit service.
type RLS struct {
	// ConfigDir is a directory of the reference service's rate limit
	// files (github.com/envoyproxy/ratelimit's YAML, with tokenring's
	// tokens_per_unit, concurrency and request_id_key), read at the start
	// and again whenever a file in it changes, and on SIGHUP. Empty: no
	// descriptors, every domain unknown (NOT_FOUND).
	ConfigDir string `yaml:"config_dir,omitempty"`
	// AllOrNothing decides a request's descriptors together: a refusal
	// at one charges none of the others (default true). false decides
	// each on its own, as the reference does.
	AllOrNothing bool `yaml:"all_or_nothing"`
	// ResponseHeaders adds the RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset headers (draft-polli-ratelimit-headers-03) of the
	// descriptor closest to its limit to every answer, as the reference's
	// LIMIT_RESPONSE_HEADERS_ENABLED does (default false).
	ResponseHeaders bool `yaml:"response_headers"`
}

// validateRLS checks the grpc and rls sections.
func (c Config) validateRLS(errs *errorList) {
	if a := c.GRPC.Addr; a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			errs.add("grpc.addr", fmt.Sprintf("must be host:port, got %q", a))
		}
	}
}

// rls decodes grpc and rls.
func (d *decoder) rls(f map[string]*yaml.Node, c *Config) {
	if g := d.fields(f["grpc"], "grpc", "addr"); g != nil {
		d.string(g["addr"], "grpc.addr", &c.GRPC.Addr)
	}
	if r := d.fields(f["rls"], "rls", "config_dir", "all_or_nothing", "response_headers"); r != nil {
		d.string(r["config_dir"], "rls.config_dir", &c.RLS.ConfigDir)
		d.bool(r["all_or_nothing"], "rls.all_or_nothing", &c.RLS.AllOrNothing)
		d.bool(r["response_headers"], "rls.response_headers", &c.RLS.ResponseHeaders)
	}
}
