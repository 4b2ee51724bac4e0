package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/tokenring/tokenring/config"

	"github.com/redis/go-redis/v9"
)

// newLogger writes log lines at level and above to w, in format: logfmt
// (slog's TextHandler) or json (its JSONHandler, the same fields).
func newLogger(w io.Writer, format config.LogFormat, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logFormat is -log-format, else the config file's log.format (logfmt
// when the file does not load: run reports why).
func logFormat(f flags, getenv func(string) string) config.LogFormat {
	if f.logFormat != "" {
		return config.LogFormat(f.logFormat)
	}
	if f.config != "" {
		if cfg, err := config.Load(f.config, getenv); err == nil {
			return cfg.Log.Format
		}
	}
	return config.LogFmt
}

// quietRedis sends go-redis's own log lines (connection pool dial retries,
// a flood against an unreachable -redis) through slog at debug, so that
// they show with -log-level debug only; the node warns about a failing
// checkpoint itself, at most once a minute. go-redis has only a
// process-wide logger (redis.SetLogger), so it is set here, once, and not
// in run.
func quietRedis(args []string, getenv func(string) string, stderr io.Writer) {
	level, format := slog.LevelInfo, config.LogFmt
	if f, err := parseFlags(args, getenv, io.Discard); err == nil {
		_ = level.UnmarshalText([]byte(f.logLevel)) // a bad level fails in run
		format = logFormat(f, getenv)
	}
	log := newLogger(stderr, format, level).With("component", "go-redis")
	redis.SetLogger(redisLogger{log})
}

// redisLogger is go-redis's logger interface over slog, at debug.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
