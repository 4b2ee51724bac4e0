package router

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// tableFullError is decide's error for a call the key's owner refused with
// limiter.TableFull: the key is new there and the owner already holds its
// node.Config.MaxKeys keys, none idle. Nothing was admitted, and no
// fallback applies (the owner answered); the HTTP answer is a 503 with a
// Retry-After (writeTableFull), since it is the server's limit, not the
// tenant's.
type tableFullError struct {
	owner string        // the member that refused
	retry time.Duration // until its next sweep may free room
}

func (e *tableFullError) Error() string {
	return fmt.Sprintf("too many keys held (max_keys reached at %s)", e.owner)
}

// retryMS is the retry-after in milliseconds, at least 1.
func (e *tableFullError) retryMS() int64 {
	return max(1, (e.retry + time.Millisecond - 1).Milliseconds())
}

// writeTableFull writes the decision API's 503 for err if it is a
// *tableFullError, and reports whether it did.
func writeTableFull(w http.ResponseWriter, err error) bool {
	var full *tableFullError
	if !errors.As(err, &full) {
		return false
	}
	ms := full.retryMS()
	setRetryAfter(w, ms)
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": full.Error(), "retry_after_ms": ms})
	return true
}
