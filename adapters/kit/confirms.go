package kit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/ports"
)

// Confirms collects the results of one driver SendBatch over a client
// whose confirms arrive asynchronously (a Kafka producer's Successes and
// Errors, AMQP publisher confirms, Pulsar send receipts): whoever learns
// the outcome of message i — the confirm listener, or the sender when it
// could not hand the message over — calls Resolve, and the sender waits
// with Wait. Only a message's first result counts. Safe for concurrent
// use.
type Confirms struct {
	mu       sync.Mutex
	errs     []error
	resolved []bool
	left     int
	done     chan struct{}
}

// NewConfirms returns the collector of n messages, none resolved.
func NewConfirms(n int) *Confirms {
	c := &Confirms{errs: make([]error, n), resolved: make([]bool, n), left: n, done: make(chan struct{})}
	if n == 0 {
		close(c.done)
	}
	return c
}

// Resolve records message i's result: nil when the broker confirmed it.
// A later result for i is ignored.
func (c *Confirms) Resolve(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resolved[i] {
		return
	}
	c.resolved[i], c.errs[i] = true, err
	if c.left--; c.left == 0 {
		close(c.done)
	}
}

// Wait returns once every message is resolved, or ctx is done and grace
// has passed too (confirms of messages already written still count
// then). It returns nil when every message was confirmed, else one error
// per message, nil for a confirmed one; a message still unresolved gets
// an error wrapping ports.ErrUnconfirmed and ctx.Err(): it may have been
// stored.
func (c *Confirms) Wait(ctx context.Context, grace time.Duration) []error {
	select {
	case <-c.done:
	case <-ctx.Done():
		t := time.NewTimer(grace)
		select {
		case <-c.done:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []error
	for i, err := range c.errs {
		if !c.resolved[i] {
			err = fmt.Errorf("%w: %w before the broker's confirm arrived (the message may have been stored)", ports.ErrUnconfirmed, ctx.Err())
		}
		if err != nil && out == nil {
			out = make([]error, len(c.errs))
		}
		if out != nil {
			out[i] = err
		}
	}
	return out
}
