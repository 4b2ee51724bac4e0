package config

import (
	"strings"
	"testing"
)

// TestMaxPromptBytes: limits.max_prompt_bytes is read, defaults to 256 KiB
// and is refused outside 1..1 MiB with the field named.
func TestMaxPromptBytes(t *testing.T) {
	c, err := Parse([]byte("limits: {max_prompt_bytes: 64_000}\n"), nil)
	if err != nil || c.Limits.MaxPromptBytes != 64_000 {
		t.Fatalf("64_000: %d, %v", c.Limits.MaxPromptBytes, err)
	}
	for _, v := range []string{"0", "-1", "1048577"} {
		_, err := Parse([]byte("limits: {max_prompt_bytes: "+v+"}\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "limits.max_prompt_bytes: must be between 1 and 1048576, got "+v) {
			t.Fatalf("%s: %v", v, err)
		}
	}
}
