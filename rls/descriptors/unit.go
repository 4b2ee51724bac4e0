package descriptors

import (
	"strings"
	"time"
)

// Unit is a rate limit's unit of time. Its values are those of Envoy's
// envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit, so a Unit
// converts to that enum by number, and String is the enum value's name.
type Unit int32

// The units, numbered as Envoy's enum.
const (
	UnitUnknown Unit = 0 // no unit: only an unlimited limit has it
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

// ParseUnit returns the unit named s, in any case, as the reference reads a
// rate_limit's unit (strings.ToUpper, then the enum's names). UNKNOWN and
// names outside the enum are not units: ok is false.
func ParseUnit(s string) (u Unit, ok bool) {
	switch strings.ToUpper(s) {
	case "SECOND":
		return Second, true
	case "MINUTE":
		return Minute, true
	case "HOUR":
		return Hour, true
	case "DAY":
		return Day, true
	case "WEEK":
		return Week, true
	case "MONTH":
		return Month, true
	case "YEAR":
		return Year, true
	}
	return UnitUnknown, false
}

// String returns the unit's name in Envoy's enum: "SECOND", "MINUTE",
// "HOUR", "DAY", "WEEK", "MONTH", "YEAR", or "UNKNOWN".
func (u Unit) String() string {
	switch u {
	case Second:
		return "SECOND"
	case Minute:
		return "MINUTE"
	case Hour:
		return "HOUR"
	case Day:
		return "DAY"
	case Week:
		return "WEEK"
	case Month:
		return "MONTH"
	case Year:
		return "YEAR"
	}
	return "UNKNOWN"
}

// Duration returns the unit's length, the length of the reference's window
// for it (utils.UnitToDivider): a day is 24 hours, a week 7 days, a month 30
// days and a year 365 days. UnitUnknown, and any value outside the enum, is
// 0. Every length is within limiter.Limits' cap of 366 days.
func (u Unit) Duration() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}
