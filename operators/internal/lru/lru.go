// Package lru is a map bounded by size and age, ordered by last write: the
// memory behind the dedupe store and the attempt counter. It is not safe
// for concurrent use; its owner locks it.
package lru

import "time"

type node[K comparable, V any] struct {
	key        K
	val        V
	at         int64 // write time, ns on the cache's clock
	prev, next *node[K, V]
}

// Cache keeps at most Max entries, each for at most TTL after it was last
// written. Reads do not refresh an entry: age and eviction both follow the
// last write. Expired entries are dropped lazily, oldest first, on every
// write and on reads that find them.
type Cache[K comparable, V any] struct {
	max  int
	ttl  int64
	now  func() int64
	m    map[K]*node[K, V]
	root node[K, V] // sentinel: root.next is newest, root.prev oldest
}

// New returns a cache of at most max entries (max <= 0: unbounded) that
// expire ttl after their last write (ttl <= 0: never). now is the clock in
// nanoseconds (nil: a monotonic clock).
func New[K comparable, V any](max int, ttl time.Duration, now func() int64) *Cache[K, V] {
	if now == nil {
		start := time.Now()
		now = func() int64 { return int64(time.Since(start)) }
	}
	c := &Cache[K, V]{max: max, ttl: int64(ttl), now: now, m: make(map[K]*node[K, V])}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

// Len returns the number of entries, expired ones not yet dropped included.
func (c *Cache[K, V]) Len() int { return len(c.m) }

// Get returns the value of k, if present and not expired.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	n, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	if c.expired(n, c.now()) {
		c.unlink(n)
		var zero V
		return zero, false
	}
	return n.val, true
}

// Put writes k, making it the newest entry, and evicts the oldest entries
// beyond the size bound and every expired one.
func (c *Cache[K, V]) Put(k K, v V) {
	now := c.now()
	if n, ok := c.m[k]; ok {
		n.val, n.at = v, now
		c.detach(n)
		c.pushFront(n)
	} else {
		n := &node[K, V]{key: k, val: v, at: now}
		c.m[k] = n
		c.pushFront(n)
	}
	c.trim(now)
}

// Delete removes k.
func (c *Cache[K, V]) Delete(k K) {
	if n, ok := c.m[k]; ok {
		c.unlink(n)
	}
}

// Trim drops expired entries now (writes do it too).
func (c *Cache[K, V]) Trim() { c.trim(c.now()) }

func (c *Cache[K, V]) trim(now int64) {
	for c.max > 0 && len(c.m) > c.max {
		c.unlink(c.root.prev)
	}
	for old := c.root.prev; old != &c.root && c.expired(old, now); old = c.root.prev {
		c.unlink(old)
	}
}

func (c *Cache[K, V]) expired(n *node[K, V], now int64) bool {
	return c.ttl > 0 && now-n.at >= c.ttl
}

func (c *Cache[K, V]) pushFront(n *node[K, V]) {
	n.prev, n.next = &c.root, c.root.next
	c.root.next.prev = n
	c.root.next = n
}

func (c *Cache[K, V]) detach(n *node[K, V]) {
	n.prev.next = n.next
	n.next.prev = n.prev
	n.prev, n.next = nil, nil
}

func (c *Cache[K, V]) unlink(n *node[K, V]) {
	c.detach(n)
	delete(c.m, n.key)
}
