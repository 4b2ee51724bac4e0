package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net"
)

// slogWriter turns memberlist's log lines ("[WARN] memberlist: text") into
// slog records: [DEBUG] and [INFO] at debug level (this package logs the
// membership changes that matter itself), [WARN] at warn, [ERR] at error;
// but an error on a closed socket at debug: only Shutdown closes memberlist's
// sockets, and its probe and gossip goroutines racing with that are no
// error in an orderly stop.
type slogWriter struct {
	l *slog.Logger
}

// newStdLogger returns the *log.Logger memberlist wants, writing to l.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l.With("component", "memberlist")}, "", 0)
}

// Write logs one line. It never fails.
func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelDebug
	for _, pl := range []struct {
		prefix string
		level  slog.Level
	}{
		{"[DEBUG]", slog.LevelDebug},
		{"[INFO]", slog.LevelDebug},
		{"[WARN]", slog.LevelWarn},
		{"[ERR]", slog.LevelError},
		{"[ERROR]", slog.LevelError},
	} {
		if rest, ok := bytes.CutPrefix(line, []byte(pl.prefix)); ok {
			level, line = pl.level, bytes.TrimSpace(rest)
			break
		}
	}
	if level > slog.LevelDebug && bytes.Contains(line, []byte(net.ErrClosed.Error())) {
		level = slog.LevelDebug
	}
	ctx := context.Background()
	if w.l.Enabled(ctx, level) {
		line = bytes.TrimPrefix(line, []byte("memberlist: "))
		w.l.Log(ctx, level, string(line))
	}
	return len(p), nil
}
