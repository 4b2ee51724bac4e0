package limiter

import "time"

// Period is the span a spend limit (Limits.Spend) counts over, aligned to
// calendar boundaries in Loc: what is spent is forgotten exactly at each
// boundary. The zero Period is Total: it never resets.
type Period struct {
	Unit PeriodUnit
	// Every is the length of a PeriodEvery period; periods of it start at
	// the Unix epoch's multiples of Every (a short period for tests and
	// for budgets per hour). Ignored for the other units.
	Every time.Duration
	// Loc is the time zone of the calendar boundaries (midnight, Monday,
	// the first of the month); nil means UTC.
	Loc *time.Location
}

// PeriodUnit is a Period's kind.
type PeriodUnit uint8

const (
	PeriodTotal PeriodUnit = iota // never resets
	PeriodDay                     // from midnight to midnight
	PeriodWeek                    // from Monday 00:00 to the next
	PeriodMonth                   // from the first of the month 00:00 to the next
	PeriodEvery                   // Period.Every long, from the epoch
)

// String returns the unit's name in the config: "total", "day", "week",
// "month", or Every's duration.
func (p Period) String() string {
	switch p.Unit {
	case PeriodDay:
		return "day"
	case PeriodWeek:
		return "week"
	case PeriodMonth:
		return "month"
	case PeriodEvery:
		return p.Every.String()
	}
	return "total"
}

// same reports whether p and q cut time alike (the same unit, length
// and time zone name; two loads of one zone are the same).
func (p Period) same(q Period) bool {
	name := func(l *time.Location) string {
		if l == nil {
			return "UTC"
		}
		return l.String()
	}
	return p.Unit == q.Unit && (p.Unit != PeriodEvery || p.Every == q.Every) && name(p.Loc) == name(q.Loc)
}

// endOfTime is the end of a Total period: far enough never to come, and
// a valid unix ns.
const endOfTime = int64(1) << 62

// bounds returns the start and end (unix ns; start ≤ t < end) of the
// period holding t. A Total period is [math.MinInt64-ish, endOfTime).
func (p Period) bounds(t int64) (start, end int64) {
	loc := p.Loc
	if loc == nil {
		loc = time.UTC
	}
	switch p.Unit {
	case PeriodEvery:
		e := max(int64(p.Every), 1)
		start = floorDiv(t, e) * e
		return start, start + e
	case PeriodDay, PeriodWeek, PeriodMonth:
		c := time.Unix(0, t).In(loc)
		y, m, d := c.Date()
		var s, n time.Time
		switch p.Unit {
		case PeriodDay:
			s = time.Date(y, m, d, 0, 0, 0, 0, loc)
			n = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
		case PeriodWeek:
			back := (int(c.Weekday()) + 6) % 7 // days since Monday
			s = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
			n = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
		default:
			s = time.Date(y, m, 1, 0, 0, 0, 0, loc)
			n = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
		}
		return s.UnixNano(), n.UnixNano()
	}
	return -endOfTime, endOfTime
}
