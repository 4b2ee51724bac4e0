package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// LogFormat is how tokenringd writes its log lines.
type LogFormat string

const (
	// LogFmt writes key=value lines (log/slog's TextHandler), the default.
	LogFmt LogFormat = "logfmt"
	// LogJSON writes one JSON object a line (log/slog's JSONHandler) with
	// the same levels and fields: time, level, msg, then the line's
	// key-value pairs.
	LogJSON LogFormat = "json"
)

// Log is the "log:" section.
type Log struct {
	// Format is logfmt (the default) or json; the -log-format flag, when
	// given, wins. Read at start only.
	Format LogFormat `yaml:"format"`
}

// validateLog checks the log section.
func (c Config) validateLog(errs *errorList) {
	switch c.Log.Format {
	case LogFmt, LogJSON:
	default:
		errs.add("log.format", fmt.Sprintf("must be logfmt or json, got %q", string(c.Log.Format)))
	}
}

// log decodes the log section.
func (d *decoder) log(f map[string]*yaml.Node, c *Config) {
	if l := d.fields(f["log"], "log", "format"); l != nil {
		var s string
		if d.string(l["format"], "log.format", &s) {
			c.Log.Format = LogFormat(s)
		}
	}
}
