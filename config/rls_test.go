package config

import (
	"strings"
	"testing"
)

// TestRLSSections: grpc and rls are read as written, all_or_nothing
// stays true unless the file says false, and a bad address or an unknown
// field is refused with its path.
func TestRLSSections(t *testing.T) {
	c, err := Parse([]byte("grpc: {addr: \"127.0.0.1:8081\"}\nrls: {config_dir: /etc/rls, response_headers: true}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.GRPC.Addr != "127.0.0.1:8081" || c.RLS != (RLS{ConfigDir: "/etc/rls", AllOrNothing: true, ResponseHeaders: true}) {
		t.Errorf("read %+v %+v", c.GRPC, c.RLS)
	}
	if c, err = Parse([]byte("rls: {all_or_nothing: false}\n"), env(nil)); err != nil || c.RLS.AllOrNothing {
		t.Errorf("all_or_nothing: false read as %+v, %v", c.RLS, err)
	}
	for text, want := range map[string]string{
		"grpc: {addr: nope}\n":   "grpc.addr: must be host:port",
		"rls: {config: /x}\n":    "rls.config: unknown field",
		"grpc: {addr: [1, 2]}\n": "grpc.addr",
	} {
		if _, err := Parse([]byte(text), env(nil)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
}
