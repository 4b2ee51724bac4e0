package config

import (
	"os"
	"strings"
	"testing"
)

// TestDocsMemoryBound: docs/operations.md states the formula MemoryBound
// uses.
func TestDocsMemoryBound(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	for _, s := range []string{"≈ 17 MiB, ≈ 45 MiB once a prompt was counted", "+ 2 × (`max_keys` × 2 KiB + open connections × 24 KiB) + 64 MiB"} {
		if !strings.Contains(text, s) {
			t.Errorf("docs/operations.md no longer says %q: update MemoryBound", s)
		}
	}
}
