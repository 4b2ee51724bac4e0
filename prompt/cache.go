package prompt

import (
	"strings"
	"sync"
)

// Bounds of a countCache. Texts are kept as map keys, so the memory a
// cache holds is at most about 2 × cacheGenBytes of text plus about 50
// bytes an entry.
const (
	// cacheGenBytes is the text one generation holds before it becomes
	// the previous one (and the previous one is dropped).
	cacheGenBytes = 4 << 20
	// maxCachedText is the longest text remembered; longer ones are
	// counted every time (they would push out too many others).
	maxCachedText = 256 << 10
)

// countCache remembers the token counts of the texts of prompts in one
// encoding, so that what requests repeat (roles, system prompts, the
// earlier turns of a conversation, which each turn sends again) is
// encoded once. A count is a pure function of the text, so a cached count
// is the count. It is safe for concurrent use; the zero value is empty.
//
// Eviction is by generation: new counts go into cur; when cur holds
// cacheGenBytes of text it becomes prev and a new cur starts, so a text
// used at least once a generation stays.
type countCache struct {
	mu       sync.RWMutex
	cur      map[string]int
	prev     map[string]int
	curBytes int
}

// get returns the remembered count of text. A count found in the previous
// generation moves to the current one.
func (c *countCache) get(text string) (int, bool) {
	c.mu.RLock()
	n, ok := c.cur[text]
	if ok {
		c.mu.RUnlock()
		return n, true
	}
	n, ok = c.prev[text]
	c.mu.RUnlock()
	if ok {
		c.put(text, n)
	}
	return n, ok
}

// put remembers n as the count of text, unless text is longer than
// maxCachedText.
func (c *countCache) put(text string, n int) {
	if len(text) > maxCachedText {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.cur[text]; ok {
		return
	}
	if c.cur == nil || c.curBytes+len(text) > cacheGenBytes {
		c.prev, c.cur, c.curBytes = c.cur, make(map[string]int), 0
	}
	c.cur[strings.Clone(text)] = n // not a slice of a larger text the caller holds
	c.curBytes += len(text)
}
