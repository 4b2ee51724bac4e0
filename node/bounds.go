package node

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/tokenring/tokenring/limiter"
)

// randomID is the default limiter.Policy.IDs: lease ids a client cannot
// guess, from crypto/rand (which never fails: it panics the process rather
// than return predictable bytes).
func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// checkReplica rejects a replica of key that would not decode
// (limiter.RestoreBudget), or whose times lie beyond now plus MaxClockSkew
// (limiter.Budget.CheckClock), so that a forged or corrupt copy cannot
// displace a good one, or later be fetched into a key refused for years. It builds no Budget
// (limiter.CheckSnapshot): a backup runs it for every key of every round.
func (n *Node) checkReplica(key string, state []byte, now time.Time) error {
	if err := limiter.CheckSnapshot(state, n.cfg.LimitsFor(key), now, n.cfg.MaxClockSkew); err != nil {
		return fmt.Errorf("replica of %q: %w", key, err)
	}
	return nil
}

// Go maps never give back the memory of deleted entries. A per-key map
// that may once have held many keys is therefore rebuilt, sized for what it
// holds, when it falls below a quarter of its high-water mark (at least
// shrinkMinHWM), like the limiter table's shards.
const shrinkMinHWM = 64

// shrinkable tracks a map's high-water mark; the zero value is ready.
type shrinkable struct{ hwm int }

// grew records that the map now holds n entries.
func (s *shrinkable) grew(n int) { s.hwm = max(s.hwm, n) }

// shrink returns m rebuilt, never nil, if it fell below a quarter of its
// high-water mark, else m itself. Its cost is paid by the deletions since
// the last rebuild: amortised O(1) per deletion.
func shrink[K comparable, V any](s *shrinkable, m map[K]V) map[K]V {
	if s.hwm < shrinkMinHWM || len(m) >= s.hwm/4 {
		return m
	}
	s.hwm = len(m)
	fresh := make(map[K]V, len(m))
	for k, v := range m {
		fresh[k] = v
	}
	return fresh
}
