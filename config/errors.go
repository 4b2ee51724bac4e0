package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// errorList collects validation errors in order.
type errorList []string

func (e *errorList) add(path, msg string) { *e = append(*e, path+": "+msg) }

func (e *errorList) count(path string, v, lo int64) {
	switch {
	case v < lo:
		e.add(path, fmt.Sprintf("must be >= %d, got %d", lo, v))
	case v > MaxLimit:
		e.add(path, fmt.Sprintf("must be <= 1e15, got %d", v))
	}
}

// duration checks lo <= d <= hi; lo is 1 for "must be > 0".
func (e *errorList) duration(path string, d, lo, hi time.Duration) {
	switch {
	case d <= 0:
		e.add(path, "must be > 0")
	case d < lo:
		e.add(path, fmt.Sprintf("must be >= %v, got %v", lo, d))
	case d > hi:
		e.add(path, fmt.Sprintf("must be <= %v, got %v", hi, d))
	}
}

// headerValue checks that s can be sent as an HTTP header value: no
// control characters (a CR or LF would start another header).
func (e *errorList) headerValue(path, s string) {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			e.add(path, "must not contain control characters")
			return
		}
	}
}

func (e *errorList) url(path, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		e.add(path, fmt.Sprintf("must be an http(s) URL, got %q", s))
	}
}

func (e errorList) err() error {
	if len(e) == 0 {
		return nil
	}
	return &Error{Msgs: e}
}

// Error is what Validate, Parse and Load return for a bad configuration: one
// message per problem, in file order for decoding problems and in field
// order for values out of range. Each names the field path
// ("limits.tenants.acme.rpm: must be >= 0, got -5"); problems of YAML syntax
// and structure (unknown or duplicate fields, wrong types) start with the
// line ("line 7: limits.default.rmp: unknown field").
type Error struct {
	File string   // set by Load
	Msgs []string // at least one
}

// Error returns the messages joined by newlines, each prefixed with
// "File: " when File is set.
func (e *Error) Error() string {
	if e.File == "" {
		return strings.Join(e.Msgs, "\n")
	}
	return e.File + ": " + strings.Join(e.Msgs, "\n"+e.File+": ")
}
