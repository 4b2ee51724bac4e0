package node

import (
	"cmp"
	"slices"
	"strings"

	"github.com/tokenring/tokenring/limiter"
)

// KeyStatus is one key this node holds, with its limiter status.
type KeyStatus struct {
	Key    string
	Status limiter.Status
	// Used is the largest fraction used of the key's limited dimensions
	// (requests and tokens in the window, slots in use): 1 is at a limit,
	// above 1 overdrawn.
	Used float64
}

// Nearest returns up to k of the keys with prefix this node holds (the keys
// of the partitions it owns), nearest their limits first: by Used, largest
// first, then by key. A key with no limited dimension, or nothing used, is
// left out. It only reads: each key's status is taken under its shard lock,
// as /v1/tenants does, one key at a time, and nothing is marked changed.
func (n *Node) Nearest(prefix string, k int) []KeyStatus {
	if k <= 0 {
		return nil
	}
	now := n.cfg.Now()
	top := make([]KeyStatus, 0, k+1) // sorted, nearest first
	n.table.Range(func(key string) bool {
		if !strings.HasPrefix(key, prefix) {
			return true
		}
		var ks KeyStatus
		if !n.table.Peek(key, func(b *limiter.Budget) { ks.Status = b.Status(now) }) {
			return true // dropped meanwhile
		}
		ks.Key, ks.Used = key, used(ks.Status)
		if ks.Used <= 0 || (len(top) == k && nearer(top[k-1], ks) <= 0) {
			return true
		}
		i, _ := slices.BinarySearchFunc(top, ks, nearer)
		top = slices.Insert(top, i, ks)
		if len(top) > k {
			top = top[:k]
		}
		return true
	})
	return top
}

// nearer orders a before b when a is nearer its limits.
func nearer(a, b KeyStatus) int {
	if c := cmp.Compare(b.Used, a.Used); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// used is the largest fraction used of s's limited dimensions: above 1
// when one is overdrawn.
func used(s limiter.Status) float64 {
	u := 0.0
	for _, d := range []limiter.DimStatus{s.Requests, s.Tokens, s.Concurrency} {
		if d.Limit > 0 {
			u = max(u, float64(d.Limit-d.Remaining+d.Overdraft)/float64(d.Limit))
		}
	}
	return u
}
