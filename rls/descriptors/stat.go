package descriptors

import (
	"regexp"
	"strings"
)

// ipv4 is what the reference's SanitizeStatName takes for an IPv4 address.
// A compiled regexp is immutable and safe for concurrent use.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// SanitizeStat returns the name the reference gives the counters of stats
// key stat (utils.SanitizeStatName): ':' and '|' become '_', and so do the
// dots of anything that looks like an IPv4 address. The counters are then
// "ratelimit.service.rate_limit." + SanitizeStat(stat) + ".total_hits",
// ".over_limit", ".near_limit", ".over_limit_with_local_cache",
// ".within_limit" and ".shadow_mode".
func SanitizeStat(stat string) string {
	if strings.ContainsAny(stat, ":|") {
		b := []byte(stat) // bytes, as the reference's strings.Replacer: invalid UTF-8 is kept
		for i, c := range b {
			if c == ':' || c == '|' {
				b[i] = '_'
			}
		}
		stat = string(b)
	}
	return ipv4.ReplaceAllStringFunc(stat, func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}
