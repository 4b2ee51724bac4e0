// Package shrink gives back the memory of Go maps that shrank. A Go map
// never gives back the memory of deleted entries, so a per-key map that
// once held many keys (waiters, replicas, acknowledged copies) is rebuilt,
// sized for what it holds, when it falls below a quarter of its high-water
// mark (at least minHWM), like the limiter table's shards. The cost of a
// rebuild is paid by the deletions since the last one: amortised O(1) per
// deletion.
package shrink

// minHWM is the least high-water mark worth a rebuild.
const minHWM = 64

// HighWater tracks a map's high-water mark; the zero value is ready.
type HighWater struct{ hwm int }

// Grew records that the map now holds n entries.
func (h *HighWater) Grew(n int) { h.hwm = max(h.hwm, n) }

// Mark is the high-water mark recorded: the most entries the map held since
// its last rebuild.
func (h *HighWater) Mark() int { return h.hwm }

// Map returns m rebuilt, never nil, if it fell below a quarter of its
// high-water mark, else m itself.
func Map[K comparable, V any](h *HighWater, m map[K]V) map[K]V {
	if h.hwm < minHWM || len(m) >= h.hwm/4 {
		return m
	}
	h.hwm = len(m)
	fresh := make(map[K]V, len(m))
	for k, v := range m {
		fresh[k] = v
	}
	return fresh
}
