package router

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Input bounds, shared by the decision API and the LLM proxy. Anything
// outside is refused (a 400, or 413 for a body) and changes nothing.
const (
	MaxBody   = 1 << 20          // bytes of a request body
	maxName   = 256              // bytes of a tenant or model name
	MaxTokens = 100_000_000      // prompt_tokens, max_tokens, usage fields
	MaxWait   = 10 * time.Minute // wait_ms
)

// CheckName checks a tenant, model, group or pool name given as field:
// required or not, at most maxName bytes of valid UTF-8 without U+FFFD or
// a control character. No name it accepts holds U+001F, the separator of
// a model-scoped key (chain.go).
func CheckName(field, s string, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%s is required", field)
	case len(s) > maxName:
		return fmt.Errorf("%s longer than %d bytes", field, maxName)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", field)
	case strings.ContainsRune(s, utf8.RuneError):
		// encoding/json turns invalid UTF-8 and lone surrogates (\ud800)
		// into U+FFFD: different byte strings would share one tenant.
		return fmt.Errorf("%s contains U+FFFD (invalid UTF-8 or a lone surrogate)", field)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}

// CheckCount checks a count of tokens given as field: 0 to MaxTokens.
func CheckCount(field string, v int64) error {
	if v < 0 || v > MaxTokens {
		return fmt.Errorf("%s must be between 0 and %d, got %d", field, MaxTokens, v)
	}
	return nil
}
