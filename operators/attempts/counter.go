// Package attempts counts delivery attempts per message id for adapters
// whose broker does not (an MQTT broker redelivering without a count, a
// Kafka republish that loses the header): the adapter adds one when it
// requeues a message and reads the count back when the message is
// delivered again.
//
// Memory is bounded by a number of entries and an age: past either bound
// the oldest counts are forgotten, so a count is exact for recent messages
// and a lower bound otherwise — declare Capabilities.ExactRedeliveryCount
// accordingly. The package imports no broker client and nothing of flow.
package attempts

import (
	"sync"
	"time"

	"github.com/sluicemq/sluice/operators/internal/lru"
)

// Options bound a Counter. Zero fields take the defaults.
type Options struct {
	// MaxEntries bounds the number of message ids counted. Default 100000.
	MaxEntries int
	// TTL forgets a count this long after it was last changed. Default 24h.
	TTL time.Duration
}

// Counter counts attempts per message id. It is safe for concurrent use;
// use New.
type Counter struct {
	mu sync.Mutex
	c  *lru.Cache[string, int]
}

// New returns an empty Counter.
func New(o Options) *Counter {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 100_000
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	return &Counter{c: lru.New[string, int](o.MaxEntries, o.TTL, nil)}
}

// Add records one more attempt of id and returns the new count.
func (c *Counter) Add(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _ := c.c.Get(id)
	n++
	c.c.Put(id, n)
	return n
}

// Get returns the count of id (0 when unknown or forgotten).
func (c *Counter) Get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, _ := c.c.Get(id)
	return n
}

// Forget drops id's count: call it when the message is acked or
// dead-lettered.
func (c *Counter) Forget(id string) {
	c.mu.Lock()
	c.c.Delete(id)
	c.mu.Unlock()
}

// Len returns the number of ids counted.
func (c *Counter) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c.Len()
}
