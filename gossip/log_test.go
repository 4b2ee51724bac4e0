package gossip

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// memberlist's levels map onto slog's; an error on a socket Shutdown closed
// is debug, not error noise in an orderly stop.
func TestMemberlistLogLevels(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"[ERR] memberlist: Failed to send UDP ping: write udp 127.0.0.1:7953->127.0.0.1:7951: use of closed network connection", "level=DEBUG"},
		{"[ERR] memberlist: Failed to send gossip to 127.0.0.1:7951: write udp 127.0.0.1:7952->127.0.0.1:7951: use of closed network connection", "level=DEBUG"},
		{"[ERR] memberlist: Failed to send ping: write udp: connection refused", "level=ERROR"},
		{"[WARN] memberlist: Was able to connect to n2 over TCP but UDP probes failed", "level=WARN"},
		{"[INFO] memberlist: Suspect n2 has failed", "level=DEBUG"},
	} {
		var buf bytes.Buffer
		newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))).Print(tc.line)
		if !strings.Contains(buf.String(), tc.want) {
			t.Errorf("%q logged %q, want %s", tc.line, buf.String(), tc.want)
		}
	}
}
