package router

import (
	"fmt"
	"time"
)

// TableFullError is decide's error for a call the key's owner refused with
// limiter.TableFull: the key is new there and the owner already holds its
// node.Config.MaxKeys keys, none idle. Nothing was admitted, and no
// fallback applies (the owner answered); the HTTP answer is a 503 with a
// Retry-After (ownerTimeoutAnswer), since it is the server's limit, not the
// tenant's.
type TableFullError struct {
	owner string        // the member that refused
	retry time.Duration // until its next sweep may free room
}

func (e *TableFullError) Error() string {
	return fmt.Sprintf("too many keys held (max_keys reached at %s)", e.owner)
}

// RetryMS is the retry-after in milliseconds, at least 1.
func (e *TableFullError) RetryMS() int64 {
	return max(1, (e.retry + time.Millisecond - 1).Milliseconds())
}
