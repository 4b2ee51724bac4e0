package main

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
)

// TestMemoryWatchKeysDrop: memory is returned once the keys fall to half
// their high-water mark (by at least memoryKeysDrop), and not for a small
// or shallow drop; the mark then restarts from the keys left.
func TestMemoryWatchKeysDrop(t *testing.T) {
	m := newMemoryWatch()
	const busy = memoryQuietBytes // allocating: only the keys rule can fire
	steps := []struct {
		keys int
		want bool
	}{{100_000, false}, {90_000, false}, {50_001, false}, {50_000, true}, {40_000, false}, {12_000, true}, {8_000, false}, {25_000, false}, {12_500, true}, {12_000, false}}
	for i, s := range steps {
		got, why := m.decide(1<<40, busy, s.keys)
		if got != s.want {
			t.Fatalf("step %d: %d keys (high %d): due %v (%s), want %v", i, s.keys, m.keysHigh, got, why, s.want)
		}
		if got {
			m.restart(1<<40, s.keys)
		}
	}
}

// TestMemoryWatchIdleHeap: a heap grown by over memoryIdleBytes since the
// last return is returned only while the node is quiet (allocates under
// memoryQuietBytes an interval), never under load however large the heap
// (a forced collection of hundreds of MiB during the soak's flood held
// /healthz over 100 ms); and once returned, a heap that stays (live keys)
// is not collected again until it grows by memoryIdleBytes more.
func TestMemoryWatchIdleHeap(t *testing.T) {
	m := newMemoryWatch()
	m.restart(20<<20, 0) // what a node at rest holds
	const quiet, busy = memoryQuietBytes - 1, memoryQuietBytes
	steps := []struct {
		heap, allocated uint64
		want            bool
		returnedTo      uint64 // what the return left, when want
	}{
		{heap: 700 << 20, allocated: 2 << 30, want: false}, // the flood: a big heap, allocating
		{heap: 700 << 20, allocated: busy, want: false},
		{heap: 20<<20 + memoryIdleBytes, allocated: 0, want: false}, // quiet, but grown by exactly the bound
		{heap: 20<<20 + memoryIdleBytes + 1, allocated: quiet, want: true, returnedTo: 220 << 20},
		{heap: 230 << 20, allocated: 0, want: false}, // live: left alone
		{heap: 220<<20 + memoryIdleBytes + 1, allocated: 0, want: true, returnedTo: 30 << 20},
		{heap: 60 << 20, allocated: 0, want: false},
	}
	for i, s := range steps {
		got, why := m.decide(s.heap, s.allocated, 0)
		if got != s.want {
			t.Fatalf("step %d: heap %d MiB (last return left %d), %d allocated: due %v (%s), want %v",
				i, s.heap>>20, m.heapLow>>20, s.allocated, got, why, s.want)
		}
		if got {
			m.restart(s.returnedTo, 0)
		}
	}
}

// TestReleaseEmptiesPools: release frees what sync.Pools hold (as
// net/http's pools hold the buffers of 10,000 closed connections), which
// a single collection only moves to the pools' victim caches, and returns
// it to the OS.
func TestReleaseEmptiesPools(t *testing.T) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	read := func() (objects, released uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64()
	}
	release()
	before, _ := read()
	var pool sync.Pool
	const n, size = 16_384, 8 << 10 // 128 MiB: a connection's read and write buffers, 16,384 times
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	for _, b := range bufs {
		pool.Put(b)
	}
	bufs = nil
	release()
	after, released := read()
	t.Logf("heap objects %d MiB before, %d MiB after release; %d MiB released", before>>20, after>>20, released>>20)
	if after > before+16<<20 {
		t.Fatalf("heap objects %d MiB after release, want within 16 MiB of the %d MiB before the pool held 128 MiB", after>>20, before>>20)
	}
	if released < 100<<20 {
		t.Fatalf("%d MiB released to the OS, want at least 100 of the pool's 128", released>>20)
	}
	runtime.KeepAlive(&pool)
}
