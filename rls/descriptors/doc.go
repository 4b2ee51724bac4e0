// Package descriptors reads the rate limit configuration files of Envoy's
// reference rate limit service (github.com/envoyproxy/ratelimit) as they are,
// and matches request descriptors against them as that service does.
//
// The package does no I/O but Load's reading of a directory, starts no
// goroutines and keeps no state outside its values. A Config is immutable
// once built and safe for concurrent use; so are the *Limit values it hands
// out, which callers must not modify.
//
// # Files
//
// One file holds one domain and its tree of descriptors:
//
//	domain: messaging
//	descriptors:
//	  - key: message_type          # required
//	    value: marketing           # optional; may hold '*' wildcards
//	    descriptors:               # optional: the next entry of a descriptor
//	      - key: to_number
//	        rate_limit:            # optional: the rule of this level
//	          unit: day            # second, minute, hour, day, week, month, year (any case)
//	          requests_per_unit: 5 # uint32; 0 refuses every request
//	          unlimited: false     # true: always OK; then no unit
//	          name: marketing      # optional, for replaces
//	          replaces:            # optional: the named limits this one replaces
//	            - name: other
//	        shadow_mode: false     # the limit is counted but never refuses
//	        quota_mode: false      # the reference's quota mode, passed on
//	        detailed_metric: false # Stat carries the request's values
//	        value_to_metric: false # Stat carries this level's request value
//	        share_threshold: false # every value a wildcard matches shares one counter
//	        metadata: {}           # accepted, not kept
//
// Parse takes what the reference's file loader (config_impl.go,
// ConfigFileContentToYaml and loadDescriptors) takes and refuses what it
// refuses, with the reference's message, the file's name and where in the
// file (an *Error):
//
//   - text that is not YAML, or whose top is not a mapping;
//   - a key that is not a string, or not one of the format's keys above
//     (checked at every level, as the reference does: a known key in the
//     wrong place is accepted and ignored, like the reference's);
//   - a list holding something other than mappings; a value that is a
//     float or otherwise not a string, integer, boolean or null;
//   - a value of the wrong type for its field (a negative or too large
//     requests_per_unit, a list where a string goes);
//   - a file without a domain, a domain in two files;
//   - a descriptor without a key; two descriptors of one level with the
//     same composite key ("key_value", or "key" without a value);
//   - a unit the reference does not know, or none, unless unlimited; a
//     unit with unlimited: true;
//   - an empty replaces name, or one that names its own limit;
//   - share_threshold on a descriptor whose composite key has no '*'.
//
// It accepts what the reference accepts, even where that looks like a
// mistake: replaces naming no limit, two limits with one name, a missing
// requests_per_unit (0: every request refused), unlimited with a
// requests_per_unit, unlimited with a unit it does not know. Where it
// differs from the reference, it is stricter: a mapping with a key twice
// (the reference keeps the last), an alias nested in itself, and the
// extensions' misuse below are refused. Domains in two files are refused
// (the reference's default; its MERGE_DOMAIN_CONFIG is not supported).
//
// The YAML is read with yaml.v3, the reference's with yaml.v2; where the two
// differ the reading is yaml.v2's: the values of string fields are their
// text as written (007 stays "007"), booleans include YAML 1.1's unquoted
// yes, no, on, off, y and n (a quoted one is refused), and a merge key
// ("<<") sets its keys in the order written, overriding the keys before
// it. Anchors and aliases work. Only a file's first document is read. The
// messages of YAML-level refusals are yaml.v3's, not yaml.v2's.
//
// # Matching
//
// Match is the reference's GetLimit. A request's descriptor is a list of
// entries (key, value); the walk starts at the domain's top level and takes
// one level per entry. At each level it looks for the child whose composite
// key is "key_value", then for the first wildcard child (in file order)
// whose composite key, a pattern where each '*' stands for any run of bytes,
// matches "key_value", then for the child "key" (a descriptor without a
// value: any value, each value its own counter). The walk stops where no
// child matches or the matched child has no children. A limit applies only
// if the walk matches the descriptor's last entry and that level has a
// rate_limit: a shorter or longer descriptor gets none (the README's
// example 4). Composite keys join key and value with '_', as the reference
// does, so a key holding '_' can meet a value of another key: the match is
// the reference's, quirks included.
//
// A match's Limit carries Stat, the key the reference names its counters by
// (ratelimit.service.rate_limit.<Stat>.total_hits and so on, after
// SanitizeStat): the rule's composite key, with the request's values in
// place of the configured ones where detailed_metric, value_to_metric or
// share_threshold say so, as the reference builds it.
//
// The limiter key of a match is Key of the domain and the entries, as the
// reference's cache key: one counter per distinct descriptor. MatchKey
// builds it, with the value of each entry matched by a share_threshold
// wildcard replaced by the wildcard's pattern (all those values share a
// counter) and without the request-id entry (below).
//
// Replace applies replaces across the limits one request's descriptors
// matched, as the reference's service does.
//
// # Units
//
// The reference counts in fixed windows aligned on the Unix epoch, each as
// long as the unit's divider in seconds (utils.UnitToDivider): SECOND 1 s,
// MINUTE 60 s, HOUR 3600 s, DAY 86400 s, WEEK 7 days, MONTH 30 days, YEAR
// 365 days; the reset it reports is the end of the current window.
// tokenring's limiter counts in a sliding window: Unit.Duration gives the
// window of the same length. In any interval that long it admits at most
// the limit, where the reference's fixed windows admit up to twice the
// limit across a boundary and then reset at once.
//
// # tokenring's extensions
//
// Three keys, accepted only inside rate_limit (and refused there by the
// reference, so a file using them is tokenring's):
//
//	rate_limit:
//	  unit: minute
//	  requests_per_unit: 600     # optional here: 0 or absent means no request limit
//	  tokens_per_unit: 200000    # prompt+completion tokens per unit
//	  concurrency: 20            # requests in flight, each holding a slot until its stream ends
//	  request_id_key: request_id # the entry carrying the request id
//
// tokens_per_unit and concurrency are counts (int64, not negative; 0 means
// no such limit). A limit with either needs request_id_key, the key of the
// descriptor entry that carries the request's id (Envoy's x-request-id, by
// a request_headers action), so that the call at the request's end can
// settle what the call at its start reserved. Such a limit is refused with
// unlimited: true, and so is a request_id_key that is also the key of one of
// the descriptor's children.
//
// When the walk matches, at entry i, a level whose rate_limit has a
// request_id_key, and entry i+1 is the descriptor's last and has that key,
// the limit applies (before any child is tried for entry i+1) and Match
// returns entry i+1's value as the request id. That entry is not part of the
// limit: MatchKey's key, Stat and LimitsOf cover entries 0..i only, so the
// limit is per tenant (say), not per request. A descriptor ending at entry
// i matches the same limit the ordinary way, with no request id. When
// tokens_per_unit or concurrency is set, requests_per_unit of 0 means no
// request limit rather than the reference's refuse-everything.
package descriptors
