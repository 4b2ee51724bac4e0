package main

import "testing"

// TestMemoryWatchKeysDrop: memory is returned once the keys fall to half
// their high-water mark (by at least memoryKeysDrop), and not for a small
// or shallow drop; the mark then restarts from the keys left.
func TestMemoryWatchKeysDrop(t *testing.T) {
	m := newMemoryWatch()
	m.cycles = ^uint64(0) // never quiet: only the keys rule can fire
	steps := []struct {
		keys int
		want bool
	}{{100_000, false}, {90_000, false}, {50_001, false}, {50_000, true}, {40_000, false}, {12_000, true}, {8_000, false}, {25_000, false}, {12_500, true}, {12_000, false}}
	for i, s := range steps {
		m.cycles = ^uint64(0)
		if got, why := m.due(s.keys); got != s.want {
			t.Fatalf("step %d: %d keys (high %d): due %v (%s), want %v", i, s.keys, m.keysHigh, got, why, s.want)
		}
	}
}
