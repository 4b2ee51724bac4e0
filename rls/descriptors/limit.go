package descriptors

import "github.com/tokenring/tokenring/limiter"

// Limit is one rate_limit of a configuration: the rule a descriptor matched.
// The Limits a Config hands out are shared and must not be modified.
type Limit struct {
	// Rule is the composite key of the rule's descriptor: its domain and,
	// for each level, "key" or "key_value" as configured (a wildcard pattern
	// included), joined by dots: "messaging.message_type_marketing.to_number".
	// It is unique within the domain and the same for every match of the
	// rule; it is the reference's RateLimit.FullKey at load.
	Rule string
	// Stat is the key the reference names this match's counters by: Rule,
	// or, where detailed_metric, value_to_metric or share_threshold apply,
	// the same path with the request's values (see the package doc).
	// SanitizeStat turns it into the reference's counter name.
	Stat string
	// Name is the rule's name, for another rule's Replaces; "" when unnamed.
	Name string
	// Unit is the length of the window; UnitUnknown only when Unlimited.
	Unit Unit
	// RequestsPerUnit is the number of requests admitted per Unit. Zero
	// admits none (the reference's deny list, DeniesAll), unless the limit
	// has TokensPerUnit or Concurrency: then zero is no request limit.
	RequestsPerUnit uint32
	// Unlimited limits are always answered OK, and counted nowhere.
	Unlimited bool
	// ShadowMode limits are counted, but never refuse a request.
	ShadowMode bool
	// QuotaMode is the reference's quota_mode: a request is refused only when
	// every quota-mode limit it matched is over (the server's rule).
	QuotaMode bool
	// DetailedMetric makes Stat carry every entry's value.
	DetailedMetric bool
	// Replaces names the limits this one replaces (Replace); nil when none.
	Replaces []string
	// TokensPerUnit is tokenring's token limit: prompt and completion
	// tokens per Unit; 0 when none.
	TokensPerUnit int64
	// Concurrency is tokenring's limit on requests in flight, each holding
	// a slot from its start to its end; 0 when none.
	Concurrency int64
	// RequestIDKey is the key of the descriptor entry that carries the
	// request id (Match), "" when none. Set whenever TokensPerUnit or
	// Concurrency is.
	RequestIDKey string
}

// DeniesAll reports whether l refuses every request: a limit of the
// reference's kind (not Unlimited, no TokensPerUnit or Concurrency) whose
// RequestsPerUnit is zero. limiter.Limits cannot say this (its zero is
// unlimited), so the server must answer such a limit itself.
func (l *Limit) DeniesAll() bool {
	return !l.Unlimited && l.RequestsPerUnit == 0 && l.TokensPerUnit == 0 && l.Concurrency == 0
}

// Limits returns l as limiter limits: RequestsPerUnit, TokensPerUnit and
// Concurrency per Unit's Duration. An Unlimited limit has zero limits, as
// has a limit that DeniesAll (which limiter.Limits reads as unlimited:
// check DeniesAll first).
func (l *Limit) Limits() limiter.Limits {
	lim := limiter.Limits{Tokens: l.TokensPerUnit, Concurrency: l.Concurrency, Window: l.Unit.Duration()}
	if !l.Unlimited {
		lim.Requests = int64(l.RequestsPerUnit)
	}
	return lim
}

// Replace applies the reference's replaces rule to the limits one request's
// descriptors matched (limits[i] for descriptor i, nil where none matched),
// and reports which take effect. A named limit that any matched limit's
// Replaces names does not take effect, even when the replacing limit is
// itself replaced; nor does a nil one. An Unlimited limit always does: the
// reference answers it OK whatever replaces it, and its Replaces count like
// any other's.
func Replace(limits []*Limit) (kept []bool) {
	kept = make([]bool, len(limits))
	var replaced map[string]bool
	for _, l := range limits {
		if l == nil {
			continue
		}
		for _, name := range l.Replaces {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			replaced[name] = true
		}
	}
	for i, l := range limits {
		kept[i] = l != nil && (l.Unlimited || l.Name == "" || !replaced[l.Name])
	}
	return kept
}
