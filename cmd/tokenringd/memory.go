package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Memory return. After a flood ends (a million tenants whose keys the
// sweep drops once their window empties, ten thousand connections that
// close) the heap they held is garbage, but the Go runtime collects only
// as the program allocates, and gives free pages back to the OS slowly.
// returnMemory collects and returns everything free (debug.FreeOSMemory)
// when either:
//   - the keys held fell to half or less of their high-water mark, by at
//     least memoryKeysDrop (the mark then starts again from the keys left);
//   - or no collection ran for a whole interval (the node is quiet) while
//     the heap holds over memoryIdleBytes beyond what was live at the last
//     one (connections that closed, buffers of a burst).
//
// Under load neither holds (collections run often and the keys stay), so
// nothing is forced while it matters.
const (
	memoryCheckInterval = 5 * time.Second
	memoryIdleBytes     = 64 << 20
	memoryKeysDrop      = 10_000
)

// heapSamples are the runtime/metrics returnMemory reads.
var heapSamples = []string{
	"/memory/classes/heap/objects:bytes", // live and dead objects not yet swept
	"/memory/classes/heap/free:bytes",    // free and not yet returned to the OS
	"/gc/heap/live:bytes",                // live after the last collection
	"/gc/cycles/total:gc-cycles",
}

// memoryWatch is returnMemory's state between checks.
type memoryWatch struct {
	samples  []metrics.Sample
	cycles   uint64 // collections counted at the last check
	keysHigh int    // the keys' high-water mark since the last return
}

func newMemoryWatch() *memoryWatch {
	m := &memoryWatch{samples: make([]metrics.Sample, len(heapSamples))}
	for i, name := range heapSamples {
		m.samples[i].Name = name
	}
	return m
}

// due reports whether memory should be returned now, keys being the keys
// held.
func (m *memoryWatch) due(keys int) (bool, string) {
	metrics.Read(m.samples)
	objects, free, live := m.samples[0].Value.Uint64(), m.samples[1].Value.Uint64(), m.samples[2].Value.Uint64()
	cycles := m.samples[3].Value.Uint64()
	quiet := cycles == m.cycles
	m.cycles = cycles
	m.keysHigh = max(m.keysHigh, keys)
	switch {
	case m.keysHigh-keys >= memoryKeysDrop && keys <= m.keysHigh/2:
		m.keysHigh = keys
		return true, "keys dropped"
	case quiet && int64(objects+free)-int64(live) > memoryIdleBytes:
		return true, "idle heap"
	}
	return false, ""
}

// returnMemory runs until ctx ends; see above. keys is the number of keys
// the node holds.
func returnMemory(ctx context.Context, log *slog.Logger, keys func() int) {
	m := newMemoryWatch()
	t := time.NewTicker(memoryCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ok, why := m.due(keys()); ok {
			debug.FreeOSMemory()
			m.due(keys()) // count the collection just forced as seen
			log.Info("returned free memory to the OS", "why", why, "keys", keys())
		}
	}
}

// background runs fn in a goroutine with a context derived from ctx, and
// returns the function that cancels it and waits until fn has returned.
func background(ctx context.Context, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
