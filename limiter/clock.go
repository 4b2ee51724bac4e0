package limiter

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultMaxClockSkew is how far ahead of the local clock a restored state's
// times may lie, unless a Table is given another bound (SetMaxClockSkew).
const DefaultMaxClockSkew = time.Minute

// ErrFutureState is wrapped by the errors CheckClock (and Table.Put)
// return for a state dated beyond now plus the clock-skew bound. Such a
// state would keep its key refused until that date (a window head in the
// year 2200 holds its units for 173 years), so it is never applied.
var ErrFutureState = errors.New("limiter: state dated in the future")

// CheckClock returns an error wrapping ErrFutureState if a time b holds lies
// beyond what a node whose clock is within skew of now could have written:
// the latest time seen (the window head) after now+skew, or a lease expiry
// after now+skew+LeaseTTL (a lease renewed at the writer's now). A negative
// skew counts as 0. It reads the clock-valued fields only; a snapshot holds
// no waiters, and debts (Charge) are clamped to the newest bucket anyway.
func (b *Budget) CheckClock(now time.Time, skew time.Duration) error {
	skew = min(max(skew, 0), maxDuration)
	limit := addSat(now.UnixNano(), int64(skew))
	if b.last > limit {
		return fmt.Errorf("%w: latest time %s is %s ahead of now %s (max clock skew %s)",
			ErrFutureState, time.Unix(0, b.last).UTC().Format(time.RFC3339), time.Duration(b.last-limit)+skew, now.UTC().Format(time.RFC3339), skew)
	}
	expLimit := addSat(limit, int64(b.lim.LeaseTTL))
	if len(b.leases) > 0 && b.maxExp > expLimit {
		for id, l := range b.leases {
			if l.expiry > expLimit {
				return fmt.Errorf("%w: lease %d expires at %s, beyond now %s + lease TTL %s + max clock skew %s",
					ErrFutureState, id, time.Unix(0, l.expiry).UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), b.lim.LeaseTTL, skew)
			}
		}
	}
	return nil
}

// addSat is a+b (b ≥ 0) saturated at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
