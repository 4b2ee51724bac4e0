package deploy

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenring/tokenring/config"
)

// TestHAProxyConfig: haproxy/haproxy.cfg balances TCP (L4) over the nodes'
// -http port as the image binds it, health-checks GET /readyz (which fails
// from SIGTERM on, during the drain) and takes a node out at its first
// failed check, keeps its inactivity timeouts above the proxy's default
// upstream.response_header_timeout, and passes haproxy -c when haproxy is
// installed.
func TestHAProxyConfig(t *testing.T) {
	const file = "haproxy/haproxy.cfg"
	text := readFile(t, file)
	img := checkDockerfile(t)
	var lines []string
	for line := range strings.Lines(text) {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.Join(strings.Fields(line), " "); line != "" {
			lines = append(lines, line)
		}
	}
	has := func(s string) bool {
		for _, l := range lines {
			if l == s {
				return true
			}
		}
		return false
	}
	for _, want := range []string{"mode tcp", "balance roundrobin", "option httpchk GET /readyz", "http-check expect status 200"} {
		if !has(want) {
			t.Errorf("%s: no %q", file, want)
		}
	}
	servers := 0
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case f[0] == "server" && len(f) >= 3:
			servers++
			if _, port, err := net.SplitHostPort(f[2]); err != nil || port != strconv.Itoa(img.Ports.HTTP) {
				t.Errorf("%s: %q: want the nodes' -http port %d", file, l, img.Ports.HTTP)
			}
			if !strings.Contains(l, " check") {
				t.Errorf("%s: %q is not health-checked", file, l)
			}
		case f[0] == "default-server" && !strings.Contains(l, "fall 1"):
			t.Errorf("%s: %q: take a node out at its first failed /readyz (fall 1): it fails only once the node drains", file, l)
		case f[0] == "timeout" && len(f) == 3 && (f[1] == "client" || f[1] == "server"):
			if d, err := time.ParseDuration(f[2]); err != nil || d <= config.DefaultResponseHeaderTimeout {
				t.Errorf("%s: %q: want more than upstream.response_header_timeout (%v): a non-streaming completion is silent until its end", file, l, config.DefaultResponseHeaderTimeout)
			}
		}
	}
	if servers < 2 {
		t.Errorf("%s: %d servers, want the nodes of a cluster", file, servers)
	}
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Log("haproxy not found: haproxy -c not tried")
		return
	}
	if out, err := exec.Command(haproxy, "-c", "-f", file).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c -f %s: %v\n%s", file, err, out)
	}
}
