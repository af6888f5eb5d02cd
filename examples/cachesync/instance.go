package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/flow"
	"github.com/sluicemq/sluice/ports"
)

// instance is one running copy of the service with its local cache.
type instance struct {
	name    string
	catalog *catalog
	p       *flow.Pipeline

	mu      sync.Mutex
	cache   map[string]Entry
	events  int
	changed chan struct{} // closed and replaced on every event
}

// start subscribes the instance to the broadcast topic, then loads its
// cache from the catalog. In that order no change can fall between the
// snapshot and the subscription: a change made after the snapshot is
// announced to a subscription that already exists.
func start(ctx context.Context, a ports.Adapter, reg *ports.Registry, topic ports.Topic, name string, c *catalog) (*instance, error) {
	in := &instance{name: name, catalog: c, cache: map[string]Entry{}, changed: make(chan struct{})}
	spec, err := reg.Broadcast(topic, "api", name)
	if err != nil {
		return nil, err
	}
	in.p = flow.New(a, spec)
	flow.Sink(flow.Decode[Changed](in.p.Source()), in.refresh)
	if err := in.p.Start(ctx); err != nil {
		return nil, err
	}
	in.mu.Lock()
	in.cache = c.snapshot()
	in.mu.Unlock()
	return in, nil
}

// refresh handles one change: a newer version is read from the catalog;
// an older or equal one (a duplicate, a reordered or retried event) is
// ignored. The event is acked either way.
func (in *instance) refresh(_ context.Context, ev Changed) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.events++
	defer in.notifyLocked()
	if ev.Version <= in.cache[ev.Key].Version {
		return nil
	}
	e, ok := in.catalog.get(ev.Key)
	if !ok {
		return ports.Poisonf("change of unknown key %q", ev.Key)
	}
	in.cache[ev.Key] = e
	return nil
}

func (in *instance) notifyLocked() {
	close(in.changed)
	in.changed = make(chan struct{})
}

// waitEvents blocks until the instance handled n events.
func (in *instance) waitEvents(ctx context.Context, n int) error {
	for {
		in.mu.Lock()
		got, ch := in.events, in.changed
		in.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s handled %d of %d events: %w", in.name, got, n, ctx.Err())
		}
	}
}

func (in *instance) state() (int, map[string]Entry) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c := make(map[string]Entry, len(in.cache))
	for k, e := range in.cache {
		c[k] = e
	}
	return in.events, c
}
