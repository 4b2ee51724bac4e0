package main

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Memory return. After a flood ends (a million tenants whose keys the
// sweep drops once their window empties, ten thousand connections that
// close) the heap they held is garbage, but the Go runtime collects only
// as the program allocates, and gives free pages back to the OS slowly;
// the buffers of closed net/http connections even wait in sync.Pools,
// which only a second collection empties. returnMemory collects twice and
// returns everything free (debug.FreeOSMemory) when either:
//   - the keys held fell to half or less of their high-water mark, by at
//     least memoryKeysDrop (the mark then starts again from the keys left);
//   - or the node is quiet (it allocated under memoryQuietBytes in a whole
//     interval) and its heap grew by over memoryIdleBytes since the last
//     return: connections that closed, buffers of a burst. What a return
//     leaves is the new mark, so a heap that is live (keys that stay) is
//     collected once, not every interval.
//
// Quiet is measured by what was allocated, not by whether a collection
// ran: under a flood with a large heap the collector may not run for
// several seconds, and a forced collection then (a whole mark of a heap
// of hundreds of MiB, on a host whose cores the flood already takes) and
// the pages given back only to be faulted in again stalled the node's
// answers by over 100 ms.
const (
	memoryCheckInterval = 5 * time.Second
	memoryIdleBytes     = 64 << 20
	memoryQuietBytes    = 32 << 20 // allocated in an interval: ~6 MiB/s, a few thousand decisions a second
	memoryKeysDrop      = 10_000
)

// heapSamples are the runtime/metrics returnMemory reads.
var heapSamples = []string{
	"/memory/classes/heap/objects:bytes", // live and dead objects not yet swept
	"/memory/classes/heap/free:bytes",    // free and not yet returned to the OS
	"/gc/heap/allocs:bytes",              // allocated since the start
}

// memoryWatch is returnMemory's state between checks.
type memoryWatch struct {
	samples  []metrics.Sample
	allocs   uint64 // bytes allocated at the last check
	heapLow  uint64 // the heap (objects and free) the last return left
	keysHigh int    // the keys' high-water mark since the last return
}

func newMemoryWatch() *memoryWatch {
	m := &memoryWatch{samples: make([]metrics.Sample, len(heapSamples))}
	for i, name := range heapSamples {
		m.samples[i].Name = name
	}
	m.read()
	return m
}

// read samples the runtime; it returns the heap's objects and free bytes
// and the bytes allocated since the last read.
func (m *memoryWatch) read() (heap, allocated uint64) {
	metrics.Read(m.samples)
	heap = m.samples[0].Value.Uint64() + m.samples[1].Value.Uint64()
	allocs := m.samples[2].Value.Uint64()
	allocated, m.allocs = allocs-m.allocs, allocs
	return heap, allocated
}

// due reports whether memory should be returned now, keys being the keys
// held.
func (m *memoryWatch) due(keys int) (bool, string) {
	heap, allocated := m.read()
	return m.decide(heap, allocated, keys)
}

// decide is due for a heap of heap bytes (objects and free), allocated
// bytes allocated since the last check and keys keys.
func (m *memoryWatch) decide(heap, allocated uint64, keys int) (bool, string) {
	m.keysHigh = max(m.keysHigh, keys)
	switch {
	case m.keysHigh-keys >= memoryKeysDrop && keys <= m.keysHigh/2:
		return true, "keys dropped"
	case allocated < memoryQuietBytes && heap > m.heapLow+memoryIdleBytes:
		return true, "idle heap"
	}
	return false, ""
}

// returned records a return: the marks start again from what is left.
func (m *memoryWatch) returned(keys int) {
	heap, _ := m.read()
	m.restart(heap, keys)
}

func (m *memoryWatch) restart(heap uint64, keys int) { m.heapLow, m.keysHigh = heap, keys }

// release collects, twice, and returns every free page to the OS. The
// first collection moves what sync.Pools hold (net/http's buffers of
// closed connections) to their victim caches; the second frees it.
func release() {
	runtime.GC()
	debug.FreeOSMemory()
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
			release()
			m.returned(keys())
			log.Info("returned free memory to the OS", "why", why, "keys", keys(), "heap_bytes", m.heapLow)
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
